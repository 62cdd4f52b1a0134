#!/usr/bin/env bash
# Runs the example agent (examples/agent/agent.py) against a running
# sagad-gateway, in a venv of the official MCP SDK made on first use
# (build/mcp-venv/sdk2, the same pins as tests/mcp/run.sh).
#
#   examples/agent/run.sh GATEWAY_URL TOKEN_FILE [APPROVER_TOKEN_FILE]
#
# examples/demo.sh can call it after its gateway section:
#   examples/agent/run.sh "$gateway" "$run/keys/shop.token" "$run/keys/ann.token"
set -euo pipefail
cd "$(dirname "$0")/../.."

url=${1:?usage: examples/agent/run.sh GATEWAY_URL TOKEN_FILE [APPROVER_TOKEN_FILE]}
token=${2:?usage: examples/agent/run.sh GATEWAY_URL TOKEN_FILE [APPROVER_TOKEN_FILE]}
want="mcp==2.3.0 jsonschema==4.26.0"
dir=build/mcp-venv/sdk2
if [ "$(cat "$dir/pins" 2>/dev/null)" != "$want" ]; then
    echo "agent: making $dir ($want)" >&2
    rm -rf "$dir"
    "$(command -v /usr/bin/python3 || command -v python3)" -m venv "$dir" >&2
    # shellcheck disable=SC2086 # one word per requirement
    "$dir/bin/pip" install --quiet --disable-pip-version-check $want >&2
    echo "$want" > "$dir/pins"
fi
exec "$dir/bin/python" examples/agent/agent.py --url "${url%/}/mcp" --token-file "$token" \
    ${3:+--approver-token-file "$3"}
