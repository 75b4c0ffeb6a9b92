#!/usr/bin/env bash
# The run command: starts PostgreSQL, OpenSearch and NATS locally, builds
# searchsync, migrates, and runs the demo (a steady load of customer mutations
# through the producer API, the relay, the dashboard) until Ctrl-C.
#   scripts/demo.sh [searchsync demo flags…]   e.g. scripts/demo.sh --rate 500
#   scripts/demo.sh stop                       stops the services it started
# It starts only what the demo uses; the test command (scripts/test.sh) starts
# the test-only secured OpenSearch, Elasticsearch and auth proxy as well.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == stop ]]; then exec scripts/services.sh stop core; fi
scripts/services.sh start core
eval "$(scripts/services.sh env)"
mkdir -p bin
go build -o bin/searchsync ./cmd/searchsync
export SEARCHSYNC_CONFIG=${SEARCHSYNC_CONFIG:-examples/demo/searchsync.yaml}
export SEARCHSYNC_LOG_FORMAT=${SEARCHSYNC_LOG_FORMAT:-text}
exec bin/searchsync demo "$@"
