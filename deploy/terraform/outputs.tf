output "bucket_name" {
  description = "MINTGATE_S3_BUCKET."
  value       = aws_s3_bucket.uploads.id
}

output "bucket_arn" {
  value = aws_s3_bucket.uploads.arn
}

output "queue_url" {
  description = "MINTGATE_SQS_QUEUE_URL."
  value       = aws_sqs_queue.uploads.url
}

output "queue_arn" {
  value = aws_sqs_queue.uploads.arn
}

output "dlq_url" {
  description = "Where undecodable S3 events end up."
  value       = aws_sqs_queue.uploads_dlq.url
}

output "signer_role_arn" {
  description = "Annotate the mintgate-signer service account with it (eks.amazonaws.com/role-arn)."
  value       = aws_iam_role.signer.arn
}

output "completer_role_arn" {
  description = "Annotate the mintgate-completer service account with it (eks.amazonaws.com/role-arn)."
  value       = aws_iam_role.completer.arn
}

output "sweeper_role_arn" {
  description = "Annotate the mintgate-sweeper service account with it (eks.amazonaws.com/role-arn)."
  value       = aws_iam_role.sweeper.arn
}

output "postgres_url_secret_arn" {
  description = "The Secrets Manager secret holding MINTGATE_POSTGRES_URL (null while records are off)."
  value       = var.postgres_url == "" ? null : aws_secretsmanager_secret.postgres_url[0].arn
}
