#!/usr/bin/env python3
"""Golden NDJSON transcripts of `sagad-gateway mcp --stdio`.

    golden.py --world FILE [--update]

For each tests/mcp/golden/NAME.in.ndjson: starts the stdio server of the
world (tests/integration/test_mcp.c writes it) as the user "agent", writes
the requests, closes stdin, and compares what came out on stdout with
NAME.out.ndjson answer by answer, field by field (a "*" in the expected
answer matches any value).  Answers are matched by id (tool calls are
served concurrently, so they may come in any order); the notifications, the
client's response and the request cancelled by notifications/cancelled
get no answer.  stdout must hold nothing but answers.
Also: a token the users file does not know stops the server with exit 2
before it reads anything.  --update rewrites the .out files from this run.
"""

import argparse
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def same(want, got, path="$"):
    """The first difference of got from want, or None."""
    if want == "*":
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return "%s: expected an object, got %r" % (path, got)
        if set(want) != set(got):
            return "%s: members %s, expected %s" % (path, sorted(got), sorted(want))
        for k in want:
            d = same(want[k], got[k], "%s.%s" % (path, k))
            if d:
                return d
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return "%s: expected %d items, got %r" % (path, len(want), got)
        for i, (w, g) in enumerate(zip(want, got)):
            d = same(w, g, "%s[%d]" % (path, i))
            if d:
                return d
        return None
    return None if want == got else "%s: expected %r, got %r" % (path, want, got)


def serve(world, token, text):
    env = dict(os.environ, **world["env"], SAGAD_MCP_TOKEN=token)
    return subprocess.run([world["command"], "mcp", "--stdio"], input=text.encode(),
                          capture_output=True, env=env, timeout=60)


def key(answer):
    return json.dumps(answer.get("id")), json.dumps(answer, sort_keys=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", required=True)
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    world = json.load(open(args.world))
    for path in sorted(glob.glob(os.path.join(HERE, "golden", "*.in.ndjson"))):
        name = os.path.basename(path)[:-len(".in.ndjson")]
        out_path = os.path.join(HERE, "golden", name + ".out.ndjson")
        run = serve(world, world["tokens"]["agent"], open(path).read())
        check(run.returncode == 0, "%s: exit %d" % (name, run.returncode))
        lines = run.stdout.decode().splitlines()
        try:
            got = [json.loads(line) for line in lines]
            check(True, "%s: stdout holds only JSON-RPC answers (%d)" % (name, len(got)))
        except ValueError as e:
            check(False, "%s: stdout holds only JSON-RPC answers: %s" % (name, e))
            continue
        # answers with a null id (refused input) in the order they came
        got.sort(key=key)
        if args.update:
            with open(out_path, "w") as f:
                for a in got:
                    f.write(json.dumps(a, sort_keys=True) + "\n")
            continue
        want = [json.loads(line) for line in open(out_path) if line.strip()]
        want.sort(key=key)
        check(len(got) == len(want), "%s: %d answers, expected %d" % (name, len(got), len(want)))
        for w, g in zip(want, got):
            d = same(w, g)
            check(d is None, "%s: answer to id %s%s" % (name, key(w)[0], ": " + d if d else ""))
    run = serve(world, "sgw_" + "y" * 43, "")
    check(run.returncode == 2 and not run.stdout and b"not known" in run.stderr,
          "an unknown SAGAD_MCP_TOKEN: exit 2, nothing on stdout (exit %d)" % run.returncode)
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
