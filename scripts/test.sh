#!/usr/bin/env bash
# The test command (the README's, and what .ci/run runs): installs what is
# missing (scripts/setup.sh), starts the real services (PostgreSQL, OpenSearch,
# NATS), checks formatting and vet, and runs every test against those services.
#   scripts/test.sh [go test flags…]      e.g. scripts/test.sh -run Relay ./relay/
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/services.sh start
eval "$(scripts/services.sh env)"

unformatted=$(git ls-files -co --exclude-standard '*.go' | xargs -r gofmt -l)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi
go vet ./...
if [ $# -eq 0 ]; then set -- ./...; fi
go test -count=1 -timeout 60m "$@"
