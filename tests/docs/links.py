#!/usr/bin/env python3
"""Part of make docs-check: every relative link in the Markdown files of
the repository points to a file that exists, and every #anchor to a
heading of that file (GitHub's rule: lower case, punctuation dropped,
spaces to hyphens).  Links to web addresses are not followed.

  tests/docs/links.py      (from anywhere; checks the whole repository)
"""
import os
import re
import subprocess
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(title):
    title = re.sub(r"`([^`]*)`", r"\1", title).strip().lower()
    title = re.sub(r"[^\w\- ]", "", title)
    return title.replace(" ", "-")


def outside_code(path):
    """The file's lines outside fenced code blocks."""
    fenced = False
    for line in open(path, encoding="utf-8"):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for line in outside_code(path):
            m = HEADING.match(line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else "%s-%d" % (s, n))
        cache[path] = found
    return cache[path]


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    files = subprocess.run(["git", "ls-files", "*.md"], capture_output=True, text=True,
                           check=True).stdout.split()
    files = [f for f in files if "node_modules" not in f and os.path.isfile(f)]
    problems, nlinks = [], 0
    for f in files:
        for line in outside_code(f):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue
                nlinks += 1
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
                if not os.path.exists(dest):
                    problems.append("%s: link to %s: no such file" % (f, target))
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    problems.append("%s: link to %s: no heading with that anchor in %s"
                                    % (f, target, dest))
    for p in problems:
        print("docs-check: " + p, file=sys.stderr)
    if problems:
        sys.exit(1)
    print("docs-check: %d relative links in %d Markdown files resolve" % (nlinks, len(files)))


if __name__ == "__main__":
    main()
