#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine. This is
# the one list of system packages: scripts/test.sh (the README's test command)
# runs it first, and so .ci/run does through scripts/test.sh.
#
#   scripts/setup.sh           # as root: apt-get installs whatever is missing;
#                              # otherwise prints the command to run and exits 1
#   scripts/setup.sh --check   # only says what is missing (exit 1 if anything)
#
# To need another package, add a line to PACKAGES: the command whose absence
# means the package is missing, then the Debian package(s) that provide it.
set -euo pipefail

# command        Debian package(s)
PACKAGES='
curl             curl
java             openjdk-17-jdk-headless
mvn              maven
pg_ctlcluster    postgresql postgresql-contrib
nats-server      nats-server
chromium         chromium
openssl          openssl
nginx            nginx
'

# Debian installs some of these (nats-server) in /usr/sbin.
PATH="$PATH:/usr/sbin:/sbin"

check_only=false
case "${1:-}" in
  "") ;;
  --check) check_only=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

missing=()
while read -r cmd pkgs; do
  [ -n "$cmd" ] || continue
  if ! command -v "$cmd" >/dev/null 2>&1; then
    read -r -a more <<<"$pkgs"
    missing+=("${more[@]}")
  fi
done <<<"$PACKAGES"

if ! command -v go >/dev/null 2>&1; then
  echo "setup: go is not on PATH; install Go 1.26 (see go.mod)" >&2
  exit 1
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if $check_only; then
  echo "setup: missing Debian packages: ${missing[*]}" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "setup: missing Debian packages; install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
