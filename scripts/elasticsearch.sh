#!/usr/bin/env bash
# Run a native single-node Elasticsearch 7.17.28 (no Docker, no tarball: the
# server jar and its modules from Maven) through elasticsearch-launcher/.
# The go-elasticsearch v8 client talks to it for real: it answers with
# X-Elastic-Product: Elasticsearch, which `start` checks.
#
# usage: scripts/elasticsearch.sh build|start|stop|status|url
#
# env:
#   ELASTICSEARCH_PORT           HTTP port (default 9210; transport uses port+100)
#   ELASTICSEARCH_HEAP           JVM heap flags (default "-Xms384m -Xmx384m")
#   ELASTICSEARCH_JAVA_OPTS      more JVM flags (default "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC":
#                                half the CPU to start, which matters on a loaded machine; set it
#                                empty for the JVM's defaults)
#   ELASTICSEARCH_START_TIMEOUT  seconds to wait for a healthy node (default 180)
#   SEARCHSYNC_RUN_DIR           pid/log files go to $SEARCHSYNC_RUN_DIR/elasticsearch (default /tmp/searchsync-run)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/jvmnode.sh
source "$ROOT/scripts/lib/jvmnode.sh"

NODE_NAME=elasticsearch
LAUNCHER_DIR="$ROOT/elasticsearch-launcher"
TARGET_DIR="$LAUNCHER_DIR/target"
JAR="$TARGET_DIR/elasticsearch-launcher-1.0.0.jar"
MARKER="searchsync.elasticsearch.Launcher"
MVN_ARGS=""
PORT="${ELASTICSEARCH_PORT:-9210}"
HEAP="${ELASTICSEARCH_HEAP:--Xms384m -Xmx384m}"
JAVA_OPTS="${ELASTICSEARCH_JAVA_OPTS--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
START_TIMEOUT="${ELASTICSEARCH_START_TIMEOUT:-180}"
RUN_DIR="${SEARCHSYNC_RUN_DIR:-/tmp/searchsync-run}/elasticsearch"
PID_FILE="$RUN_DIR/node-$PORT.pid"
LOG_FILE="$RUN_DIR/node-$PORT.log"
TMP_HOME_FILE="$RUN_DIR/node-$PORT.tmphome"
URL="http://127.0.0.1:$PORT"
HOME_PREFIX="searchsync-elasticsearch-$PORT"

healthy() {
  local hdr body
  hdr="$(curl -s -o /dev/null -D - --max-time 3 "$URL/" 2>/dev/null)" || return 1
  grep -qi '^x-elastic-product: *Elasticsearch' <<<"$hdr" || return 1
  body="$(curl -sf --max-time 3 "$URL/_cluster/health?wait_for_status=yellow&timeout=1s" 2>/dev/null)" || return 1
  [[ "$body" == *'"status":"green"'* || "$body" == *'"status":"yellow"'* ]]
}

node_exec() {
  # shellcheck disable=SC2086  # HEAP / ELASTICSEARCH_JAVA_OPTS are word lists on purpose
  ELASTICSEARCH_PORT="$PORT" ELASTICSEARCH_HOME="$1" exec java $HEAP $JAVA_OPTS \
    -cp "$JAR:$TARGET_DIR/lib/*" "$MARKER"
}

cmd_status() { curl -sf --max-time 3 "$URL/_cluster/health" 2>/dev/null || echo down; }

jn_main "$@"
