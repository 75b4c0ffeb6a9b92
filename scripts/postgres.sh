#!/usr/bin/env bash
# Starts (or finds) the PostgreSQL server that searchsync's tests and demo use.
#
#   scripts/postgres.sh start   # DATABASE_URL reachable? use it. Else Debian's
#                               # postgresql package (installed when missing, as
#                               # root), cluster started, role + database created.
#   scripts/postgres.sh stop    # stops the Debian cluster it started
#   scripts/postgres.sh url     # prints the URL to use
#   scripts/postgres.sh tls     # TLS on the running Debian cluster (see below)
#   scripts/postgres.sh tls-env # prints the export lines of the TLS files
#
# The role and database are both "searchsync" (password "searchsync") on
# 127.0.0.1:${PGPORT:-5432}.
#
# TLS (done by start too): a test CA generated with openssl under $TLS_DIR
# signs the server's certificate (127.0.0.1, localhost) and a client
# certificate for the role "searchsync_cert", which pg_hba admits over
# hostssl by certificate alone. Only reloadable settings change (ssl_*,
# pg_hba): a running cluster is reloaded, never restarted.
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
    if local_cluster; then tls; fi
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
  tls
  echo "postgres: ready at $DEFAULT_URL" >&2
}

TLS_DIR=${SEARCHSYNC_PG_TLS_DIR:-/var/lib/postgresql/searchsync-tls}
CERT_USER=searchsync_cert

# tls_files makes the CA, the server's and the client's certificates once.
tls_files() {
  [ -s "$TLS_DIR/server.crt" ] && [ -s "$TLS_DIR/client.crt" ] && return 0
  command -v openssl >/dev/null || as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
  as_root mkdir -p "$TLS_DIR"
  local d; d=$(mktemp -d)  # install() above is the package install: use the binary
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -keyout "$d/ca.key" -out "$d/ca.crt" -days 3650 -subj "/CN=searchsync test CA" 2>/dev/null
  openssl req "${ec[@]}" -keyout "$d/server.key" -out "$d/server.csr" -subj "/CN=127.0.0.1" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$d/server.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 -extfile "$d/server.ext" -out "$d/server.crt" 2>/dev/null
  openssl req "${ec[@]}" -keyout "$d/client.key" -out "$d/client.csr" -subj "/CN=$CERT_USER" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' > "$d/client.ext"
  openssl x509 -req -in "$d/client.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 -extfile "$d/client.ext" -out "$d/client.crt" 2>/dev/null
  as_root "$(type -P install)" -m 0644 "$d/ca.crt" "$d/server.crt" "$d/client.crt" "$TLS_DIR/"
  as_root "$(type -P install)" -m 0600 -o postgres -g postgres "$d/server.key" "$TLS_DIR/"
  as_root "$(type -P install)" -m 0600 "$d/client.key" "$TLS_DIR/"
  rm -rf "$d"
}

# tls turns TLS on for the local Debian cluster and reloads it.
tls() {
  local v; v=$(cluster_version)
  [ -n "$v" ] && [ -d "/etc/postgresql/$v/main" ] || { echo "postgres: no Debian cluster to enable TLS on" >&2; return 1; }
  tls_files
  local conf="/etc/postgresql/$v/main/conf.d/searchsync-tls.conf"
  local want; want=$(printf "ssl = on\nssl_ca_file = '%s/ca.crt'\nssl_cert_file = '%s/server.crt'\nssl_key_file = '%s/server.key'\n" "$TLS_DIR" "$TLS_DIR" "$TLS_DIR")
  local hba="/etc/postgresql/$v/main/pg_hba.conf"
  local line="hostssl all $CERT_USER 127.0.0.1/32 cert"
  local changed=0
  if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
    printf '%s\n' "$want" | as_root tee "$conf" >/dev/null
    changed=1
  fi
  if ! grep -qxF "$line" "$hba"; then
    # First match wins: the certificate line goes before the password lines.
    as_root sed -i "1i # searchsync: client-certificate login for $CERT_USER (scripts/postgres.sh)\n$line" "$hba"
    changed=1
  fi
  local tlsurl="postgres://searchsync:searchsync@127.0.0.1:${PGPORT}/searchsync?sslmode=verify-full&sslrootcert=$TLS_DIR/ca.crt"
  if [ "$changed" = 1 ] || ! psql "$tlsurl" -Atqc 'select 1' >/dev/null 2>&1; then
    as_root pg_ctlcluster "$v" main reload
  fi
  as_root su postgres -c "psql -p $PGPORT -qtAc \"DO \\\$\\\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='$CERT_USER') THEN CREATE ROLE $CERT_USER LOGIN; END IF; END\\\$\\\$\""
  local deadline=$((SECONDS + 30))
  until psql "$tlsurl" -Atqc 'select 1' >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "postgres: TLS with $TLS_DIR/ca.crt does not answer after 30 s" >&2; return 1; }
    sleep 0.5
  done
  echo "postgres: TLS on, CA $TLS_DIR/ca.crt" >&2
}

tls_env() {
  [ -s "$TLS_DIR/ca.crt" ] || return 0
  echo "export SEARCHSYNC_PG_CA='$TLS_DIR/ca.crt'"
  echo "export SEARCHSYNC_PG_CLIENT_CERT='$TLS_DIR/client.crt'"
  echo "export SEARCHSYNC_PG_CLIENT_KEY='$TLS_DIR/client.key'"
  echo "export SEARCHSYNC_PG_CERT_USER='$CERT_USER'"
}

local_cluster() { command -v pg_lsclusters >/dev/null 2>&1 && [ -n "$(cluster_version)" ] && [ -z "${DATABASE_URL:-}" -o "${DATABASE_URL:-}" = "$DEFAULT_URL" ]; }

stop() {
  local v; v=$(cluster_version)
  [ -n "$v" ] && as_root pg_ctlcluster "$v" main stop 2>/dev/null || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) echo "$URL" ;;
  tls) tls ;;
  tls-env) tls_env ;;
  *) echo "usage: $0 start|stop|url|tls|tls-env" >&2; exit 2 ;;
esac
