#!/usr/bin/env bash
# Runs every check and test: formatting, go vet, staticcheck, and
# go test -race over the whole module against real servers that the tests
# start themselves on free loopback ports.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export MINTGATE_TOOLS=${MINTGATE_TOOLS:-$root/.tools}
"$root/deploy/local/tools.sh"
export PATH=$MINTGATE_TOOLS/bin:$PATH

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
echo "== go vet"
go vet ./...
echo "== staticcheck"
staticcheck ./...
echo "== go test -race"
go test -race -count=1 -timeout 20m "$@" ./...
