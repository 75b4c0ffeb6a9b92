#!/usr/bin/env bash
# Run a native single-node OpenSearch 2.19.4 with the security plugin (TLS on
# HTTP and transport, internal users, client-certificate authentication), from
# Maven jars through opensearch-launcher/ built with -Popensearch-2.19.4 (into
# target-2.19.4/, so the plain 2.19.6 node can run at the same time).
#
# usage: scripts/opensearch-secure.sh build|start|stop|status|url|env
#
# At the first start it generates, under $SEARCHSYNC_RUN_DIR/opensearch-secure/secrets
# (mode 0700, never in the repository): a CA, the node certificate (SAN
# 127.0.0.1 and localhost), the security admin certificate, a client
# certificate (CN searchsync-client, mapped to the writer role) and the
# passwords of three internal users:
#   admin   all_access
#   writer  searchsync_writer: only what searchsync's indexer and reindex call
#   reader  searchsync_reader: read and search only
# Later starts reuse them. `env` prints the SEARCHSYNC_SECURE_* exports.
#
# env:
#   OPENSEARCH_SECURE_PORT           HTTP port (default 9220; transport uses port+100)
#   OPENSEARCH_SECURE_HEAP           JVM heap flags (default "-Xms384m -Xmx384m")
#   OPENSEARCH_SECURE_JAVA_OPTS      more JVM flags (default "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC":
#                                    half the CPU to start; set it empty for the JVM's defaults)
#   OPENSEARCH_SECURE_START_TIMEOUT  seconds to wait for a healthy node (default 300)
#   SEARCHSYNC_RUN_DIR               default /tmp/searchsync-run
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/jvmnode.sh
source "$ROOT/scripts/lib/jvmnode.sh"

NODE_NAME=opensearch-secure
LAUNCHER_DIR="$ROOT/opensearch-launcher"
TARGET_DIR="$LAUNCHER_DIR/target-2.19.4"
JAR="$TARGET_DIR/opensearch-launcher-1.0.0.jar"
PLUGIN_DIR="$TARGET_DIR/plugins/opensearch-security"
MVN_ARGS="-Popensearch-2.19.4"
MARKER="opensearch-launcher/target-2.19.4"
PORT="${OPENSEARCH_SECURE_PORT:-9220}"
HEAP="${OPENSEARCH_SECURE_HEAP:--Xms384m -Xmx384m}"
JAVA_OPTS="${OPENSEARCH_SECURE_JAVA_OPTS--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
START_TIMEOUT="${OPENSEARCH_SECURE_START_TIMEOUT:-300}"
RUN_DIR="${SEARCHSYNC_RUN_DIR:-/tmp/searchsync-run}/opensearch-secure"
SECRETS="$RUN_DIR/secrets"
PID_FILE="$RUN_DIR/node-$PORT.pid"
LOG_FILE="$RUN_DIR/node-$PORT.log"
TMP_HOME_FILE="$RUN_DIR/node-$PORT.tmphome"
URL="https://127.0.0.1:$PORT"
HOME_PREFIX="searchsync-opensearch-secure-$PORT"

DN_SUFFIX="OU=test,O=searchsync"
NODE_DN="CN=searchsync-node,$DN_SUFFIX"
ADMIN_DN="CN=searchsync-admin,$DN_SUFFIX"
CLIENT_CN="searchsync-client"

# The security index is created from the config files shortly after the node
# starts; until then every request answers 503. Healthy = the admin user
# authenticates and the cluster is yellow or green.
healthy() {
  [[ -f "$SECRETS/passwords.env" ]] || return 1
  local body
  # shellcheck disable=SC1091
  # the credential goes to curl on stdin (-K -), not on its command line
  body="$(source "$SECRETS/passwords.env" && printf 'user = "admin:%s"\n' "$ADMIN_PASSWORD" |
    curl -sf -K - --max-time 3 --cacert "$SECRETS/ca.pem" \
      "$URL/_cluster/health?wait_for_status=yellow&timeout=1s" 2>/dev/null)" || return 1
  [[ "$body" == *'"status":"green"'* || "$body" == *'"status":"yellow"'* ]]
}

