#!/usr/bin/env bash
# Lints the module with golangci-lint (the import rules and linters of
# .golangci.yml). Installs the pinned version first when it is missing: built
# from source with `go install` into the user's cache directory
# (~/.cache/searchsync/golangci-lint/<version>/, shared by every clone; the
# first build takes a few minutes). GOLANGCI_LINT_DIR overrides the place.
#   scripts/lint.sh [golangci-lint run flags…]   e.g. scripts/lint.sh ./relay/...
set -euo pipefail
cd "$(dirname "$0")/.."

GOLANGCI_LINT_VERSION=v2.15.0
bin_dir="${GOLANGCI_LINT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/searchsync/golangci-lint/$GOLANGCI_LINT_VERSION}"
lint="$bin_dir/golangci-lint"
if [ ! -x "$lint" ]; then
  echo "lint: installing golangci-lint $GOLANGCI_LINT_VERSION into $bin_dir" >&2
  mkdir -p "$bin_dir"
  GOBIN="$bin_dir" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
fi
if [ $# -eq 0 ]; then set -- ./...; fi
# Another checkout's lint (a second test run on the machine) waits for this
# one instead of failing.
exec "$lint" run --allow-serial-runners "$@"
