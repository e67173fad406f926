#!/usr/bin/env bash
# make bench: builds the bench (deploy/bench), which builds the signer,
# starts its own redis-server, nats-servers, signers and echo handler on
# free loopback ports, prints the side-by-side performance table and writes
# it to artifacts/bench.md. About four minutes on two cores; arguments go to
# the bench (-quick: one short run of each).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export MINTGATE_TOOLS=${MINTGATE_TOOLS:-$root/.tools}
"$root/deploy/local/tools.sh" redis nats
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/bench" ./deploy/bench
"$dir/bench" "$@"
