#!/usr/bin/env bash
# Runs the whole mintgate stack on loopback, without Docker: Redis, nats-server
# (≥ 2.12, JetStream with sync_interval: always), versitygw (S3), fauxqs (SQS,
# with a dead-letter queue), the S3→SQS bridge, then signer, completer and
# sweeper, after the operator step (deploy/streams) has created the JetStream
# streams, which the services only read, and a webhook receiver
# (deploy/webhook-receiver) the completer delivers the upload events to.
# Installs what is missing (cached in .tools/), waits until every
# part is ready, prints one ready line, and stops everything it started, by
# PID, on Ctrl-C. State lives in .stack/ and is wiped at each start, except
# .stack/secrets/ (made at the first start by deploy/local/devsecrets) and
# .stack/up.pid, which makes a second start refuse while this one runs.
#
# Nothing connects without credentials, as in production: Redis and NATS
# speak only TLS (a throwaway CA and certificate for 127.0.0.1), Redis
# allows only the ACL users of deploy/redis/users.acl, NATS only the nkey
# users of deploy/nats/authorization.conf, each service with its own key.
#
# Ports can be moved with MINTGATE_PORT_<NAME> (REDIS NATS S3 SQS BRIDGE
# SIGNER OPS COMPLETER SWEEPER WEBHOOK POSTGRES).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export MINTGATE_TOOLS=${MINTGATE_TOOLS:-$root/.tools}
stack=$root/.stack
tools=$MINTGATE_TOOLS

p_redis=${MINTGATE_PORT_REDIS:-16379}
p_nats=${MINTGATE_PORT_NATS:-14222}
p_s3=${MINTGATE_PORT_S3:-17070}
p_sqs=${MINTGATE_PORT_SQS:-14566}
p_bridge=${MINTGATE_PORT_BRIDGE:-17071}
p_signer=${MINTGATE_PORT_SIGNER:-8080}
p_completer=${MINTGATE_PORT_COMPLETER:-8081}
p_sweeper=${MINTGATE_PORT_SWEEPER:-8082}
p_ops=${MINTGATE_PORT_OPS:-9080}
p_clamd=${MINTGATE_PORT_CLAMD:-13310}
p_webhook=${MINTGATE_PORT_WEBHOOK:-8083}
p_postgres=${MINTGATE_PORT_POSTGRES:-15432}
# Jaeger: OTLP over HTTP and gRPC in, the query API out (deploy/local/jaeger.yaml).
p_otlp=${MINTGATE_PORT_OTLP:-4318}
p_otlp_grpc=${MINTGATE_PORT_OTLP_GRPC:-4317}
p_jaeger=${MINTGATE_PORT_JAEGER:-16686}
p_jaeger_grpc=${MINTGATE_PORT_JAEGER_GRPC:-16685}
p_jaeger_health=${MINTGATE_PORT_JAEGER_HEALTH:-13133}

log() { echo "up: $*" >&2; }

# One stack at a time: .stack/up.pid holds the PID of the up.sh that runs
# it. A second one refuses instead of ending the first; a pid file whose
# process is gone (or is no longer an up.sh: PIDs are reused) is stale.
pidfile=$stack/up.pid
is_up() { kill -0 "$1" 2>/dev/null && { [ ! -d /proc ] || grep -qa 'up\.sh' "/proc/$1/cmdline"; }; }
mkdir -p "$stack"
if ! (set -o noclobber; echo $$ >"$pidfile") 2>/dev/null; then
  other=$(cat "$pidfile" 2>/dev/null || true)
  if [ -n "$other" ] && is_up "$other"; then
    log "already running (pid $other); Ctrl-C in its terminal (or kill $other) stops it"
    exit 1
  fi
  echo $$ >"$pidfile"
fi

