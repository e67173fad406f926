# Sourced by up.sh: starts fauxqs (SQS, with the uploads queue and its
# dead-letter queue), our s3bridge and versitygw (S3, posting bucket events to
# the bridge), creates the bucket with a CORS rule for the demo page, and sets
# $queue_url. Uses start, wait_for, http_ok, log and the p_* ports of up.sh.

start_s3sqs() {
  local init=$stack/fauxqs-init.json region=us-east-1
  cat >"$init" <<JSON
{"queues":[{"name":"uploads-dlq"},{"name":"uploads","attributes":{"VisibilityTimeout":"30",
 "RedrivePolicy":"{\"deadLetterTargetArn\":\"arn:aws:sqs:$region:000000000000:uploads-dlq\",\"maxReceiveCount\":\"5\"}"}}]}
JSON
  queue_url="http://sqs.$region.localhost:$p_sqs/000000000000/uploads"
  # fauxqs binds 0.0.0.0 whatever it is told; the preload keeps it on 127.0.0.1.
  start fauxqs env FAUXQS_PORT="$p_sqs" FAUXQS_LOGGER=false FAUXQS_INIT="$init" FAUXQS_DEFAULT_REGION="$region" \
    NODE_OPTIONS="--import=\"$root/deploy/local/fauxqs-loopback.mjs\"" fauxqs
  wait_for fauxqs http_ok "http://127.0.0.1:$p_sqs/health"

  # The bridge takes events only with its token (any page a browser opens
  # could otherwise post forged upload events to the loopback port), kept
  # with the other local secrets; versitygw gets it in its webhook URL.
  local token_file=$secrets/s3bridge-token
  [ -s "$token_file" ] || (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token_file")
  # The bridge first: versitygw exits if its webhook does not answer at start.
  start s3bridge "$stack/bin/s3bridge" -addr "127.0.0.1:$p_bridge" -token-file "$token_file" -queue-url "$queue_url" -endpoint "http://127.0.0.1:$p_sqs"
  wait_for s3bridge http_ok "http://127.0.0.1:$p_bridge/healthz"

  start versitygw versitygw --port "127.0.0.1:$p_s3" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" \
    --region "$region" --health /health --event-webhook-url "http://127.0.0.1:$p_bridge/events?token=$(cat "$token_file")" \
    posix --sidecar "$stack/s3/meta" "$stack/s3/data"
  wait_for versitygw http_ok "http://127.0.0.1:$p_s3/health"

  s3curl -X PUT "http://127.0.0.1:$p_s3/$bucket" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' >/dev/null
  local cors=$stack/cors.xml
  cat >"$cors" <<XML
<CORSConfiguration><CORSRule><AllowedOrigin>http://127.0.0.1:$p_signer</AllowedOrigin><AllowedOrigin>http://localhost:$p_signer</AllowedOrigin><AllowedMethod>PUT</AllowedMethod><AllowedHeader>content-type</AllowedHeader><AllowedHeader>if-none-match</AllowedHeader><AllowedHeader>x-amz-checksum-sha256</AllowedHeader><ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>600</MaxAgeSeconds></CORSRule></CORSConfiguration>
XML
  # Both hashes are required, and ?cors= (not ?cors): curl signs the bare form wrongly.
  s3curl -X PUT "http://127.0.0.1:$p_s3/$bucket?cors=" \
    -H "x-amz-content-sha256: $(sha256sum <"$cors" | cut -d' ' -f1)" \
    -H "Content-MD5: $(openssl md5 -binary <"$cors" | base64)" \
    -H 'Content-Type: application/xml' --data-binary @"$cors" >/dev/null
}

s3curl() {
  curl -fsS --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" --aws-sigv4 "aws:amz:us-east-1:s3" "$@"
}
