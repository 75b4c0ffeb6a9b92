#!/usr/bin/env bash
# The test command (the README's, and what .ci/run runs): installs what is
# missing (scripts/setup.sh), starts the real services (scripts/services.sh:
# PostgreSQL, OpenSearch, NATS, the secured OpenSearch, Elasticsearch, the
# auth proxy), checks formatting, vet and the linters (scripts/lint.sh:
# golangci-lint with the import rules of .golangci.yml), and runs every test
# against those services. SEARCHSYNC_SKIP_LINT=1 leaves the linters out.
#   scripts/test.sh [go test flags…]      e.g. scripts/test.sh -run Relay ./relay/
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian installs nats-server in /usr/sbin, which a user's PATH may lack.
export PATH="$PATH:/usr/sbin:/sbin"
phase() { echo "test.sh: $1 took $((SECONDS - t0)) s" >&2; t0=$SECONDS; }
t0=$SECONDS
scripts/setup.sh
scripts/services.sh start
eval "$(scripts/services.sh env)"
phase "setup and services"

unformatted=$(git ls-files -co --exclude-standard '*.go' | xargs -r gofmt -l)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi
go vet ./...
phase "gofmt and vet"
if [ "${SEARCHSYNC_SKIP_LINT:-}" != 1 ]; then scripts/lint.sh; phase "lint"; fi
if [ $# -eq 0 ]; then set -- ./...; fi
# The tests mostly wait on the services and on the processes they start, so
# four packages and four tests per package at a time (go test's defaults are
# the number of cores, 2 here) keep the two cores busy: on the loaded 2-core
# machine 150 s with -p 4 -parallel 4, 290 s with -p 2 -parallel 4.
go test -count=1 -timeout 60m -p 4 -parallel 4 "$@"
phase "tests"
