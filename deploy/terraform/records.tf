# The upload records' database URL, when records are on: a secret the
# overlay's external secret store copies into mintgate-secrets/postgres-url.
# The database itself (RDS, Aurora PostgreSQL, Cloud SQL…) is the
# operator's: its sizing, partitioning and retention are in
# docs/production.md, "Upload records"; the operator step applies the
# schema with the owner's URL (mintgate-secrets/postgres-owner-url).
resource "aws_secretsmanager_secret" "postgres_url" {
  count       = var.postgres_url == "" ? 0 : 1
  name        = "${var.name_prefix}-postgres-url"
  description = "MINTGATE_POSTGRES_URL of the mintgate signer and sweeper (upload records)."
}

resource "aws_secretsmanager_secret_version" "postgres_url" {
  count         = var.postgres_url == "" ? 0 : 1
  secret_id     = aws_secretsmanager_secret.postgres_url[0].id
  secret_string = var.postgres_url
}
