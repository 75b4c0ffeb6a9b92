# shellcheck shell=bash
# Shared by scripts/elasticsearch.sh and scripts/opensearch-secure.sh: build a
# Maven launcher, start its JVM in the background, wait for health with a
# deadline, stop it by its pid. The caller sets:
#   NODE_NAME       for messages ("elasticsearch")
#   LAUNCHER_DIR    the Maven project;  MVN_ARGS  extra mvn arguments (a profile)
#   TARGET_DIR      its build directory; JAR  the launcher jar in it
#   PID_FILE LOG_FILE TMP_HOME_FILE  state files;  START_TIMEOUT  seconds
#   MARKER          a string the launcher's command line contains (pid check)
# and defines healthy() (0 when the node answers as it should).

jn_log() { echo "$NODE_NAME: $*" >&2; }

jn_as_root() { if [[ "$(id -u)" == 0 ]]; then "$@"; else sudo "$@"; fi; }

# jn_apt_need CMD PACKAGE: installs Debian's PACKAGE when CMD is missing.
jn_apt_need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  jn_log "$1 not found; installing Debian's $2"
  jn_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1 || {
    jn_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      jn_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  }
}

# pid of our launcher, if it is alive (and really is our launcher)
jn_running_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$MARKER" || return 1
  echo "$pid"
}

jn_build() {
  if [[ -f "$JAR" && -d "$TARGET_DIR/lib" ]] &&
    [[ -z "$(find "$LAUNCHER_DIR/pom.xml" "$LAUNCHER_DIR/src" -type f -newer "$JAR" -print -quit)" ]]; then
    return 0
  fi
  jn_apt_need mvn maven
  jn_log "building $(basename "$LAUNCHER_DIR")${MVN_ARGS:+ $MVN_ARGS}"
  # shellcheck disable=SC2086  # MVN_ARGS is a word list
  (cd "$LAUNCHER_DIR" && mvn -q -B -Dstyle.color=never ${MVN_ARGS:-} package -DskipTests) >&2
  touch "$JAR"
}

# jn_new_home PREFIX: prints a fresh temporary home and remembers it for stop.
jn_new_home() {
  local home
  home="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
  echo "$home" >"$TMP_HOME_FILE"
  echo "$home"
}

# jn_wait PID T0 URL: waits for healthy() until START_TIMEOUT; prints the time taken.
jn_wait() {
  local pid="$1" t0="$2" url="$3"
  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  until healthy; do
    if ! kill -0 "$pid" 2>/dev/null; then
      jn_log "process $pid exited before becoming healthy; last 50 log lines:"
      tail -n 50 "$LOG_FILE" >&2 || true
      rm -f "$PID_FILE"
      return 1
    fi
    if (( $(date +%s) >= deadline )); then
      jn_log "not healthy at $url after ${START_TIMEOUT}s; last 50 log lines:"
      tail -n 50 "$LOG_FILE" >&2 || true
      jn_log "(pid $pid is left running; 'start' waits for it again, 'stop' ends it)"
      return 1
    fi
    sleep 0.5
  done
  jn_log "healthy at $url after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s (pid $pid)"
}

jn_stop() {
  local pid
  if pid="$(jn_running_pid)"; then
    jn_log "stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < 60; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      jn_log "pid $pid still alive after 30s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    jn_log "stopped"
  else
    jn_log "not running"
  fi
  rm -f "$PID_FILE"
  if [[ -f "$TMP_HOME_FILE" ]]; then
    local home
    home="$(cat "$TMP_HOME_FILE")"
    if [[ "$home" == */searchsync-* && -d "$home" ]]; then
      rm -rf -- "$home"
    fi
    rm -f "$TMP_HOME_FILE"
  fi
}
