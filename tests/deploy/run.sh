#!/usr/bin/env bash
# make image-check: the Dockerfile recipe against the built binaries
# (check-image.sh), then a negative control: the same recipe without
# libcjson1 must fail, naming the library and its package.
#
#   tests/deploy/run.sh [BINDIR]
set -euo pipefail
cd "$(dirname "$0")/../.."

bindir=${1:-bin}
tests/deploy/check-image.sh "$bindir"

broken=$(mktemp)
trap 'rm -f "$broken"' EXIT
sed '/^ARG RUNTIME_PKGS=/s/libcjson1 //' deploy/Dockerfile > "$broken"
rc=0
log=$(SAGAD_DOCKERFILE=$broken tests/deploy/check-image.sh "$bindir" 2>&1) || rc=$?
want="libcjson.so.1 comes from package libcjson1, which is not in RUNTIME_PKGS"
if [ $rc -eq 0 ] || ! grep -qF "$want" <<<"$log"; then
    echo "image-check: a recipe without libcjson1 was not refused with \"$want\":" >&2
    echo "$log" >&2
    exit 1
fi
echo "image-check: a recipe without libcjson1 is refused, naming libcjson.so.1"
