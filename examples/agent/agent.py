#!/usr/bin/env python3
"""An agent without an LLM: sagad through MCP, as a model would use it.

    agent.py --url http://127.0.0.1:8480/mcp --token-file TOKEN [--approver-token-file TOKEN]

It plays an agent runtime on the official MCP SDK (PyPI `mcp` 2.x) against
sagad-gateway's MCP server (docs/AGENTS.md), with the demo's checkout
registry (examples/checkout/tools.json):

  1. lists the MCP tools and the tools a saga may call (list_tools_registry);
  2. turns a "plan" (what a model would propose) into a checkout saga and
     checks it (validate_saga); the plan has a mistake (a currency the
     payment tool does not take): it reads the refusal's errors and
     agent_action and corrects the argument from the tool's args schema,
     then checks again;
  3. submits it (submit_saga, idempotent on saga_id) and follows it with
     wait_saga, waiting again after the seq whenever agent_action says so,
     until it ends; prints the outcome and what to do next;
  4. places an order above the shop's limit: the charge waits for a
     person; the agent does not approve (it cannot: four eyes, and MCP
     offers approvals only when configured), it asks its user, shows the
     pending packet, and, given --approver-token-file (the demo's "ann"),
     that person approves through the gateway's HTTP API; the agent waits
     again to the end.

Every answer it prints is the server's structuredContent; agent_action is
what it follows.  Exit 0 when both orders completed.
"""

import argparse
import asyncio
import json
import sys
import time
import urllib.request

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def say(who, text):
    print("%-7s %s" % (who + ":", text), flush=True)


async def call(client, name, args):
    res = await client.call_tool(name, args)
    sc = res.structured_content
    say("agent", "%s %s" % (name, json.dumps(args)[:160]))
    if res.is_error:
        say("sagad", "refused: %s %s" % (sc["error_code"], sc["message"]))
    return sc, res.is_error


async def follow(client, saga_id):
    """wait_saga until the saga ends or needs a person, as agent_action says."""
    sc, err = await call(client, "wait_saga", {"saga_id": saga_id, "timeout_ms": 15000})
    while not err and (sc["wait_timed_out"] or sc["status"] == "running"):
        say("sagad", "%s (seq %d): %s" % (sc["status"], sc["seq"], sc["agent_action"]))
        sc, err = await call(client, "wait_saga", {"saga_id": saga_id, "after_seq": sc["seq"],
                                                   "timeout_ms": 15000})
    say("sagad", "%s: %s" % (sc["status"], sc["agent_action"]))
    return sc


def fix(saga, refusal, registry):
    """Follows a refusal's agent_action: each problem at
    $.steps[i].args.KEY is corrected from the tool's args schema (an enum's
    first value).  Returns what was changed, or None when it cannot."""
    changed = []
    for e in refusal.get("errors", []):
        path = e["path"]
        if not path.startswith("$.steps[") or ".args." not in path:
            return None
        i = int(path[len("$.steps["):path.index("]")])
        key = path.rsplit(".", 1)[1]
        step = saga["steps"][i]
        schema = registry[step["tool"]].get("args", {}).get("properties", {}).get(key, {})
        if "enum" not in schema:
            return None
        changed.append("%s.%s: %r -> %r (%s)" % (step["name"], key, step["args"][key],
                                                schema["enum"][0], e["rule"]))
        step["args"][key] = schema["enum"][0]
    return changed or None


def person_approves(url, token, saga_id, step):
    """The agent's user, a person with the approver role, decides through
    the gateway's HTTP API (not through the agent)."""
    base = url.rsplit("/mcp", 1)[0]
    req = urllib.request.Request(
        "%s/v1/sagas/%s/steps/%s/approve" % (base, saga_id, step), method="POST",
        data=json.dumps({"reason": "the customer confirmed the amount by phone"}).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--approver-token-file")
    args = ap.parse_args()
    token = open(args.token_file).read().strip()
    http = httpx2.AsyncClient(headers={"Authorization": "Bearer " + token},
                              timeout=httpx2.Timeout(60.0, read=90.0))
    suffix = "%x" % int(time.time())
    async with Client(streamable_http_client(args.url, http_client=http)) as client:
        say("agent", "connected, MCP %s" % client.session.protocol_version)
        tools = (await client.list_tools()).tools
        say("agent", "MCP tools: %s" % ", ".join(t.name for t in tools))
        sc, _ = await call(client, "list_tools_registry", {})
        registry = {t["name"]: t for t in sc["tools"]}
        say("sagad", "%d tools; approval needed for %s" % (
            len(registry), ", ".join(n for n, t in registry.items() if t["approval_required"])))

        # 2. the plan a model proposed, with a currency the tool does not take
        saga = {"saga_id": "agent-order-" + suffix, "name": "checkout",
                "steps": [
                    {"name": "reserve", "tool": "inventory.reserve", "args": {"sku": "LAMP-3", "qty": 1}},
                    {"name": "charge", "tool": "payment.charge",
                     "args": {"amount_cents": 4500, "currency": "GBP"}},
                    {"name": "ship", "tool": "shipping.book",
                     "args": {"carrier": "dhl",
                              "reservation_id": {"$from": "/steps/reserve/result/reservation_id"}}}],
                "output": {"charge_id": {"$from": "/steps/charge/result/charge_id"}}}
        sc, err = await call(client, "validate_saga", {"saga": saga})
        if err:
            say("sagad", "agent_action: " + sc["agent_action"])
            changed = fix(saga, sc, registry)
            if not changed:
                say("agent", "cannot correct this plan by myself: asking my user")
                return 1
            say("agent", "correcting the plan: " + "; ".join(changed))
            sc, err = await call(client, "validate_saga", {"saga": saga})
            if err:
                return 1
        say("sagad", "valid: " + sc["agent_action"])

        # 3. submit, follow to the end
        sc, err = await call(client, "submit_saga", {"saga": saga})
        say("sagad", "%s: %s" % (sc.get("outcome"), sc["agent_action"]))
        end = await follow(client, saga["saga_id"])
        if end["status"] != "ok":
            return 1
        say("agent", "order placed, output %s" % json.dumps(end["output"]))

        # 4. above the limit: a person decides
        big = {"saga_id": "agent-big-" + suffix, "name": "checkout",
               "steps": [
                   {"name": "reserve", "tool": "inventory.reserve", "args": {"sku": "SOFA-1", "qty": 1}},
                   {"name": "charge", "tool": "payment.charge_high",
                    "args": {"amount_cents": 250000, "currency": "EUR"}}]}
        sc, err = await call(client, "submit_saga", {"saga": big})
        say("sagad", "%s: %s" % (sc.get("outcome"), sc["agent_action"]))
        end = await follow(client, big["saga_id"])
        if end["status"] == "awaiting_approval":
            p = end["pending_approvals"][0]
            say("agent", "to my user: step %r (%s, %s) waits for your approval; "
                "I cannot approve it myself" % (p["step_name"], p["tool"],
                                                json.dumps(big["steps"][p["step"]]["args"])))
            if not args.approver_token_file:
                say("agent", "no one to ask in this run: stopping here")
                return 0
            ann = open(args.approver_token_file).read().strip()
            say("person", "approves: %s" % json.dumps(person_approves(
                args.url, ann, big["saga_id"], p["step_name"])))
            end = await follow(client, big["saga_id"])
        if end["status"] != "ok":
            return 1
        say("agent", "big order placed after a person's approval")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
