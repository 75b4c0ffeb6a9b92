#!/usr/bin/env bash
# The test command: starts the real services (PostgreSQL, OpenSearch, NATS),
# checks formatting, vet and the linters (scripts/lint.sh: golangci-lint with
# the import rules of .golangci.yml), and runs every test against those
# services. SEARCHSYNC_SKIP_LINT=1 leaves the linters out (a quick rerun).
#   scripts/test.sh [go test flags…]      e.g. scripts/test.sh -run Relay ./relay/
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/services.sh start
eval "$(scripts/services.sh env)"

unformatted=$(git ls-files -co --exclude-standard '*.go' | xargs -r gofmt -l)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi
go vet ./...
if [ "${SEARCHSYNC_SKIP_LINT:-}" != 1 ]; then scripts/lint.sh; fi
if [ $# -eq 0 ]; then set -- ./...; fi
go test -count=1 -timeout 60m "$@"
