#!/usr/bin/env python3
"""What MCP costs beside the plain API, on one gateway (not a test).

    bench.py --world FILE [--n 500]

Against the world tests/integration/test_mcp.c starts (suite mcp_sdk, with
SAGAD_TEST_MCP_BENCH=1): the same questions asked both ways over one
keep-alive HTTP connection each, one at a time, by the same client
(httpx, no MCP SDK in the way), so the difference is the server's:
  - get_saga: GET /v1/sagas/{id} vs POST /mcp tools/call get_saga (2026-07-28
    headers and _meta), n times each: median and p99 latency;
  - submit_saga: POST /v1/sagas vs tools/call submit_saga of one-step
    sagas, n/5 each: sagas a second (each waits for Kafka's ack).
Prints one line per figure.
"""

import argparse
import json
import statistics
import time
import uuid

import httpx

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}


def rpc(client, url, token, name, args):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": args, "_meta": META}}
    r = client.post(url, json=body, headers={
        "Authorization": "Bearer " + token, "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name})
    r.raise_for_status()
    res = r.json()["result"]
    assert not res["isError"], res
    return res


def timed(n, fn):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    out.sort()
    return statistics.median(out), out[int(len(out) * 0.99) - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", required=True)
    ap.add_argument("--n", type=int, default=500)
    args = ap.parse_args()
    world = json.load(open(args.world))
    url, token = world["url"], world["tokens"]["shop"]
    base = url[:-len("/mcp")]
    auth = {"Authorization": "Bearer " + token}
    with httpx.Client(timeout=30) as client:
        sid = "bench-" + uuid.uuid4().hex[:8]
        rpc(client, url, token, "submit_saga",
            {"saga": {"saga_id": sid, "name": "bench", "steps": [{"name": "a", "tool": "noop"}]}})
        rpc(client, url, token, "wait_saga", {"saga_id": sid, "timeout_ms": 30000})
        for _ in range(50):  # warm both paths
            client.get("%s/v1/sagas/%s" % (base, sid), headers=auth)
            rpc(client, url, token, "get_saga", {"saga_id": sid})
        api = timed(args.n, lambda: client.get("%s/v1/sagas/%s" % (base, sid),
                                                headers=auth).raise_for_status())
        mcp = timed(args.n, lambda: rpc(client, url, token, "get_saga", {"saga_id": sid}))
        print("get_saga: API median %.2f ms p99 %.2f ms; MCP median %.2f ms p99 %.2f ms (n=%d)"
              % (api[0], api[1], mcp[0], mcp[1], args.n), flush=True)
        m = max(args.n // 5, 20)

        def api_submit():
            client.post(base + "/v1/sagas", headers=dict(auth, **{"Content-Type":
                                                                  "application/json"}),
                        json={"v": 1, "type": "saga.start", "name": "bench",
                              "steps": [{"name": "a", "tool": "noop"}]}).raise_for_status()

        def mcp_submit():
            rpc(client, url, token, "submit_saga",
                {"saga": {"name": "bench", "steps": [{"name": "a", "tool": "noop"}]}})

        for label, fn in (("API", api_submit), ("MCP", mcp_submit)):
            t = time.perf_counter()
            for _ in range(m):
                fn()
            print("submit_saga: %s %.0f sagas/s (one client, one at a time, n=%d)"
                  % (label, m / (time.perf_counter() - t), m), flush=True)


if __name__ == "__main__":
    main()
