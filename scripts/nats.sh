#!/usr/bin/env bash
# Starts a NATS server with JetStream (Debian's nats-server package, installed
# when missing, as root) on 127.0.0.1:${NATS_PORT:-4222}.
#
#   scripts/nats.sh start|stop|status|url
set -euo pipefail

NATS_PORT=${NATS_PORT:-4222}
MON_PORT=$((NATS_PORT + 4000))
RUN_DIR=${SEARCHSYNC_RUN_DIR:-/tmp/searchsync-run}/nats
PID_FILE=$RUN_DIR/nats.pid

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
healthy() { curl -fsS "http://127.0.0.1:${MON_PORT}/healthz?js-enabled-only=true" >/dev/null 2>&1; }

start() {
  if healthy; then echo "nats: nats://127.0.0.1:$NATS_PORT answers" >&2; return 0; fi
  if ! command -v nats-server >/dev/null 2>&1; then
    echo "nats: installing Debian's nats-server package" >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null
  fi
  mkdir -p "$RUN_DIR/store"
  nohup nats-server -a 127.0.0.1 -p "$NATS_PORT" -m "$MON_PORT" -js -sd "$RUN_DIR/store" \
    >"$RUN_DIR/nats.log" 2>&1 &
  echo $! >"$PID_FILE"
  local deadline=$((SECONDS + 30))
  until healthy; do
    if [ $SECONDS -ge $deadline ] || ! kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
      echo "nats: not healthy; log:" >&2; tail -n 30 "$RUN_DIR/nats.log" >&2; return 1
    fi
    sleep 0.2
  done
  echo "nats: ready at nats://127.0.0.1:$NATS_PORT (JetStream store $RUN_DIR/store)" >&2
}

stop() {
  [ -f "$PID_FILE" ] || return 0
  local pid; pid=$(cat "$PID_FILE")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$PID_FILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if healthy; then echo up; else echo down; fi ;;
  url) echo "nats://127.0.0.1:$NATS_PORT" ;;
  *) echo "usage: $0 start|stop|status|url" >&2; exit 2 ;;
esac
