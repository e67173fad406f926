# The queue of S3 events the completer consumes, and its dead-letter queue:
# a message the completer cannot parse is never deleted, and after
# max_receive_count receives SQS moves it aside.

resource "aws_sqs_queue" "uploads_dlq" {
  name                      = "${var.queue_name}-dlq"
  message_retention_seconds = 1209600 # 14 days, the longest: time to look
  sqs_managed_sse_enabled   = true
}

resource "aws_sqs_queue" "uploads" {
  name                       = var.queue_name
  visibility_timeout_seconds = var.queue_visibility_timeout_seconds
  receive_wait_time_seconds  = 20
  # Longer than any completer outage we plan for: an event that expires here
  # is an upload whose token is refunded (lenient, never a lost upload).
  message_retention_seconds = 345600 # 4 days
  # SSE-SQS: encrypted at rest with no KMS key for S3 or the completer to use.
  sqs_managed_sse_enabled = true

  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.uploads_dlq.arn
    maxReceiveCount     = var.max_receive_count
  })
}

resource "aws_sqs_queue_redrive_allow_policy" "uploads_dlq" {
  queue_url = aws_sqs_queue.uploads_dlq.id

  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.uploads.arn]
  })
}

# Only S3, only for our bucket in our account, may send to the queue.
data "aws_iam_policy_document" "queue" {
  statement {
    sid       = "AllowS3ObjectCreated"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.uploads.arn]

    principals {
      type        = "Service"
      identifiers = ["s3.amazonaws.com"]
    }

    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [aws_s3_bucket.uploads.arn]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

resource "aws_sqs_queue_policy" "uploads" {
  queue_url = aws_sqs_queue.uploads.id
  policy    = data.aws_iam_policy_document.queue.json
}

# Anything in the DLQ is an event the completer could not read: its upload
# will be refunded as if it never happened. Someone should look.
resource "aws_cloudwatch_metric_alarm" "uploads_dlq" {
  alarm_name          = "${var.queue_name}-dlq-not-empty"
  alarm_description   = "S3 events the mintgate completer could not handle are in ${aws_sqs_queue.uploads_dlq.name}."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = aws_sqs_queue.uploads_dlq.name }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
}
