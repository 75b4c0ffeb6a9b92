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
#   OPENSEARCH_HEAP           JVM heap flags (default "-Xms512m -Xmx512m")
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
HEAP="${OPENSEARCH_HEAP:--Xms512m -Xmx512m}"
JAVA_OPTS="${OPENSEARCH_JAVA_OPTS:-}"
START_TIMEOUT="${OPENSEARCH_START_TIMEOUT:-180}"
RUN_DIR="${SEARCHSYNC_RUN_DIR:-/tmp/searchsync-run}/opensearch"
PID_FILE="$RUN_DIR/node-$PORT.pid"
LOG_FILE="$RUN_DIR/node-$PORT.log"
TMP_HOME_FILE="$RUN_DIR/node-$PORT.tmphome"   # holds the temporary home dir to remove on stop
URL="http://127.0.0.1:$PORT"

# 0 when the cluster answers yellow or green within ~1 s
healthy() {
  local body
  body="$(curl -sf --max-time 3 "$URL/_cluster/health?wait_for_status=yellow&timeout=1s" 2>/dev/null)" || return 1
  [[ "$body" == *'"status":"green"'* || "$body" == *'"status":"yellow"'* ]]
}

cmd_start() {
  if healthy; then
    jn_log "already running and healthy at $URL"
    echo "$URL"
    return 0
  fi
  mkdir -p "$RUN_DIR"
  local t0 pid home="${OPENSEARCH_HOME:-}"
  t0="$(date +%s.%N)"
  if pid="$(jn_running_pid)"; then
    jn_log "launcher already running (pid $pid), waiting for it to become healthy"
  else
    jn_build
    t0="$(date +%s.%N)"   # start-up time excludes the (one-off) Maven build
    if [[ -z "$home" ]]; then
      home="$(jn_new_home "searchsync-opensearch-$PORT")"
    else
      rm -f "$TMP_HOME_FILE"   # a home the caller chose is theirs to keep
      mkdir -p "$home"
    fi
    # shellcheck disable=SC2086  # HEAP / OPENSEARCH_JAVA_OPTS are word lists on purpose
    OPENSEARCH_PORT="$PORT" OPENSEARCH_HOME="$home" nohup java $HEAP $JAVA_OPTS \
      -cp "$JAR:$TARGET_DIR/lib/*" searchsync.opensearch.Launcher >"$LOG_FILE" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$PID_FILE"
    jn_log "started pid $pid (home $home, log $LOG_FILE)"
  fi
  jn_wait "$pid" "$t0" "$URL"
  echo "$URL"
}

case "${1:-}" in
  build) jn_build ;;
  start) cmd_start ;;
  stop) jn_stop ;;
  status) curl -sf --max-time 3 "$URL/_cluster/health" 2>/dev/null || echo down ;;
  url) echo "$URL" ;;
  *) echo "usage: $0 build|start|stop|status|url" >&2; exit 2 ;;
esac
