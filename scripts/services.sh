#!/usr/bin/env bash
# Starts or stops every real service searchsync's tests and demo need:
# PostgreSQL, OpenSearch 2.19.6 (our Java launcher), NATS with JetStream, and
# for the production-cluster tests a secured OpenSearch 2.19.4 (TLS, users,
# client certificates; scripts/opensearch-secure.sh), Elasticsearch 7.17
# (scripts/elasticsearch.sh) and an nginx that demands an API key or a bearer
# token in front of it (scripts/authproxy.sh). See docs/test-services.md.
#
#   scripts/services.sh start        # then: eval "$(scripts/services.sh env)"
#   scripts/services.sh start core   # PostgreSQL, OpenSearch and NATS only (the demo's)
#   scripts/services.sh stop [core]
#   scripts/services.sh env          # prints the export lines the tests read
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}:${2:-}" in
  start:core)
    mkdir -p "${SEARCHSYNC_RUN_DIR:-/tmp/searchsync-run}"
    if [[ "$(scripts/opensearch.sh status)" == down ]]; then scripts/opensearch.sh build; fi
    scripts/opensearch.sh start >/dev/null & os=$!
    rc=0
    scripts/postgres.sh start || rc=1
    scripts/nats.sh start || rc=1
    wait "$os" || rc=1
    exit "$rc"
    ;;
  stop:core)
    scripts/opensearch.sh stop || true
    scripts/nats.sh stop || true
    scripts/postgres.sh stop || true
    ;;
  start:)
    # The three JVMs start in the background while PostgreSQL and NATS come
    # up; each script waits on its own health check with a deadline.
    mkdir -p "${SEARCHSYNC_RUN_DIR:-/tmp/searchsync-run}"
    # Builds first, one at a time (they share the local Maven repository),
    # and only for nodes that are not up (never rewrite a running node's
    # jars); each is a no-op when its jar is newer than its sources.
    for s in opensearch opensearch-secure elasticsearch; do
      if [[ "$(scripts/$s.sh status)" == down ]]; then scripts/$s.sh build; fi
    done
    scripts/opensearch.sh start >/dev/null & os=$!
    scripts/opensearch-secure.sh start >/dev/null & sec=$!
    scripts/elasticsearch.sh start >/dev/null & es=$!
    rc=0
    scripts/postgres.sh start || rc=1
    scripts/nats.sh start || rc=1
    wait "$os" || rc=1
    if wait "$es"; then scripts/authproxy.sh start >/dev/null || rc=1; else rc=1; fi
    wait "$sec" || rc=1
    exit "$rc"
    ;;
  stop:)
    scripts/authproxy.sh stop || true
    scripts/elasticsearch.sh stop || true
    scripts/opensearch-secure.sh stop || true
    scripts/opensearch.sh stop || true
    scripts/nats.sh stop || true
    scripts/postgres.sh stop || true
    ;;
  env:)
    echo "export DATABASE_URL='$(scripts/postgres.sh url)'"
    scripts/postgres.sh tls-env
    echo "export SEARCHSYNC_ENGINE_URL='$(scripts/opensearch.sh url 2>/dev/null || echo http://127.0.0.1:9200)'"
    echo "export SEARCHSYNC_NATS_URL='$(scripts/nats.sh url)'"
    scripts/opensearch-secure.sh env
    echo "export SEARCHSYNC_ES_URL='$(scripts/elasticsearch.sh url)'"
    scripts/authproxy.sh env
    ;;
  *) echo "usage: $0 start [core] | stop [core] | env" >&2; exit 2 ;;
esac
