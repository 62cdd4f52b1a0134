#!/usr/bin/env python3
"""Part of make docs-check: each program's --help, its man page
(docs/man/PROG.1) and its completions (docs/completion/PROG.bash and
_PROG) say the same: the same commands with the same synopsis, the same
options with the same argument and text, the same detail paragraphs.

The three are written from one command table, so this fails only when a
committed copy is stale or a generator drops something: it reads what a
person reads (the --help text, the man page's words, the completion
words) and compares them.

  tests/docs/cli_docs.py BINDIR PROG...
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OPT = re.compile(r"^  (--[a-z][a-z0-9-]*)(?: ([A-Z][A-Za-z_=/|.]*))?\s+(\S.*)$")
problems = []


def run(bindir, prog, *args):
    out = subprocess.run([os.path.join(bindir, prog), *args], capture_output=True,
                         text=True, env={"PATH": os.environ.get("PATH", "")})
    if out.returncode != 0:
        problems.append(f"{prog} {' '.join(args)}: exit {out.returncode}: {out.stderr}")
    return out.stdout


def unroff(text):
    """The words of a man page source as a reader sees them."""
    lines = []
    for line in text.splitlines():
        if line.startswith(".\\\""):
            continue
        m = re.match(r'^\.(SS|B|BI|BR) (.*)$', line)
        if m:
            line = m.group(2)
            if m.group(1) in ("SS", "BI"):
                line = "".join(re.findall(r'"([^"]*)"', line))
        elif line.startswith("."):
            continue
        line = line.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "")
        lines.append(line)
    return "\n".join(lines)


def parse_help(text):
    """Commands of the top-level --help: name -> (args, help).  A line is
    "  SYNOPSIS (padded to 28) HELP", or a long synopsis alone with its
    help on the next line, indented 31."""
    lines = text.split("commands:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    cmds = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and lines[i + 1].startswith(" " * 31):
            synopsis, help_text = line.strip(), lines[i + 1].strip()
            i += 2
        else:
            synopsis, help_text = line[2:30].strip(), line[31:].strip()
            i += 1
        name, _, args = synopsis.partition(" ")
        cmds[name] = (args, help_text)
    return cmds


def parse_cmd_help(text):
    usage = text.splitlines()[0]
    opts = []
    section = None
    detail = []
    for line in text.splitlines()[1:]:
        if line == "options:":
            section = "options"
            continue
        if section == "options":
            if not line.strip():
                section = "detail"
                continue
            m = OPT.match(line)
            if not m:
                problems.append(f"cannot read option line {line!r}")
                continue
            opts.append(m.groups())
        elif section == "detail":
            detail.append(line)
    return usage, opts, detail


def check(bindir, prog):
    man = unroff(open(os.path.join(ROOT, "docs", "man", prog + ".1"), encoding="utf-8").read())
    bash = open(os.path.join(ROOT, "docs", "completion", prog + ".bash"), encoding="utf-8").read()
    zsh = open(os.path.join(ROOT, "docs", "completion", "_" + prog), encoding="utf-8").read()
    for name, text in (("man page", man), ("bash", bash), ("zsh", zsh)):
        fresh = {"man page": run(bindir, prog, "--man"),
                 "bash": run(bindir, prog, "--completion", "bash"),
                 "zsh": run(bindir, prog, "--completion", "zsh")}[name]
        if name == "man page":
            fresh = unroff(fresh)
        if fresh != text:
            problems.append(f"{prog}: the committed {name} is stale: run make docs")
    # Scripts a shell can load (make deps installs zsh, so both are checked).
    for shell, path in (("bash", prog + ".bash"), ("zsh", "_" + prog)):
        if not shutil.which(shell):
            problems.append(f"{shell} not found: make deps installs it")
            continue
        r = subprocess.run([shell, "-n", os.path.join(ROOT, "docs", "completion", path)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"{shell} -n {path}: {r.stderr.strip()}")
    top = run(bindir, prog, "--help")
    cmds = parse_help(top)
    if not cmds:
        problems.append(f"{prog} --help lists no command")
    bash_top = re.search(r"^    '?'?\)\n        words=\"([^\"]*)\"", bash, re.M)
    for name, (args, help_text) in cmds.items():
        usage, opts, detail = parse_cmd_help(run(bindir, prog, name, "--help"))
        synopsis = f"{name} {args}".strip()
        if synopsis not in man:
            problems.append(f"{prog}: man page lacks the synopsis {synopsis!r}")
        if help_text and " ".join(help_text.split()) not in " ".join(man.split()):
            problems.append(f"{prog} {name}: man page lacks {help_text!r}")
        if not usage.endswith(synopsis):
            problems.append(f"{prog} {name} --help: usage {usage!r} is not {synopsis!r}")
        m = re.search(r"^    %s\)\n        words=\"([^\"]*)\"" % re.escape(name), bash, re.M)
        words = set(m.group(1).split()) if m else set()
        if not m:
            problems.append(f"{prog}: bash completion lacks the command {name}")
        if bash_top and name not in bash_top.group(1).split():
            problems.append(f"{prog}: bash completion does not offer {name}")
        block = re.search(r"^        %s\)\n(.*?);;" % re.escape(name), zsh, re.M | re.S)
        if f"'{name}:" not in zsh or not block:
            problems.append(f"{prog}: zsh completion lacks the command {name}")
        for opt, arg, text in opts:
            shown = f"{opt} {arg}" if arg else opt
            if shown not in man or text not in man:
                problems.append(f"{prog} {name}: man page lacks {shown} / {text!r}")
            if opt not in words:
                problems.append(f"{prog} {name}: bash completion lacks {opt}")
            if block and f"'{opt}[" not in block.group(1):
                problems.append(f"{prog} {name}: zsh completion lacks {opt}")
        if opts and words - {o[0] for o in opts} - {"--help"}:
            problems.append(f"{prog} {name}: bash completion offers what --help does not: "
                            f"{sorted(words - {o[0] for o in opts} - {'--help'})}")
        for line in detail:
            if line.strip() and not line.startswith("Exit codes:") and \
                    not line.startswith("3 refused") and line not in man:
                problems.append(f"{prog} {name}: man page lacks the line {line!r}")
    return len(cmds)


def main():
    bindir, progs = sys.argv[1], sys.argv[2:]
    counts = {prog: check(bindir, prog) for prog in progs}
    for p in problems:
        print("cli_docs:", p, file=sys.stderr)
    if problems:
        sys.exit(1)
    print("cli_docs: --help, man page and bash/zsh completions agree for " +
          ", ".join(f"{p} ({n} commands)" for p, n in counts.items()))


main()
