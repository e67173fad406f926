variable "region" {
  description = "AWS region of the bucket and the queue (MINTGATE_S3_REGION, AWS_REGION)."
  type        = string
  default     = "us-east-1"
}

variable "name_prefix" {
  description = "Prefix of the IAM role and policy names."
  type        = string
  default     = "mintgate"
}

variable "bucket_name" {
  description = "The upload bucket (MINTGATE_S3_BUCKET). Globally unique."
  type        = string
}

variable "queue_name" {
  description = "The queue S3 sends ObjectCreated events to; the dead-letter queue is <name>-dlq."
  type        = string
  default     = "mintgate-uploads"
}

variable "incoming_expiration_days" {
  description = "Objects left under incoming/ longer than this are deleted: uploads that nothing claimed."
  type        = number
  default     = 1
}

variable "max_receive_count" {
  description = "Receives of a message the completer cannot handle before it moves to the dead-letter queue."
  type        = number
  default     = 5
}

variable "queue_visibility_timeout_seconds" {
  description = "How long a received message stays hidden before another completer may take it."
  type        = number
  default     = 30
}

variable "cors_allowed_origins" {
  description = "Origins of the pages that upload from browsers (PUT with the signed headers). Empty: no CORS rule."
  type        = list(string)
  default     = []
}

variable "eks_oidc_provider_arn" {
  description = "ARN of the EKS cluster's IAM OIDC provider; the service accounts assume their roles through it (IRSA)."
  type        = string
}

variable "eks_oidc_issuer" {
  description = "The cluster's OIDC issuer URL (with or without https://)."
  type        = string
}

variable "k8s_namespace" {
  description = "Namespace of the mintgate service accounts (deploy/k8s)."
  type        = string
  default     = "mintgate"
}

variable "alarm_actions" {
  description = "SNS topic ARNs told when the dead-letter queue holds messages."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags on every resource."
  type        = map(string)
  default = {
    app = "mintgate"
  }
}

variable "postgres_url" {
  description = <<-EOT
    The upload records' PostgreSQL for the signer and the sweeper
    (MINTGATE_POSTGRES_URL, the role mintgate_service of
    deploy/postgres/grants.sql), e.g. an RDS or Aurora PostgreSQL instance
    this module does not manage: postgres://mintgate_service:<password>@<host>:5432/mintgate?sslmode=verify-full.
    Kept in a Secrets Manager secret (postgres_url_secret_arn) for the
    overlay's external secret store to copy into mintgate-secrets/postgres-url.
    Empty: records off.
  EOT
  type        = string
  default     = ""
  sensitive   = true
}
