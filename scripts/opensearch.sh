#!/usr/bin/env bash
# Run a native single-node OpenSearch 2.19.6 (no Docker) through opensearch-launcher/.
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
LAUNCHER_DIR="$ROOT/opensearch-launcher"
JAR="$LAUNCHER_DIR/target/opensearch-launcher-1.0.0.jar"
MAIN_CLASS="searchsync.opensearch.Launcher"

PORT="${OPENSEARCH_PORT:-9200}"
HEAP="${OPENSEARCH_HEAP:--Xms512m -Xmx512m}"
START_TIMEOUT="${OPENSEARCH_START_TIMEOUT:-180}"
RUN_DIR="${SEARCHSYNC_RUN_DIR:-/tmp/searchsync-run}/opensearch"
PID_FILE="$RUN_DIR/node-$PORT.pid"
LOG_FILE="$RUN_DIR/node-$PORT.log"
TMP_HOME_FILE="$RUN_DIR/node-$PORT.tmphome"   # holds the temporary home dir to remove on stop
URL="http://127.0.0.1:$PORT"

log() { echo "opensearch.sh: $*" >&2; }

healthy() {
  # 0 when the cluster answers yellow or green within ~1 s
  local body
  body="$(curl -sf --max-time 3 "$URL/_cluster/health?wait_for_status=yellow&timeout=1s" 2>/dev/null)" || return 1
  [[ "$body" == *'"status":"green"'* || "$body" == *'"status":"yellow"'* ]]
}

# pid of our launcher for this port, if it is alive (and really is our launcher)
running_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "opensearch-launcher" || return 1
  echo "$pid"
}

needs_build() {
  [[ -f "$JAR" && -d "$LAUNCHER_DIR/target/lib" ]] || return 0
  [[ -n "$(find "$LAUNCHER_DIR/pom.xml" "$LAUNCHER_DIR/src" -type f -newer "$JAR" -print -quit)" ]]
}

cmd_build() {
  if ! needs_build; then
    return 0
  fi
  if ! command -v mvn >/dev/null 2>&1; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
      log "mvn not found; installing maven"
      apt-get install -y maven >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y maven >/dev/null; }
    else
      log "mvn not found (install Maven, or run as root so apt-get can)"; exit 1
    fi
  fi
  log "building opensearch-launcher"
  (cd "$LAUNCHER_DIR" && mvn -q -B -Dstyle.color=never package -DskipTests) >&2
  touch "$JAR"
}

cmd_start() {
  if healthy; then
    log "already running and healthy at $URL"
    echo "$URL"
    return 0
  fi
  local t0 pid
  mkdir -p "$RUN_DIR"
  t0="$(date +%s.%N)"
  if pid="$(running_pid)"; then
    log "launcher already running (pid $pid), waiting for it to become healthy"
  else
    cmd_build
    t0="$(date +%s.%N)"   # start-up time excludes the (one-off) Maven build
    local home="${OPENSEARCH_HOME:-}"
    if [[ -z "$home" ]]; then
      home="$(mktemp -d "${TMPDIR:-/tmp}/searchsync-opensearch-$PORT.XXXXXX")"
      echo "$home" >"$TMP_HOME_FILE"
    else
      rm -f "$TMP_HOME_FILE"
      mkdir -p "$home"
    fi
    # shellcheck disable=SC2086  # HEAP / OPENSEARCH_JAVA_OPTS are word lists on purpose
    OPENSEARCH_PORT="$PORT" OPENSEARCH_HOME="$home" nohup java $HEAP ${OPENSEARCH_JAVA_OPTS:-} \
      -cp "$JAR:$LAUNCHER_DIR/target/lib/*" "$MAIN_CLASS" >"$LOG_FILE" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$PID_FILE"
    log "started pid $pid (home $home, log $LOG_FILE)"
  fi
  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  until healthy; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "OpenSearch process $pid exited before becoming healthy; last 50 log lines:"
      tail -n 50 "$LOG_FILE" >&2 || true
      rm -f "$PID_FILE"
      exit 1
    fi
    if (( $(date +%s) >= deadline )); then
      log "OpenSearch not healthy at $URL after ${START_TIMEOUT}s; last 50 log lines:"
      tail -n 50 "$LOG_FILE" >&2 || true
      log "(pid $pid is left running; '$0 start' waits for it again, '$0 stop' ends it)"
      exit 1
    fi
    sleep 0.5
  done
  local t1
  t1="$(date +%s.%N)"
  log "healthy at $URL after $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')s (pid $pid)"
  echo "$URL"
}

cmd_stop() {
  local pid
  if pid="$(running_pid)"; then
    log "stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < 60; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "pid $pid still alive after 30s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
    fi
    log "stopped"
  else
    log "not running (no live launcher pid for port $PORT)"
  fi
  rm -f "$PID_FILE"
  if [[ -f "$TMP_HOME_FILE" ]]; then
    local home
    home="$(cat "$TMP_HOME_FILE")"
    if [[ "$home" == */searchsync-opensearch-* && -d "$home" ]]; then
      rm -rf -- "$home"
    fi
    rm -f "$TMP_HOME_FILE"
  fi
}

cmd_status() {
  local body
  if body="$(curl -sf --max-time 3 "$URL/_cluster/health" 2>/dev/null)"; then
    echo "$body"
  else
    echo "down"
  fi
}

case "${1:-}" in
  build) cmd_build ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  url) echo "$URL" ;;
  *) echo "usage: $0 build|start|stop|status|url" >&2; exit 2 ;;
esac
