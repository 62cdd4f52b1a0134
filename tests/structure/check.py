#!/usr/bin/env python3
"""make structure-check: calls and includes go one way.

  tests/structure/check.py BUILD_DIR

Three rules, each a failure when broken:

1. No call cycle among the C files of lib/, worker/, outbox/, dlq-tool/, ctl/
   and examples/checkout/.  The graph is read from the built objects, not
   guessed from the text: file A calls file B when an undefined symbol of
   A.o is defined by B.o (nm).  A cycle is a strongly connected component
   of more than one file.
2. No include cycle among the project's own headers and sources.
3. A program's files include no other program's files (lib/ is what they
   share).  The exceptions still waiting to be removed are listed in
   EXCEPTIONS below, each with the issue that removes it; an exception that
   no longer occurs is itself an error, so the list cannot go stale.
4. A private header (PRIVATE below, like librdkafka's rdkafka_int.h) is
   included by the files of its subsystem only.
"""
import os
import re
import subprocess
import sys

DIRS = ["lib", "worker", "outbox", "dlq-tool", "ctl", "examples/checkout"]
PROGRAMS = ["worker", "outbox", "dlq-tool", "ctl", "examples/checkout"]
# (including file, included file): known debts, with what ends them.
EXCEPTIONS = set()
# private header: the files that may include it
PRIVATE = {
    "worker/loop/worker_loop_int.h": {"worker/loop/worker_%s.c" % f for f in
                                      ("run", "status", "loop", "txn", "parts", "session",
                                       "chain", "cmdq", "topics")},
    "lib/ops/sg_ops_int.h": {"lib/ops/sg_%s.c" % f for f in
                             ("ops", "saga_query", "dlq_query", "relay_query")},
}


def sccs(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def nm(obj, *flags):
    res = subprocess.run(["nm", *flags, obj], capture_output=True, text=True, check=True)
    return [line.split()[-1] for line in res.stdout.splitlines() if line.strip()]


def call_graph(build):
    objs = {}
    for d in DIRS:
        for root, _, files in os.walk(os.path.join(build, d)):
            for f in files:
                if f.endswith(".o"):
                    src = os.path.relpath(os.path.join(root, f[:-2] + ".c"), build)
                    # an object whose source moved or went is stale: its
                    # symbols would shadow the new object's
                    if os.path.isfile(src):
                        objs[src] = os.path.join(root, f)
    if not objs:
        sys.exit("structure-check: no objects under %s: build first (make all)" % build)
    defined = {}
    for src, obj in objs.items():
        for sym in nm(obj, "--defined-only", "-g"):
            defined.setdefault(sym, set()).add(src)
    graph = {src: set() for src in objs}
    for src, obj in objs.items():
        for sym in nm(obj, "-u"):
            for dst in defined.get(sym, ()):
                # a symbol several programs define (main, their own
                # helpers) ties no two programs together
                if dst != src and len(defined[sym]) == 1:
                    graph[src].add(dst)
    return graph


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def include_graph():
    files = []
    for d in DIRS + ["lib/include/sagad", "tests/support"]:
        for root, _, names in os.walk(d):
            files += [os.path.join(root, f) for f in names if f.endswith((".c", ".h"))]
    graph = {}
    for f in files:
        text = open(f, errors="replace").read()
        edges = set()
        for inc in INCLUDE.findall(text):
            for base in (os.path.dirname(f), "lib/include"):
                path = os.path.normpath(os.path.join(base, inc))
                if os.path.isfile(path):
                    edges.add(path)
                    break
        graph[os.path.normpath(f)] = edges
    return graph


def program_of(path):
    for p in PROGRAMS:
        if path.startswith(p + "/"):
            return p
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tests/structure/check.py BUILD_DIR")
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    problems = []
    calls = call_graph(sys.argv[1])
    for comp in sccs(calls):
        problems.append("call cycle: " + " <-> ".join(comp))
    includes = include_graph()
    for comp in sccs(includes):
        problems.append("include cycle: " + " <-> ".join(comp))
    seen = set()
    for f, edges in sorted(includes.items()):
        for g in sorted(edges):
            pf, pg = program_of(f), program_of(g)
            if pf and pg and pf != pg:
                if (f, g) in EXCEPTIONS:
                    seen.add((f, g))
                else:
                    problems.append("%s includes %s: programs share code through lib/ only" % (f, g))
    for f, edges in sorted(includes.items()):
        for g in sorted(edges & set(PRIVATE)):
            if f not in PRIVATE[g]:
                problems.append("%s includes %s, private to %s" % (f, g, ", ".join(sorted(PRIVATE[g]))))
    for f, g in sorted(EXCEPTIONS - seen):
        problems.append("exception no longer needed, remove it from EXCEPTIONS: %s includes %s" % (f, g))
    for p in problems:
        print("structure-check: " + p, file=sys.stderr)
    if problems:
        sys.exit(1)
    nedges = sum(len(e) for e in calls.values())
    print("structure-check: ok, %d C files, %d call edges and %d include edges, no cycle; %d known "
          "cross-program include(s) left" % (len(calls), nedges, sum(len(e) for e in includes.values()),
                                           len(EXCEPTIONS)))


if __name__ == "__main__":
    main()
