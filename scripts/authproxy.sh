#!/usr/bin/env bash
# A real HTTP server that refuses a wrong credential, for searchsync's API-key
# and bearer-token tests: Debian's nginx (installed when missing, as root) on
# 127.0.0.1:${AUTHPROXY_PORT:-9230}, proxying to the Elasticsearch 7.17 node
# (scripts/elasticsearch.sh, 127.0.0.1:9210). It lets a request through only
# with exactly one of
#   Authorization: ApiKey <base64(id:key)>   (the generated API key)
#   Authorization: Bearer <token>            (the generated token)
# and answers anything else 401 with a security_exception body, as
# Elasticsearch does. The header is removed before the request is passed on.
# The key and token are generated at the first start into
# $SEARCHSYNC_RUN_DIR/authproxy/secrets.env (mode 0600), never the repository.
#
# usage: scripts/authproxy.sh start|stop|status|url|env
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NODE_NAME=authproxy
# shellcheck source=lib/jvmnode.sh
source "$ROOT/scripts/lib/jvmnode.sh"

PORT="${AUTHPROXY_PORT:-9230}"
UPSTREAM="${AUTHPROXY_UPSTREAM:-127.0.0.1:${ELASTICSEARCH_PORT:-9210}}"
RUN_DIR="${SEARCHSYNC_RUN_DIR:-/tmp/searchsync-run}/authproxy"
SECRETS="$RUN_DIR/secrets.env"
PID_FILE="$RUN_DIR/nginx.pid"
URL="http://127.0.0.1:$PORT"

make_secrets() {
  [[ -f "$SECRETS" ]] && return 0
  mkdir -p "$RUN_DIR"
  local id key token
  # Elasticsearch's API-key ids and keys are url-safe base64 strings of
  # about 20 and 22 characters.
  id="$(openssl rand -base64 15 | tr '+/' '-_')"
  key="$(openssl rand -base64 16 | tr '+/' '-_' | tr -d '=')"
  token="$(openssl rand -hex 32)"
  (umask 077 && {
    echo "API_KEY_ID=$id"
    echo "API_KEY_SECRET=$key"
    echo "API_KEY=$(printf '%s:%s' "$id" "$key" | base64 -w0)"
    echo "BEARER=$token"
  } >"$SECRETS")
}

write_conf() {
  # shellcheck disable=SC1090
  source "$SECRETS"
  mkdir -p "$RUN_DIR/tmp"
  (umask 077 && cat >"$RUN_DIR/nginx.conf" <<CONF
worker_processes 1;
pid $PID_FILE;
error_log $RUN_DIR/error.log warn;
events { worker_connections 512; }
http {
  access_log $RUN_DIR/access.log;
  client_body_temp_path $RUN_DIR/tmp/body;
  proxy_temp_path $RUN_DIR/tmp/proxy;
  fastcgi_temp_path $RUN_DIR/tmp/fastcgi;
  uwsgi_temp_path $RUN_DIR/tmp/uwsgi;
  scgi_temp_path $RUN_DIR/tmp/scgi;
  client_max_body_size 200m;
  client_body_buffer_size 16m;
  map_hash_bucket_size 256;
  map \$http_authorization \$searchsync_auth_ok {
    default 0;
    "ApiKey $API_KEY" 1;
    "Bearer $BEARER" 1;
  }
  upstream elasticsearch {
    server $UPSTREAM;
    keepalive 32;
  }
  server {
    listen 127.0.0.1:$PORT;
    location / {
      default_type application/json;
      if (\$searchsync_auth_ok = 0) {
        add_header WWW-Authenticate 'ApiKey' always;
        add_header WWW-Authenticate 'Bearer realm="security"' always;
        add_header X-Elastic-Product 'Elasticsearch' always;
        return 401 '{"error":{"root_cause":[{"type":"security_exception","reason":"unable to authenticate with provided credentials"}],"type":"security_exception","reason":"unable to authenticate with provided credentials"},"status":401}';
      }
      proxy_set_header Authorization "";
      proxy_set_header Connection "";
      proxy_http_version 1.1;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
      proxy_pass http://elasticsearch;
    }
  }
}
CONF
  )
}

running() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null
}

# healthy: a wrong credential is refused, the API key gets through to Elasticsearch
healthy() {
  # shellcheck disable=SC1090
  source "$SECRETS"
  [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 -H 'Authorization: Bearer wrong' "$URL/")" == 401 ]] || return 1
  # the key goes to curl on stdin (-K -), not on its command line
  printf 'header = "Authorization: ApiKey %s"\n' "$API_KEY" |
    curl -sf -K - --max-time 3 "$URL/_cluster/health" >/dev/null 2>&1
}

cmd_start() {
  jn_apt_need openssl openssl
  [[ -x /usr/sbin/nginx ]] || command -v nginx >/dev/null 2>&1 || jn_apt_need nginx nginx
  local nginx_bin
  nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
  make_secrets
  if ! running; then
    write_conf
    "$nginx_bin" -t -q -c "$RUN_DIR/nginx.conf" -p "$RUN_DIR" -e "$RUN_DIR/error.log"
    "$nginx_bin" -c "$RUN_DIR/nginx.conf" -p "$RUN_DIR" -e "$RUN_DIR/error.log"
  fi
  local deadline=$((SECONDS + ${AUTHPROXY_START_TIMEOUT:-240}))
  until healthy; do
    if ! running; then
      jn_log "nginx is not running; error log:"; tail -n 20 "$RUN_DIR/error.log" >&2 || true; return 1
    fi
    if ((SECONDS >= deadline)); then
      jn_log "not healthy at $URL (is Elasticsearch up at $UPSTREAM?)"; tail -n 20 "$RUN_DIR/error.log" >&2 || true; return 1
    fi
    sleep 0.5
  done
  jn_log "ready at $URL (to $UPSTREAM, pid $(cat "$PID_FILE"))"
  echo "$URL"
}

cmd_stop() {
  if running; then
    local pid i
    pid="$(cat "$PID_FILE")"
    kill -QUIT "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
    jn_log "stopped"
  fi
  rm -f "$PID_FILE"
}

cmd_env() {
  local API_KEY="" API_KEY_ID="" API_KEY_SECRET="" BEARER=""
  # shellcheck disable=SC1090
  [[ -f "$SECRETS" ]] && source "$SECRETS"
  echo "export SEARCHSYNC_AUTH_PROXY_URL='$URL'"
  echo "export SEARCHSYNC_AUTH_PROXY_API_KEY='$API_KEY'"
  echo "export SEARCHSYNC_AUTH_PROXY_API_KEY_ID='$API_KEY_ID'"
  echo "export SEARCHSYNC_AUTH_PROXY_API_KEY_SECRET='$API_KEY_SECRET'"
  echo "export SEARCHSYNC_AUTH_PROXY_BEARER='$BEARER'"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) if running && healthy; then echo up; else echo down; fi ;;
  url) echo "$URL" ;;
  env) cmd_env ;;
  *) echo "usage: $0 start|stop|status|url|env" >&2; exit 2 ;;
esac
