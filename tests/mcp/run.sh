#!/usr/bin/env bash
# The MCP server under the official Python SDK, both majors (PyPI `mcp`
# 2.x, which speaks 2026-07-28 and the handshake, and 1.x, which speaks the
# handshake), over stdio and HTTP, against the real worker, relay and
# gateway: tests/integration/test_mcp.c's suite mcp_sdk, which runs
# tests/mcp/test_sdk.py once per SDK, transport and era.
#
#   tests/mcp/run.sh BUILD_DIR
#
# Run by tests/run.sh after the integration tests of the plain build (the
# services are up and SAGAD_TEST_* exported).  Each SDK lives in a venv of
# its own under BUILD_DIR/mcp-venv, made from the pins below on first use
# (and again when a pin changes); nothing is installed when it is there.
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${1:?usage: tests/mcp/run.sh BUILD_DIR}
python=${SAGAD_MCP_PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
declare -A pins=(
    [2]="mcp==2.3.0 jsonschema==4.26.0"
    [1]="mcp==1.30.0 jsonschema==4.26.0"
)

venv_of() { # MAJOR: the venv's python, made if missing
    local dir=$build/mcp-venv/sdk$1 want=${pins[$1]}
    if [ "$(cat "$dir/pins" 2>/dev/null)" != "$want" ]; then
        echo "mcp: making $dir ($want)" >&2
        rm -rf "$dir"
        "$python" -m venv "$dir" >&2
        # shellcheck disable=SC2086 # one word per requirement
        "$dir/bin/pip" install --quiet --disable-pip-version-check $want >&2
        echo "$want" > "$dir/pins"
    fi
    echo "$dir/bin/python"
}

pythons="2=$(venv_of 2),1=$(venv_of 1)"
bindir=bin
[ "$build" = build ] || bindir=$build/bin
echo "== MCP: the official Python SDKs ($(tr '\n' ' ' <<<"${pins[2]} / ${pins[1]}"))"
SAGAD_TEST_BIN_DIR=$bindir SAGAD_TEST_MCP_PYTHONS=$pythons \
    "$build/tests/integration-tests" --filter 'mcp_sdk/*' --timeout 300
