#!/usr/bin/env bash
# Run a native single-node OpenSearch 2.19.6 (no Docker) through opensearch-launcher/.
# Building, starting, waiting and stopping are scripts/lib/jvmnode.sh's, as for
# scripts/elasticsearch.sh and scripts/opensearch-secure.sh.
#
# usage: scripts/opensearch.sh build|start|stop|status|url
#
# env:
#   OPENSEARCH_PORT           HTTP port (default 9200; transport uses port+100)
#   OPENSEARCH_HOME           data/home dir to keep (default: a temporary dir, removed by `stop`)
#   OPENSEARCH_HEAP           JVM heap flags (default "-Xms1g -Xmx1g")
#   OPENSEARCH_JAVA_OPTS      extra JVM flags (default empty)
#   OPENSEARCH_START_TIMEOUT  seconds to wait for a healthy node (default 180)
#   SEARCHSYNC_RUN_DIR        pid/log/state files go to $SEARCHSYNC_RUN_DIR/opensearch (default /tmp/searchsync-run)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/jvmnode.sh
source "$ROOT/scripts/lib/jvmnode.sh"

NODE_NAME=opensearch.sh
LAUNCHER_DIR="$ROOT/opensearch-launcher"
TARGET_DIR="$LAUNCHER_DIR/target"
JAR="$TARGET_DIR/opensearch-launcher-1.0.0.jar"
# target/, not opensearch-secure.sh's target-2.19.4/
MARKER="opensearch-launcher/target/"
MVN_ARGS=""
PORT="${OPENSEARCH_PORT:-9200}"
HEAP="${OPENSEARCH_HEAP:--Xms1g -Xmx1g}"
JAVA_OPTS="${OPENSEARCH_JAVA_OPTS:-}"
START_TIMEOUT="${OPENSEARCH_START_TIMEOUT:-180}"
RUN_DIR="${SEARCHSYNC_RUN_DIR:-/tmp/searchsync-run}/opensearch"
PID_FILE="$RUN_DIR/node-$PORT.pid"
LOG_FILE="$RUN_DIR/node-$PORT.log"
TMP_HOME_FILE="$RUN_DIR/node-$PORT.tmphome"   # holds the temporary home dir to remove on stop
URL="http://127.0.0.1:$PORT"
HOME_PREFIX="searchsync-opensearch-$PORT"

# 0 when the cluster answers yellow or green within ~1 s
healthy() {
  local body
  body="$(curl -sf --max-time 3 "$URL/_cluster/health?wait_for_status=yellow&timeout=1s" 2>/dev/null)" || return 1
  [[ "$body" == *'"status":"green"'* || "$body" == *'"status":"yellow"'* ]]
}

# OPENSEARCH_HOME, when set, is the caller's to keep; else a temporary home.
node_home() {
  if [[ -n "${OPENSEARCH_HOME:-}" ]]; then
    rm -f "$TMP_HOME_FILE"
    mkdir -p "$OPENSEARCH_HOME"
    echo "$OPENSEARCH_HOME"
  else
    jn_new_home "$HOME_PREFIX"
  fi
}

node_exec() {
  # shellcheck disable=SC2086  # HEAP / OPENSEARCH_JAVA_OPTS are word lists on purpose
  OPENSEARCH_PORT="$PORT" OPENSEARCH_HOME="$1" exec java $HEAP $JAVA_OPTS \
    -cp "$JAR:$TARGET_DIR/lib/*" searchsync.opensearch.Launcher
}

cmd_status() { curl -sf --max-time 3 "$URL/_cluster/health" 2>/dev/null || echo down; }

jn_main "$@"
