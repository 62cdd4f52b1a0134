#!/usr/bin/env python3
"""Checks the topic of the wal_failover scenario against the new primary.

    tests/faults/check_failover.py --keys N --parts P --new-port PORT [--expect-lost] [--quiet]
                                    COMMITTED TOPIC

COMMITTED is `psql -At` of `SELECT round, part, port FROM fault_writes` on
the promoted standby: the writer's transactions that the new primary has,
each with the port of the server that committed it (PORT: the standby's,
so committed after the failover).  Transaction (round r, part p) wrote the
payloads "k<key>:<r>" for the N/P keys p*N/P .. (p+1)*N/P - 1.  TOPIC is
`kcat -C -e -f '%p\\t%o\\t%k\\t%s\\n'` output, in each partition's offset
order.

Passes when:
  * every message of a transaction committed after the failover arrived;
  * a key's messages are all in one partition, and the first arrivals of
    its messages committed after the failover come in round order;
  * every message lost (committed on the new primary, never published) was
    committed before the failover: what the old relay had not confirmed
    when the old primary went away (docs/RELAY.md, "Failover").

With --expect-lost (the relay was held back at the failover), at least
one message must have been lost that way: otherwise the scenario never
tested a loss.

Counted and printed, not failed: the messages lost that way, and those
published that the new primary never committed (the old primary
published them before its standby received them: replication is
asynchronous).  Prints one summary line and exits 0, or the first
problems found and exits 1.  --quiet prints nothing.
"""
import argparse
import sys

from check_topic import messages  # the same writer, the same kcat lines


def read_committed(path, keys, parts, new_port):
    per = keys // parts
    before, after = set(), set()
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r, p, port = (int(x) for x in line.strip().split("|"))
            into = after if port == new_port else before
            for k in range(p * per, p * per + per):
                into.add((k, r))
    return before, after


def check(committed, topic, keys, parts, new_port, expect_lost=False):
    before, after = read_committed(committed, keys, parts, new_port)
    problems = []
    seen = set()
    partition = {}
    last_after = {}  # key -> last round of an after-failover first arrival
    total = dups = 0
    with open(topic) as f:
        for part, _offset, k, r in messages(f, problems):
            total += 1
            if partition.setdefault(k, part) != part:
                problems.append(f"key k{k} in partitions {partition[k]} and {part}")
            if (k, r) in seen:
                dups += 1
                continue
            seen.add((k, r))
            if (k, r) in after:
                if r <= last_after.get(k, -1):
                    problems.append(f"k{k}:{r} after k{k}:{last_after[k]}: out of order")
                last_after[k] = r
    missing_after = sorted(after - seen)
    if missing_after:
        problems.append(
            f"{len(missing_after)} messages committed after the failover never published, "
            f"first {', '.join(f'k{k}:{r}' for k, r in missing_after[:5])}")
    lost = before - seen
    if expect_lost and not lost:
        problems.append("no message committed before the failover was lost, though the relay "
                        "was held back: the scenario did not test a loss")
    never_committed = seen - before - after
    summary = (f"{len(before) + len(after)} messages committed on the new primary "
               f"({len(after)} after the failover, {len(after & seen)} of them published; "
               f"{len(before)} before it), "
               f"{total} consumed, {dups} duplicates, {len(lost)} lost (committed before the "
               f"failover, not confirmed by the old relay), {len(never_committed)} published that "
               f"the new primary never committed")
    return problems, summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--parts", type=int, required=True)
    ap.add_argument("--new-port", type=int, required=True)
    ap.add_argument("--expect-lost", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("committed")
    ap.add_argument("topic")
    a = ap.parse_args()
    problems, summary = check(a.committed, a.topic, a.keys, a.parts, a.new_port, a.expect_lost)
    if problems:
        if not a.quiet:
            print("failover check: FAILED: " + summary)
            for p in problems[:20]:
                print("  " + p)
        return 1
    if not a.quiet:
        print("failover check: " + summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
