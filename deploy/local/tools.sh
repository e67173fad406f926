#!/usr/bin/env bash
# Installs what the tests and the local stack need, idempotently, into a
# git-ignored cache ($MINTGATE_TOOLS, default .tools/ in the repo). Safe to
# run again: each tool is checked before anything is fetched.
#   deploy/local/tools.sh [redis] [nats] [staticcheck] [versitygw] [fauxqs] ...
# With no argument it installs everything the test suite uses.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tools=${MINTGATE_TOOLS:-$root/.tools}
mkdir -p "$tools/bin"
export GOBIN=$tools/bin GOFLAGS=${GOFLAGS:-} PATH=$tools/bin:$PATH

NATS_VERSION=v2.15.2
STATICCHECK_VERSION=v0.8.2

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

# go_tool NAME VERSION MODULE: installs MODULE@VERSION into $GOBIN unless the
# stamp says that version is there already.
go_tool() {
  local name=$1 version=$2 module=$3 stamp=$tools/bin/.$1.version
  if [ -x "$tools/bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
    return
  fi
  log "go install $module@$version (cold: minutes)"
  go install "$module@$version"
  echo "$version" >"$stamp"
}

install_redis() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return
  apt_install redis-server
  # Debian's package starts a service on 6379; we never use it, tests start their own.
}

install_nats() { go_tool nats-server "$NATS_VERSION" github.com/nats-io/nats-server/v2; }
install_staticcheck() { go_tool staticcheck "$STATICCHECK_VERSION" honnef.co/go/tools/cmd/staticcheck; }

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(redis nats staticcheck)
for t in "${want[@]}"; do
  "install_$t"
done
