#!/usr/bin/env bash
# Starts (or finds) the PostgreSQL server that searchsync's tests and demo use.
#
#   scripts/postgres.sh start   # DATABASE_URL reachable? use it. Else Debian's
#                               # postgresql package (installed when missing, as
#                               # root), cluster started, role + database created.
#   scripts/postgres.sh stop    # stops the Debian cluster it started
#   scripts/postgres.sh url     # prints the URL to use
#
# The role and database are both "searchsync" (password "searchsync") on
# 127.0.0.1:${PGPORT:-5432}.
set -euo pipefail

PGPORT=${PGPORT:-5432}
DEFAULT_URL="postgres://searchsync:searchsync@127.0.0.1:${PGPORT}/searchsync?sslmode=disable"
URL=${DATABASE_URL:-$DEFAULT_URL}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

reachable() { pg_isready -q -d "$1" -t 3 >/dev/null 2>&1 && psql "$1" -Atqc 'select 1' >/dev/null 2>&1; }

cluster_version() { ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -n1; }

install() {
  if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ -z "$(cluster_version)" ]; then
    echo "postgres: installing Debian's postgresql package" >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql postgresql-contrib >/dev/null
  fi
}

start() {
  if reachable "$URL"; then
    echo "postgres: $URL answers" >&2
    return 0
  fi
  if [ -n "${DATABASE_URL:-}" ] && [ "$DATABASE_URL" != "$DEFAULT_URL" ]; then
    echo "postgres: DATABASE_URL=$DATABASE_URL does not answer" >&2
    return 1
  fi
  install
  local v; v=$(cluster_version)
  if ! pg_lsclusters -h | awk -v v="$v" '$1==v && $2=="main"' | grep -q .; then
    as_root pg_createcluster "$v" main >/dev/null
  fi
  # Room for several relays and parallel tests.
  as_root sh -c "printf 'max_connections = 300\nport = ${PGPORT}\nlisten_addresses = '\''127.0.0.1'\''\n' > /etc/postgresql/$v/main/conf.d/searchsync.conf"
  if ! pg_lsclusters -h | awk -v v="$v" '$1==v && $2=="main" && $4=="online"' | grep -q .; then
    as_root pg_ctlcluster "$v" main start
  else
    as_root pg_ctlcluster "$v" main restart
  fi
  local deadline=$((SECONDS + 60))
  until pg_isready -q -h 127.0.0.1 -p "$PGPORT"; do
    [ $SECONDS -lt $deadline ] || { echo "postgres: not ready after 60 s" >&2; return 1; }
    sleep 0.5
  done
  as_root su postgres -c "psql -p $PGPORT -qtAc \"DO \\\$\\\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='searchsync') THEN CREATE ROLE searchsync LOGIN SUPERUSER PASSWORD 'searchsync'; END IF; END\\\$\\\$\""
  as_root su postgres -c "psql -p $PGPORT -qtAc \"SELECT 1 FROM pg_database WHERE datname='searchsync'\" | grep -q 1 || createdb -p $PGPORT -O searchsync searchsync"
  reachable "$DEFAULT_URL" || { echo "postgres: started but $DEFAULT_URL does not answer" >&2; return 1; }
  echo "postgres: ready at $DEFAULT_URL" >&2
}

stop() {
  local v; v=$(cluster_version)
  [ -n "$v" ] && as_root pg_ctlcluster "$v" main stop 2>/dev/null || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) echo "$URL" ;;
  *) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
