# The upload bucket. Browsers PUT into incoming/<tenant>/<urlId> with URLs the
# signer presigns; nothing here is public, and nothing else writes there.

data "aws_caller_identity" "current" {}

resource "aws_s3_bucket" "uploads" {
  bucket = var.bucket_name
}

resource "aws_s3_bucket_public_access_block" "uploads" {
  bucket = aws_s3_bucket.uploads.id

  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

# ACLs off: the bucket owner owns every object, whoever uploaded it.
resource "aws_s3_bucket_ownership_controls" "uploads" {
  bucket = aws_s3_bucket.uploads.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

# SSE-S3. SSE-KMS with a customer key would also need kms:GenerateDataKey for
# the signer's role and a key policy for the readers.
resource "aws_s3_bucket_server_side_encryption_configuration" "uploads" {
  bucket = aws_s3_bucket.uploads.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "uploads" {
  bucket = aws_s3_bucket.uploads.id

  # An upload the application never moved out of incoming/ is abandoned.
  rule {
    id     = "expire-unclaimed-incoming"
    status = "Enabled"

    filter {
      prefix = "incoming/"
    }

    expiration {
      days = var.incoming_expiration_days
    }
  }

  # The belt under the sweeper: it aborts our multipart uploads under
  # incoming/ at their grant's end (MINTGATE_MULTIPART_TTL, at most 12h, +
  # grace); this removes, a day after it started, one it never aborts (a
  # signer killed between creating the upload and recording its grant
  # leaves one with no parts), and one started any other way anywhere in
  # the bucket, whose parts would be stored (and billed) until aborted.
  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"

    filter {}

    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}

# Browsers PUT single uploads and multipart parts. A part's ETag is in the
# PUT's answer and the browser must read it to complete the upload: expose it.
resource "aws_s3_bucket_cors_configuration" "uploads" {
  count  = length(var.cors_allowed_origins) > 0 ? 1 : 0
  bucket = aws_s3_bucket.uploads.id

  cors_rule {
    allowed_origins = var.cors_allowed_origins
    allowed_methods = ["PUT"]
    allowed_headers = ["content-type", "if-none-match", "x-amz-checksum-sha256"]
    expose_headers  = ["ETag"]
    max_age_seconds = 600
  }
}

data "aws_iam_policy_document" "bucket" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.uploads.arn,
      "${aws_s3_bucket.uploads.arn}/*",
    ]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "uploads" {
  bucket = aws_s3_bucket.uploads.id
  policy = data.aws_iam_policy_document.bucket.json

  depends_on = [aws_s3_bucket_public_access_block.uploads]
}

# ObjectCreated under incoming/ → the completer's queue. S3 checks that it may
# send to the queue when this is applied, hence the dependency on the policy.
resource "aws_s3_bucket_notification" "uploads" {
  bucket = aws_s3_bucket.uploads.id

  queue {
    id            = "mintgate-object-created"
    queue_arn     = aws_sqs_queue.uploads.arn
    events        = ["s3:ObjectCreated:*"]
    filter_prefix = "incoming/"
  }

  depends_on = [aws_sqs_queue_policy.uploads]
}
