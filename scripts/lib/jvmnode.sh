# shellcheck shell=bash
# Shared by scripts/opensearch.sh, scripts/opensearch-secure.sh and
# scripts/elasticsearch.sh: build a Maven launcher, start its JVM in the
# background, wait for health with a deadline, stop it by its pid, and the
# build|start|stop|url commands (jn_main). The caller sets:
#   NODE_NAME       for messages ("elasticsearch")
#   LAUNCHER_DIR    the Maven project;  MVN_ARGS  extra mvn arguments (a profile)
#   TARGET_DIR      its build directory; JAR  the launcher jar in it
#   PID_FILE LOG_FILE TMP_HOME_FILE  state files;  START_TIMEOUT  seconds
#   RUN_DIR URL     where the state files go; the node's URL
#   HOME_PREFIX     the temporary home's name ("searchsync-elasticsearch-9210")
#   MARKER          a string the launcher's command line contains (pid check)
# and defines healthy() (0 when the node answers as it should) and
# node_exec HOME (execs the JVM in the foreground; jn_start runs it in the
# background). It may define node_prepare (after the build, before the
# start-up clock: keys, certificates), node_home (prints the home to use;
# default a temporary one), node_configure HOME (writes its configuration),
# and cmd_<name> for commands of its own (status, env).

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

# jn_start: the start command. Idempotent: a healthy node is left alone, a
# launcher still starting is waited for.
jn_start() {
  mkdir -p "$RUN_DIR"
  if healthy; then
    jn_log "already running and healthy at $URL"
    echo "$URL"
    return 0
  fi
  local t0 pid home
  t0="$(date +%s.%N)"
  if pid="$(jn_running_pid)"; then
    jn_log "launcher already running (pid $pid), waiting for it to become healthy"
  else
    jn_build
    if declare -F node_prepare >/dev/null; then node_prepare; fi
    t0="$(date +%s.%N)"   # start-up time excludes the one-off build and key generation
    if declare -F node_home >/dev/null; then
      home="$(node_home)"
    else
      home="$(jn_new_home "$HOME_PREFIX")"
    fi
    if declare -F node_configure >/dev/null; then node_configure "$home"; fi
    # The subshell ignores SIGHUP (as nohup would) and becomes the JVM.
    (trap '' HUP; node_exec "$home") >"$LOG_FILE" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$PID_FILE"
    jn_log "started pid $pid (home $home, log $LOG_FILE)"
  fi
  jn_wait "$pid" "$t0" "$URL"
  echo "$URL"
}

# jn_main "$@": build|start|stop|url, and cmd_<name> for the script's own.
jn_main() {
  local cmd="${1:-}"
  case "$cmd" in
    build) jn_build ;;
    start) jn_start ;;
    stop) jn_stop ;;
    url) echo "$URL" ;;
    *)
      if [[ -n "$cmd" ]] && declare -F "cmd_$cmd" >/dev/null; then
        "cmd_$cmd"
      else
        local own
        own="$(declare -F | sed -n 's/^declare -f cmd_//p' | tr '\n' '|')"
        echo "usage: $0 ${own}build|start|stop|url" >&2
        exit 2
      fi
      ;;
  esac
}
