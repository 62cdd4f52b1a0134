#!/usr/bin/env bash
# make deps: installs the Debian packages named on the command line that
# are not installed yet; a no-op when all are.
#
#   deploy/deps.sh PACKAGE...
#
# Runs apt-get as root, or through sudo when not root.  When it cannot
# install (not root and no sudo, apt-get fails: no registry, a package
# unknown), the first lines it prints name the missing packages and the
# command that installs them, and it exits 1, so a build never goes on to
# fail later with a compiler's "No such file or directory".
set -uo pipefail

# Installed means dpkg's "ii": a package removed but not purged is still
# known to `dpkg -s` (state "rc", its config files left) yet has no files.
missing=()
for p in "$@"; do
    [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" = "ii " ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: all $# Debian packages present"
    exit 0
fi

give_up() { # WHY
    {
        echo "deps: cannot install the Debian packages sagad needs: $1"
        echo "deps: missing: ${missing[*]}"
        echo "deps: install them as root, then run the same make command again:"
        echo "deps:   apt-get update && apt-get install --no-install-recommends ${missing[*]}"
    } >&2
    exit 1
}

command -v apt-get >/dev/null || give_up "apt-get not found (sagad's scripts expect Debian bookworm)"
sudo=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || give_up "not root, and sudo is not installed"
    sudo -n true 2>/dev/null || echo "deps: not root: asking sudo"
    sudo=(sudo)
fi

echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q || give_up "apt-get update failed (is a Debian mirror reachable?)"
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" ||
    give_up "apt-get install failed (see its message above)"
echo "deps: installed ${#missing[@]} packages"
