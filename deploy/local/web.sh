#!/usr/bin/env bash
# Builds the browser side: the client package (api/js, TypeScript compiled
# to api/js/dist), the signer's demo page (signer/demo/web, bundled with
# Uppy into signer/demo/static/dist, which the signer embeds) and the
# webhook receiver of the tests and the local stack (deploy/webhook-receiver,
# verifying with the standardwebhooks npm library). npm installs
# the pinned packages of each lock file once (again when a lock file
# changes), with its cache in $MINTGATE_TOOLS/npm. Run before building the
# signer: make up and make test do.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tools=${MINTGATE_TOOLS:-$root/.tools}
export npm_config_cache=$tools/npm
log() { echo "web: $*" >&2; }

command -v npm >/dev/null || "$root/deploy/local/tools.sh" node

# npm_ci DIR: the packages of DIR's lock file, unless they are in already.
npm_ci() {
  local dir=$1 stamp=$1/node_modules/.mintgate-lock sum
  sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ] && return
  log "npm ci in ${dir#"$root"/}"
  (cd "$dir" && npm ci --no-audit --no-fund --silent)
  echo "$sum" >"$stamp"
}

npm_ci "$root/api/js"
npm_ci "$root/signer/demo/web"
npm_ci "$root/deploy/webhook-receiver"
log "compile api/js"
(cd "$root/api/js" && node node_modules/typescript/bin/tsc -p tsconfig.json)
log "bundle the demo page"
(cd "$root/signer/demo/web" && node build.mjs)
