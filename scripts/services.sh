#!/usr/bin/env bash
# Starts or stops every real service searchsync's tests and demo need:
# PostgreSQL, OpenSearch 2.19 (our Java launcher) and NATS with JetStream.
#
#   scripts/services.sh start   # then: eval "$(scripts/services.sh env)"
#   scripts/services.sh stop
#   scripts/services.sh env     # prints the export lines the tests read
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  start)
    scripts/postgres.sh start
    scripts/nats.sh start
    scripts/opensearch.sh start
    ;;
  stop)
    scripts/opensearch.sh stop || true
    scripts/nats.sh stop || true
    scripts/postgres.sh stop || true
    ;;
  env)
    echo "export DATABASE_URL='$(scripts/postgres.sh url)'"
    scripts/postgres.sh tls-env
    echo "export SEARCHSYNC_ENGINE_URL='$(scripts/opensearch.sh url 2>/dev/null || echo http://127.0.0.1:9200)'"
    echo "export SEARCHSYNC_NATS_URL='$(scripts/nats.sh url)'"
    ;;
  *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