pids=()
cleanup() {
  trap - INT TERM EXIT
  if ((${#pids[@]})); then
    log "stopping ${#pids[@]} processes"
    # Reverse order: services first, then the servers they need.
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    done
  fi
  rm -f "$stack/pids"
  [ "$(cat "$pidfile" 2>/dev/null)" != $$ ] || rm -f "$pidfile"
}
trap cleanup EXIT
# On a signal: stop everything, then die of that signal (cleanup resets the
# traps), so that make and the shell see an interrupt, not a failure.
trap 'cleanup; kill -INT $$' INT
trap 'cleanup; kill -TERM $$' TERM

# A stack left over from a run that was killed hard: end it by its PIDs.
if [ -f "$stack/pids" ]; then
  while read -r pid; do kill -TERM "$pid" 2>/dev/null || true; done <"$stack/pids"
  sleep 1
fi

for p in $p_redis $p_nats $p_s3 $p_sqs $p_bridge $p_signer $p_completer $p_sweeper $p_ops $p_clamd $p_webhook \
  $p_otlp $p_otlp_grpc $p_jaeger $p_jaeger_grpc $p_jaeger_health $p_postgres; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    log "port $p is already in use; set MINTGATE_PORT_<NAME> to move a part"; exit 1
  fi
done

# jaeger: built once into the cache (10-20 minutes cold, then cached).
"$root/deploy/local/tools.sh" redis jq nats versitygw node fauxqs clamd postgres jaeger
# The demo page's script (and the client package), which the signer embeds.
"$root/deploy/local/web.sh"
export PATH=$tools/bin:$PATH

# Everything but the secrets, which are reused: the CA, passwords and keys a
# developer copied into a tool stay valid across restarts.
find "$stack" -mindepth 1 -maxdepth 1 ! -name secrets ! -name up.pid -exec rm -rf {} +
secrets=$stack/secrets
mkdir -p "$stack/bin" "$stack/logs" "$stack/nats" "$stack/s3/data" "$stack/s3/meta"
log "building the services"
go build -o "$stack/bin/" ./signer ./completer ./sweeper ./deploy/streams ./deploy/s3bridge ./deploy/local/devtoken ./deploy/local/devsecrets
"$stack/bin/devsecrets" -dir "$secrets" -hosts 127.0.0.1,localhost -redis-acl "$root/deploy/redis/users.acl"

# start NAME CMD...: runs CMD in the background with its output in
# logs/NAME.log, in a session of its own (setsid execs in place, so $! is
# CMD's PID): a Ctrl-C reaches only this script, which then stops every part
# in order; any part that exits by itself is an unexpected exit.
names=()
start() {
  local name=$1; shift
  setsid "$@" >"$stack/logs/$name.log" 2>&1 </dev/null &
  pids+=($!)
  names+=("$name")
  echo $! >>"$stack/pids"
}

# wait_for NAME CHECK...: retries CHECK for up to 60 s.
wait_for() {
  local name=$1; shift
  for _ in $(seq 600); do
    if "$@" >/dev/null 2>&1; then return; fi
    sleep 0.1
  done
  log "$name did not become ready; its log:"; tail -n 30 "$stack/logs/$name.log" >&2; exit 1
}
tcp() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# clamd_pong PORT: clamd answers zPING with PONG.
clamd_pong() { (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'zPING\0' >&3 && [ "$(timeout 2 head -c 4 <&3)" = PONG ]) 2>/dev/null; }
http_ok() { curl -fsS -o /dev/null "$1"; }

# Credentials of the local S3 and SQS servers only; never real AWS.
export AWS_ACCESS_KEY_ID=mintgate-local AWS_SECRET_ACCESS_KEY=mintgate-local-secret AWS_REGION=us-east-1
bucket=uploads

# TLS only (no plain port) and the ACL users; the default user is off.
start redis redis-server --port 0 --tls-port "$p_redis" --bind 127.0.0.1 --save "" --appendonly no \
  --tls-cert-file "$secrets/tls.crt" --tls-key-file "$secrets/tls.key" --tls-ca-cert-file "$secrets/ca.crt" \
  --tls-auth-clients no --aclfile "$secrets/redis-users.acl"
wait_for redis tcp "$p_redis"

# The shipped authorization, beside the config that includes it; the users'
# public keys come from the environment.
cp "$root/deploy/nats/authorization.conf" "$stack/authorization.conf"
cat >"$stack/nats.conf" <<CONF
listen: "127.0.0.1:$p_nats"
http: "127.0.0.1:$((p_nats + 1))"
tls {
  cert_file: "$secrets/tls.crt"
  key_file: "$secrets/tls.key"
}
include authorization.conf
jetstream {
  store_dir: "$stack/nats"
  sync_interval: always
}
CONF
start nats env $(cat "$secrets/nats-users.env") nats-server -c "$stack/nats.conf"
wait_for nats http_ok "http://127.0.0.1:$((p_nats + 1))/healthz?js-enabled-only=true"

# PostgreSQL for the upload records: a cluster of its own in .stack/postgres
# on loopback (never the package's own on :5432), password-authenticated.
# initdb and postgres refuse to run as root: as root they run as the
# postgres user the package creates (setpriv execs in place, so the PID
# kept is the postmaster's), which must be able to reach .stack. The
# operator step applies the schema as the owner (postgres); the signer and
# the sweeper connect as mintgate_service, which may only read and write rows.
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
pgdata=$stack/postgres
as_pg=()
mkdir -p "$pgdata"
chmod 700 "$pgdata"
if [ "$(id -u)" = 0 ]; then
  chmod o+x "$stack"
  chown postgres: "$pgdata"
  as_pg=(setpriv --reuid=postgres --regid=postgres --clear-groups)
fi
[ -s "$secrets/postgres-password" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secrets/postgres-password"
[ -s "$secrets/postgres-service-password" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secrets/postgres-service-password"
pwfile=$pgdata.pw
cp "$secrets/postgres-password" "$pwfile"
[ "$(id -u)" != 0 ] || chown postgres: "$pwfile"
"${as_pg[@]}" "$pg_bin/initdb" -D "$pgdata" --auth=scram-sha-256 --pwfile="$pwfile" -U postgres -E UTF8 --locale=C >"$stack/logs/initdb.log" 2>&1 ||
  { log "initdb failed; its log:"; tail -n 20 "$stack/logs/initdb.log" >&2; exit 1; }
rm -f "$pwfile"
start postgres "${as_pg[@]}" "$pg_bin/postgres" -D "$pgdata" -p "$p_postgres" -k "$pgdata" -c listen_addresses=127.0.0.1
wait_for postgres "$pg_bin/pg_isready" -h 127.0.0.1 -p "$p_postgres" -q
export PGPASSWORD
PGPASSWORD=$(cat "$secrets/postgres-password")
"$pg_bin/psql" -X -q -h 127.0.0.1 -p "$p_postgres" -U postgres -d postgres -c "CREATE DATABASE mintgate"
pg_owner_url="postgres://postgres:$(cat "$secrets/postgres-password")@127.0.0.1:$p_postgres/mintgate?sslmode=disable"
pg_service_url="postgres://mintgate_service:$(cat "$secrets/postgres-service-password")@127.0.0.1:$p_postgres/mintgate?sslmode=disable"

# clamd for the completer's verification gate, with the repository's own
# signatures (the EICAR test string) and no other: freshclam cannot reach
# its mirrors here. Loading them takes a few seconds.
mkdir -p "$stack/clamav/db"
cp "$root/deploy/clamav/mintgate-test.ndb" "$stack/clamav/db/"
cat >"$stack/clamav/clamd.conf" <<CONF
DatabaseDirectory $stack/clamav/db
TCPSocket $p_clamd
TCPAddr 127.0.0.1
Foreground yes
StreamMaxLength 100M
MaxFileSize 100M
MaxScanSize 400M
AlertExceedsMax yes
CONF
clamd_bin=$(command -v clamd || echo /usr/sbin/clamd)
start clamd "$clamd_bin" -c "$stack/clamav/clamd.conf"
wait_for clamd clamd_pong "$p_clamd"

# Jaeger, in memory, every port on loopback: the services export their
# traces to it (OTEL_EXPORTER_OTLP_ENDPOINT below) and the demo page reads
# a finished upload's trace from its query API (CORS: the demo's origin).
start jaeger env JAEGER_OTLP_HTTP_PORT="$p_otlp" JAEGER_OTLP_GRPC_PORT="$p_otlp_grpc" \
  JAEGER_QUERY_PORT="$p_jaeger" JAEGER_QUERY_GRPC_PORT="$p_jaeger_grpc" JAEGER_HEALTH_PORT="$p_jaeger_health" \
  JAEGER_CORS_ORIGIN="http://127.0.0.1:$p_signer" \
  "$tools/bin/jaeger" --config "$root/deploy/local/jaeger.yaml"
wait_for jaeger http_ok "http://127.0.0.1:$p_jaeger/api/services"

# The app's backend, as far as webhooks go: a receiver that verifies each
# delivery with the standardwebhooks npm package under the dev secret
# (.stack/secrets/webhook-secret) and lists them at /deliveries.
start webhook node "$root/deploy/webhook-receiver/receiver.mjs" --addr "127.0.0.1:$p_webhook" \
  --secret-file "$secrets/webhook-secret" --record "$stack/webhook-deliveries.jsonl"
wait_for webhook http_ok "http://127.0.0.1:$p_webhook/healthz"

. "$root/deploy/local/s3sqs.sh"
start_s3sqs

secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
# The dev token is minted for this audience and issuer, as a real issuer
# names mintgate in the tokens meant for it: the signer refuses a token the
# same key signed for anything else.
jwt_aud=mintgate jwt_iss=mintgate-local
common=(
  MINTGATE_REDIS_URL="rediss://mintgate:$(cat "$secrets/redis-password")@127.0.0.1:$p_redis/0"
  MINTGATE_REDIS_CA="$secrets/ca.crt"
  MINTGATE_URL_TTL=120s
  MINTGATE_SWEEP_GRACE=30s
  OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$p_otlp"
)
# The ledger's two ends, each with its own NATS user, and the grants' MAC key.
nats=(
  MINTGATE_NATS_URL="tls://127.0.0.1:$p_nats"
  MINTGATE_NATS_CA="$secrets/ca.crt"
  MINTGATE_GRANT_SECRET="$(cat "$secrets/grant-secret")"
)
# The operator step, as its own NATS user: the services may not create or
# update a stream, and stay unready until it has made them. It reads the
# settings that shape the streams from the same variables as the services.
log "creating the streams"
if ! env "${common[@]}" MINTGATE_NATS_URL="tls://127.0.0.1:$p_nats" MINTGATE_NATS_CA="$secrets/ca.crt" \
  MINTGATE_NATS_CREDS="$secrets/nats-streams.nk" MINTGATE_POSTGRES_URL="$pg_owner_url" \
  "$stack/bin/streams" >"$stack/logs/streams.log" 2>&1; then
  log "the operator step (deploy/streams) failed; its log:"; tail -n 30 "$stack/logs/streams.log" >&2; exit 1
fi
# The services' role exists now (deploy/postgres/grants.sql): its password.
"$pg_bin/psql" -X -q -h 127.0.0.1 -p "$p_postgres" -U postgres -d mintgate \
  -c "ALTER ROLE mintgate_service PASSWORD '$(cat "$secrets/postgres-service-password")'"
unset PGPASSWORD

# MINTGATE_IP_SOURCE=remote, said explicitly: here browsers and curl connect
# to the signer directly on loopback, with no proxy in between, so the
# socket's address is the caller's own and the only honest source (xff or
# cf-connecting-ip would need a proxy to trust). Set, not defaulted, it keeps
# the signer's start-up warning for proxied anonymous tenants quiet.
start signer env "${common[@]}" "${nats[@]}" MINTGATE_NATS_CREDS="$secrets/nats-signer.nk" \
  MINTGATE_HTTP_ADDR="127.0.0.1:$p_signer" MINTGATE_OPS_ADDR="127.0.0.1:$p_ops" \
  MINTGATE_S3_BUCKET="$bucket" MINTGATE_S3_ENDPOINT="http://127.0.0.1:$p_s3" \
  MINTGATE_S3_PATH_STYLE=true MINTGATE_S3_REGION=us-east-1 \
  MINTGATE_JWT_HS256_SECRET="$secret" MINTGATE_JWT_AUDIENCE="$jwt_aud" MINTGATE_JWT_ISSUER="$jwt_iss" MINTGATE_ANON_TENANTS=demo MINTGATE_IP_SOURCE=remote \
  MINTGATE_IP_HASH_SECRET="$secret" MINTGATE_DEMO_PAGE=on MINTGATE_POSTGRES_URL="$pg_service_url" \
  MINTGATE_DEMO_TRACES_URL="http://127.0.0.1:$p_jaeger" \
  "$stack/bin/signer"
start completer env "${common[@]}" \
  MINTGATE_HTTP_ADDR="127.0.0.1:$p_completer" MINTGATE_S3_BUCKET="$bucket" \
  MINTGATE_SQS_QUEUE_URL="$queue_url" MINTGATE_SQS_ENDPOINT="http://127.0.0.1:$p_sqs" \
  MINTGATE_S3_ENDPOINT="http://127.0.0.1:$p_s3" MINTGATE_S3_PATH_STYLE=true MINTGATE_S3_REGION=us-east-1 \
  MINTGATE_CLAMD_ADDR="127.0.0.1:$p_clamd" \
  MINTGATE_NATS_URL="tls://127.0.0.1:$p_nats" MINTGATE_NATS_CA="$secrets/ca.crt" MINTGATE_NATS_CREDS="$secrets/nats-completer.nk" \
  MINTGATE_WEBHOOK_URL="http://127.0.0.1:$p_webhook/" MINTGATE_WEBHOOK_SECRET="$(cat "$secrets/webhook-secret")" \
  MINTGATE_WEBHOOK_ALLOW_PRIVATE=true \
  "$stack/bin/completer"
start sweeper env "${common[@]}" "${nats[@]}" MINTGATE_NATS_CREDS="$secrets/nats-sweeper.nk" \
  MINTGATE_HTTP_ADDR="127.0.0.1:$p_sweeper" MINTGATE_POSTGRES_URL="$pg_service_url" \
  MINTGATE_S3_BUCKET="$bucket" MINTGATE_S3_ENDPOINT="http://127.0.0.1:$p_s3" \
  MINTGATE_S3_PATH_STYLE=true MINTGATE_S3_REGION=us-east-1 \
  "$stack/bin/sweeper"
wait_for signer http_ok "http://127.0.0.1:$p_signer/readyz"
wait_for completer http_ok "http://127.0.0.1:$p_completer/readyz"
wait_for sweeper http_ok "http://127.0.0.1:$p_sweeper/readyz"

token=$("$stack/bin/devtoken" -secret "$secret" -aud "$jwt_aud" -iss "$jwt_iss" -tenant acme -sub alice -ttl 24h)
echo "$token" >"$stack/devtoken"
cat <<MSG

mintgate is ready: signer http://127.0.0.1:$p_signer (metrics http://127.0.0.1:$p_ops/metrics)  demo page http://127.0.0.1:$p_signer/demo/  completer http://127.0.0.1:$p_completer/metrics  sweeper http://127.0.0.1:$p_sweeper/metrics  webhooks received http://127.0.0.1:$p_webhook/deliveries  traces (Jaeger query API) http://127.0.0.1:$p_jaeger/api/traces/{traceId}  (S3 http://127.0.0.1:$p_s3, clamd 127.0.0.1:$p_clamd, SQS http://127.0.0.1:$p_sqs, Redis rediss://127.0.0.1:$p_redis, NATS tls://127.0.0.1:$p_nats, PostgreSQL 127.0.0.1:$p_postgres (upload records; owner password in .stack/secrets/postgres-password); logs in .stack/logs, credentials in .stack/secrets)

Try it (a dev JWT for tenant acme, user alice, valid 24 h, also written to .stack/devtoken):
  curl -s -X POST http://127.0.0.1:$p_signer/uploads/sign \\
    -H 'Authorization: Bearer $token' \\
    -H "Idempotency-Key: \$(date +%s%N)" -H 'Content-Type: application/json' \\
    -d '{"contentType":"image/png","contentLength":5}'
then PUT 5 bytes to the returned url with the returned headers (5 bytes are no PNG: the upload ends
rejected, type_mismatch; README.md, "The local stack", uploads a real PNG bound to its checksum, with jq),
and see the completer's webhook arrive, verified: curl -s http://127.0.0.1:$p_webhook/deliveries | jq
Redis as admin: REDISCLI_AUTH=\$(cat .stack/secrets/redis-admin-password) redis-cli --tls --cacert .stack/secrets/ca.crt -p $p_redis --user admin
Ctrl-C stops everything.
MSG
# Only a part's own exit ends this wait, since the parts run in sessions of
# their own: a Ctrl-C runs the INT trap instead (cleanup, quietly).
rc=0
wait -n -p gone "${pids[@]}" || rc=$?
for i in "${!pids[@]}"; do
  [ "${pids[i]}" = "${gone:-}" ] || continue
  log "${names[i]} exited unexpectedly (status $rc); see .stack/logs. The end of .stack/logs/${names[i]}.log:"
  tail -n 20 "$stack/logs/${names[i]}.log" >&2
done
exit 1