# classpath: the launcher's lib/ plus the plugin's jars that lib/ lacks
# (same artifact in both: lib/'s copy wins, it is the one the core was built with)
classpath() {
  local cp="$JAR:$TARGET_DIR/lib/*" j b base
  for j in "$PLUGIN_DIR"/*.jar; do
    b="$(basename "$j" .jar)"
    base="$(sed -E 's/-[0-9][0-9.]*([.-](Final|jre))?$//' <<<"$b")"
    if ! compgen -G "$TARGET_DIR/lib/$base-[0-9]*.jar" >/dev/null; then
      cp+=":$j"
    fi
  done
  echo "$cp"
}

# cert NAME SUBJECT [SAN]: a key and a certificate signed by the CA
cert() {
  local name="$1" subj="$2" san="${3:-}" ext="$SECRETS/$1.ext"
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$SECRETS/$name-key.pem" 2>/dev/null
  openssl req -new -key "$SECRETS/$name-key.pem" -subj "$subj" -out "$SECRETS/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [[ -n "$san" ]] && echo "subjectAltName=$san"
  } >"$ext"
  openssl x509 -req -in "$SECRETS/$name.csr" -CA "$SECRETS/ca.pem" -CAkey "$SECRETS/ca-key.pem" \
    -CAcreateserial -days 825 -sha256 -extfile "$ext" -out "$SECRETS/$name.pem" 2>/dev/null
  rm -f "$SECRETS/$name.csr" "$ext"
}

# hash_password PASSWORD: the plugin's own bcrypt hasher; the password goes
# through the environment, not the command line (which ps shows)
hash_password() {
  SEARCHSYNC_HASH_INPUT="$1" java -cp "$(classpath)" org.opensearch.security.tools.Hasher \
    -env SEARCHSYNC_HASH_INPUT 2>/dev/null | tail -n 1
}

make_secrets() {
  [[ -f "$SECRETS/passwords.env" && -f "$SECRETS/client.pem" ]] && return 0
  jn_apt_need openssl openssl
  rm -rf "$SECRETS"
  mkdir -p "$SECRETS"
  chmod 700 "$SECRETS"
  jn_log "generating a CA, certificates and passwords in $SECRETS"
  # RSA 2048 keys (PKCS#8 PEM, what the security plugin reads) for the CA and every certificate
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$SECRETS/ca-key.pem" 2>/dev/null
  openssl req -x509 -new -key "$SECRETS/ca-key.pem" -subj "/O=searchsync/OU=test/CN=searchsync test CA" \
    -days 825 -sha256 -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$SECRETS/ca.pem" 2>/dev/null
  cert node "/O=searchsync/OU=test/CN=searchsync-node" "IP:127.0.0.1,DNS:localhost"
  cert admin "/O=searchsync/OU=test/CN=searchsync-admin"
  cert client "/O=searchsync/OU=test/CN=$CLIENT_CN"
  local a w r ah wh rh
  a="$(openssl rand -hex 18)"; w="$(openssl rand -hex 18)"; r="$(openssl rand -hex 18)"
  # three JVMs at once: each hash takes a JVM start
  hash_password "$a" >"$SECRETS/.h.admin" & hash_password "$w" >"$SECRETS/.h.writer" & hash_password "$r" >"$SECRETS/.h.reader" &
  wait
  ah="$(cat "$SECRETS/.h.admin")"; wh="$(cat "$SECRETS/.h.writer")"; rh="$(cat "$SECRETS/.h.reader")"
  rm -f "$SECRETS"/.h.*
  [[ "$ah" == '$2'* && "$wh" == '$2'* && "$rh" == '$2'* ]] || { jn_log "hashing the passwords failed"; exit 1; }
  {
    echo "ADMIN_PASSWORD=$a"; echo "WRITER_PASSWORD=$w"; echo "READER_PASSWORD=$r"
    echo "ADMIN_HASH='$ah'"; echo "WRITER_HASH='$wh'"; echo "READER_HASH='$rh'"
  } >"$SECRETS/passwords.env"
  chmod 600 "$SECRETS"/*
}

# write_config HOME: opensearch.yml, the certificates and the security config files
write_config() {
  local conf="$1/config" sec="$1/config/opensearch-security"
  mkdir -p "$sec"
  cp "$SECRETS/ca.pem" "$SECRETS/node.pem" "$SECRETS/node-key.pem" "$conf/"
  # HTTP presents the chain (node certificate, then the CA) as Elasticsearch 8
  # does, so that engine.tls.ca_fingerprint can pin the CA.
  cat "$SECRETS/node.pem" "$SECRETS/ca.pem" >"$conf/node-chain.pem"
  cat >"$conf/opensearch.yml" <<YML
plugins.security.ssl.transport.pemcert_filepath: node.pem
plugins.security.ssl.transport.pemkey_filepath: node-key.pem
plugins.security.ssl.transport.pemtrustedcas_filepath: ca.pem
plugins.security.ssl.transport.enforce_hostname_verification: false
plugins.security.ssl.http.enabled: true
plugins.security.ssl.http.pemcert_filepath: node-chain.pem
plugins.security.ssl.http.pemkey_filepath: node-key.pem
plugins.security.ssl.http.pemtrustedcas_filepath: ca.pem
plugins.security.ssl.http.clientauth_mode: OPTIONAL
plugins.security.allow_default_init_securityindex: true
plugins.security.authcz.admin_dn: ["$ADMIN_DN"]
plugins.security.nodes_dn: ["$NODE_DN"]
plugins.security.audit.type: noop
plugins.security.restapi.roles_enabled: ["all_access"]
plugins.security.system_indices.enabled: true
YML
  # defaults shipped in the plugin zip for the files we do not write
  cp "$PLUGIN_DIR"/config/{action_groups,allowlist,audit,nodes_dn,tenants}.yml "$sec/"
  # shellcheck disable=SC1091
  source "$SECRETS/passwords.env"
  cat >"$sec/internal_users.yml" <<YML
_meta:
  type: "internalusers"
  config_version: 2
admin:
  hash: "$ADMIN_HASH"
  reserved: true
  description: "searchsync test admin (all_access)"
writer:
  hash: "$WRITER_HASH"
  description: "searchsync: the least privileges it needs"
reader:
  hash: "$READER_HASH"
  description: "read and search only"
YML
  cat >"$sec/config.yml" <<'YML'
_meta:
  type: "config"
  config_version: 2
config:
  dynamic:
    http:
      anonymous_auth_enabled: false
    authc:
      clientcert_auth_domain:
        description: "a client certificate signed by the test CA; the user is its CN"
        http_enabled: true
        transport_enabled: false
        order: 0
        http_authenticator:
          type: clientcert
          config:
            username_attribute: cn
          challenge: false
        authentication_backend:
          type: noop
      basic_internal_auth_domain:
        description: "internal users with a password"
        http_enabled: true
        transport_enabled: true
        order: 1
        http_authenticator:
          type: basic
          challenge: true
        authentication_backend:
          type: intern
YML
  # What searchsync calls (indexer/, reindex/): ping, cluster health and
  # state (blocks), create/delete/get index, aliases, mappings and settings,
  # refresh, bulk writes, mget, search/count, scroll, _reindex and its task.
  cat >"$sec/roles.yml" <<'YML'
_meta:
  type: "roles"
  config_version: 2
searchsync_writer:
  description: "what searchsync needs and nothing more"
  cluster_permissions:
    - "cluster:monitor/main"
    - "cluster:monitor/health"
    - "cluster:monitor/state"
    - "cluster:monitor/task/get"
    - "cluster:admin/tasks/cancel"
    - "indices:data/write/bulk"
    - "indices:data/write/reindex"
    - "indices:data/read/mget"
    - "indices:data/read/scroll"
    - "indices:data/read/scroll/clear"
    - "indices:admin/aliases"
    - "indices:admin/aliases/get"
  index_permissions:
    - index_patterns: ["*"]
      allowed_actions:
        - "indices:admin/create"
        - "indices:admin/delete"
        - "indices:admin/get"
        - "indices:admin/exists"
        - "indices:admin/aliases"
        - "indices:admin/aliases/get"
        - "indices:admin/mapping/put"
        - "indices:admin/mappings/get"
        - "indices:admin/settings/update"
        - "indices:monitor/settings/get"
        - "indices:admin/refresh*"
        - "indices:monitor/health"
        - "indices:monitor/stats"
        - "indices:data/write/index"
        - "indices:data/write/delete"
        - "indices:data/write/update"
        - "indices:data/write/bulk*"
        - "indices:data/read/get"
        - "indices:data/read/mget*"
        - "indices:data/read/search*"
        - "indices:data/read/scroll*"
searchsync_reader:
  description: "read and search only"
  cluster_permissions:
    - "cluster:monitor/main"
    - "cluster:monitor/health"
    - "indices:data/read/mget"
    - "indices:data/read/scroll"
    - "indices:data/read/scroll/clear"
  index_permissions:
    - index_patterns: ["*"]
      allowed_actions:
        - "indices:data/read/get"
        - "indices:data/read/mget*"
        - "indices:data/read/search*"
        - "indices:data/read/scroll*"
YML
  cat >"$sec/roles_mapping.yml" <<YML
_meta:
  type: "rolesmapping"
  config_version: 2
all_access:
  reserved: false
  users: ["admin"]
searchsync_writer:
  users: ["writer", "$CLIENT_CN"]
searchsync_reader:
  users: ["reader"]
YML
}

# env prints the exports; before the first start (no secrets yet) the
# passwords and fingerprint are empty, and the tests say to start the services.
cmd_env() {
  local fp="" ADMIN_PASSWORD="" WRITER_PASSWORD="" READER_PASSWORD=""
  if [[ -f "$SECRETS/passwords.env" ]]; then
    # shellcheck disable=SC1091
    source "$SECRETS/passwords.env"
    fp="$(openssl x509 -in "$SECRETS/ca.pem" -outform DER | openssl dgst -sha256 -r | cut -d' ' -f1)"
  fi
  echo "export SEARCHSYNC_SECURE_URL='$URL'"
  echo "export SEARCHSYNC_SECURE_CA='$SECRETS/ca.pem'"
  echo "export SEARCHSYNC_SECURE_CA_FINGERPRINT='$fp'"
  echo "export SEARCHSYNC_SECURE_ADMIN_USER='admin'"
  echo "export SEARCHSYNC_SECURE_ADMIN_PASSWORD='$ADMIN_PASSWORD'"
  echo "export SEARCHSYNC_SECURE_WRITER_USER='writer'"
  echo "export SEARCHSYNC_SECURE_WRITER_PASSWORD='$WRITER_PASSWORD'"
  echo "export SEARCHSYNC_SECURE_READONLY_USER='reader'"
  echo "export SEARCHSYNC_SECURE_READONLY_PASSWORD='$READER_PASSWORD'"
  echo "export SEARCHSYNC_SECURE_CLIENT_CERT='$SECRETS/client.pem'"
  echo "export SEARCHSYNC_SECURE_CLIENT_KEY='$SECRETS/client-key.pem'"
}

node_prepare() { make_secrets; }
node_configure() { write_config "$1"; }

node_exec() {
  # shellcheck disable=SC2086  # HEAP / OPENSEARCH_SECURE_JAVA_OPTS are word lists on purpose
  OPENSEARCH_PORT="$PORT" OPENSEARCH_HOME="$1" \
    OPENSEARCH_PLUGIN_DESCRIPTORS="$PLUGIN_DIR/plugin-descriptor.properties" \
    exec java $HEAP $JAVA_OPTS -cp "$(classpath)" searchsync.opensearch.Launcher
}

cmd_status() { if healthy; then echo up; else echo down; fi; }

jn_main "$@"
