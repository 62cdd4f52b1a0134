#!/usr/bin/env python3
"""Checks what a fault scenario left in its topic: nothing lost, order per key.

    tests/faults/check_topic.py --keys N --per-key M FILE

FILE is `kcat -C -e -f '%p\\t%o\\t%k\\t%s\\n'` output: partition, offset, key
and payload per line, in each partition's offset order.  The writer inserted
payloads "k<key>:<seq>" under the key "k<key>", seq 0..M-1 per key, one key's
rows in seq order (each in its own committed transaction).

Passes when, per key:
  * every seq 0..M-1 arrived (count and set), and nothing else did;
  * all of a key's messages are in one partition (the key picks it);
  * read in offset order, each message is either the next seq after the
    previous one of that key (prev + 1), or a repeat that starts at or
    before it (seq <= prev): the relay sent a batch again from its cursor
    after a failed or unconfirmed delivery, which repeats a run of already
    delivered rows that then goes on in order.  That is at-least-once.
    A jump forward (seq > prev + 1) fails: a row was lost, or came after a
    later one (reordered).  Together with completeness this means the first
    arrivals of every key are exactly 0, 1, ..., M-1 in order, and every
    duplicate is a replay of an earlier stretch, never a row out of place.

Prints one summary line (messages, duplicates, replays) and exits 0, or
prints the first problems found and exits 1.
"""
import argparse
import re
import sys

PAYLOAD = re.compile(r"^k(\d+):(\d+)$")


def messages(lines, problems):
    """The writer's messages in lines (kcat's partition, offset, key,
    payload), as (partition, offset, key number, seq); a line that is not
    one is reported in problems and skipped."""
    for n, line in enumerate(lines, 1):
        fields = line.rstrip("\n").split("\t")
        if len(fields) != 4:
            problems.append(f"line {n}: not partition/offset/key/payload: {line!r}")
            continue
        part, offset, key, payload = fields
        m = PAYLOAD.match(payload)
        if not m or key != f"k{m.group(1)}":
            problems.append(f"line {n}: unexpected message key={key!r} payload={payload!r}")
            continue
        yield part, offset, int(m.group(1)), int(m.group(2))


def check(lines, keys, per_key):
    problems = []
    prev = {}        # key -> previous seq read
    seen = {}        # key -> set of seqs
    partition = {}   # key -> partition
    split = set()    # keys already reported in two partitions
    total = dups = replays = 0  # replays: times a key went back (seq <= prev)

    for part, offset, k, seq in messages(lines, problems):
        if k >= keys or seq >= per_key:
            problems.append(f"k{k}:{seq} at partition {part} offset {offset} is outside "
                            f"{keys} keys x {per_key}")
            continue
        total += 1
        if partition.setdefault(k, part) != part and k not in split:
            split.add(k)
            problems.append(f"key k{k} in partitions {partition[k]} and {part}")
        p = prev.get(k, -1)
        if seq > p + 1:
            problems.append(
                f"key k{k}: seq {seq} at partition {part} offset {offset} right after {p}: "
                f"{p + 1} lost or reordered (expected {p + 1}, or a replay <= {p})")
        elif seq <= p:
            replays += 1
        s = seen.setdefault(k, set())
        if seq in s:
            dups += 1
        s.add(seq)
        prev[k] = seq

    for k in range(keys):
        got = seen.get(k, set())
        if len(got) != per_key:
            missing = sorted(set(range(per_key)) - got)
            problems.append(f"key k{k}: {len(missing)} of {per_key} seqs missing, first "
                            f"{missing[:5]}")
    return problems, total, dups, replays


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--per-key", type=int, required=True)
    ap.add_argument("file")
    args = ap.parse_args()

    with open(args.file, encoding="utf-8") as f:
        problems, total, dups, replays = check(f, args.keys, args.per_key)
    want = args.keys * args.per_key
    if problems:
        for p in problems[:20]:
            print(f"check_topic: {p}", file=sys.stderr)
        if len(problems) > 20:
            print(f"check_topic: ... and {len(problems) - 20} more", file=sys.stderr)
        print(f"check_topic: FAIL ({total} messages for {want} rows, {dups} duplicates)",
              file=sys.stderr)
        return 1
    print(f"check_topic: ok: {want} rows all present, per-key order kept; {total} messages, "
          f"{dups} duplicates from {replays} replays")
    return 0


if __name__ == "__main__":
    sys.exit(main())
