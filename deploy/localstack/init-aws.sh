#!/bin/bash
# LocalStack "ready" hook for the compose stack: the S3 bucket and SQS queues
# that deploy/terraform creates on AWS, with the same shape — a dead-letter
# queue with a redrive policy, a queue policy letting S3 send only from our
# bucket, and ObjectCreated events for keys under incoming/ sent to the queue.
# When it has finished it writes a marker that the compose healthcheck waits
# for, so the completer never starts against a missing queue.
set -euo pipefail

bucket=${INIT_BUCKET:-mintgate-uploads}
queue=${INIT_QUEUE:-mintgate-uploads}
dlq=${queue}-dlq
max_receive=${INIT_MAX_RECEIVE_COUNT:-5}
marker=${INIT_READY_MARKER:-/run/mintgate/ready}
tmp=$(mktemp -d)

rm -f "$marker"

awslocal sqs create-queue --queue-name "$dlq" \
  --attributes MessageRetentionPeriod=1209600 >/dev/null
dlq_url=$(awslocal sqs get-queue-url --queue-name "$dlq" --query QueueUrl --output text)
dlq_arn=$(awslocal sqs get-queue-attributes --queue-url "$dlq_url" \
  --attribute-names QueueArn --query Attributes.QueueArn --output text)

# A message the completer cannot parse is received, not deleted, and after
# max_receive tries moves to the DLQ.
cat >"$tmp/queue.json" <<JSON
{
  "VisibilityTimeout": "30",
  "ReceiveMessageWaitTimeSeconds": "20",
  "RedrivePolicy": "{\"deadLetterTargetArn\":\"$dlq_arn\",\"maxReceiveCount\":\"$max_receive\"}"
}
JSON
awslocal sqs create-queue --queue-name "$queue" --attributes "file://$tmp/queue.json" >/dev/null
queue_url=$(awslocal sqs get-queue-url --queue-name "$queue" --query QueueUrl --output text)
queue_arn=$(awslocal sqs get-queue-attributes --queue-url "$queue_url" \
  --attribute-names QueueArn --query Attributes.QueueArn --output text)

awslocal s3api create-bucket --bucket "$bucket" >/dev/null

# Only S3, and only for this bucket, may send to the queue.
policy=$(printf '{"Version":"2012-10-17","Statement":[{"Sid":"S3ObjectCreated","Effect":"Allow","Principal":{"Service":"s3.amazonaws.com"},"Action":"sqs:SendMessage","Resource":"%s","Condition":{"ArnEquals":{"aws:SourceArn":"arn:aws:s3:::%s"}}}]}' \
  "$queue_arn" "$bucket")
# The attribute's value is itself JSON: let python3 (LocalStack's own) quote it.
python3 -c 'import json,sys; print(json.dumps({"Policy": sys.argv[1]}))' "$policy" >"$tmp/policy.json"
awslocal sqs set-queue-attributes --queue-url "$queue_url" --attributes "file://$tmp/policy.json"

cat >"$tmp/notification.json" <<JSON
{
  "QueueConfigurations": [{
    "Id": "mintgate-object-created",
    "QueueArn": "$queue_arn",
    "Events": ["s3:ObjectCreated:*"],
    "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "incoming/"}]}}
  }]
}
JSON
awslocal s3api put-bucket-notification-configuration --bucket "$bucket" \
  --notification-configuration "file://$tmp/notification.json"

# Browsers upload straight to the bucket from a page on another origin.
cat >"$tmp/cors.json" <<JSON
{
  "CORSRules": [{
    "AllowedOrigins": ["http://localhost:*", "http://127.0.0.1:*"],
    "AllowedMethods": ["PUT"],
    "AllowedHeaders": ["content-type", "if-none-match", "x-amz-checksum-sha256"],
    "ExposeHeaders": ["ETag"],
    "MaxAgeSeconds": 600
  }]
}
JSON
awslocal s3api put-bucket-cors --bucket "$bucket" --cors-configuration "file://$tmp/cors.json"

rm -rf "$tmp"
mkdir -p "$(dirname "$marker")"
touch "$marker"
echo "mintgate: bucket $bucket, queue $queue_url (DLQ $dlq after $max_receive receives) ready"
