#!/usr/bin/env bash
# Runs the end-to-end benchmark with the search engine on a core of its own,
# as in a deployment where the engine runs on other hosts: a second
# OpenSearch node (port 9201) pinned to CPU 0, PostgreSQL and the benchmark
# pinned to the other CPUs. The raw _bulk baseline then runs on the same
# engine core as the end-to-end run, so the ratio shows what searchsync and
# PostgreSQL cost when they do not take the engine's CPU.
#   scripts/bench-split.sh [go test flags…]   default: -bench EndToEnd/relays=1 -benchtime 1x -count 3
# Needs at least 2 CPUs and taskset (util-linux). PostgreSQL's processes are
# pinned while it runs and given all CPUs back on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

ncpu=$(nproc)
if [ "$ncpu" -lt 2 ]; then echo "bench-split.sh: needs at least 2 CPUs, have $ncpu" >&2; exit 1; fi
command -v taskset >/dev/null || { echo "bench-split.sh: taskset (util-linux) is missing" >&2; exit 1; }
rest="1-$((ncpu - 1))"

scripts/services.sh start
eval "$(scripts/services.sh env)"

pin_postgres() {
  for p in $(pgrep -x postgres); do taskset -a -cp "$1" "$p" >/dev/null 2>&1 || true; done
}
cleanup() {
  pin_postgres "0-$((ncpu - 1))"
  OPENSEARCH_PORT=9201 scripts/opensearch.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

OPENSEARCH_PORT=9201 taskset -c 0 scripts/opensearch.sh start
pin_postgres "$rest"   # new backends inherit the postmaster's CPUs

if [ $# -eq 0 ]; then set -- -bench 'EndToEnd/relays=1' -benchtime 1x -count 3; fi
SEARCHSYNC_ENGINE_URL=http://127.0.0.1:9201 taskset -c "$rest" \
  go test ./sink/search -run '^$' "$@"
