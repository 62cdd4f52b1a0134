#!/usr/bin/env bash
# Keeps deploy/Dockerfile honest without a container engine:
#
#   tests/deploy/check-image.sh [BINDIR]
#
# - every shared library `ldd` resolves for the built binaries belongs (by
#   `dpkg -S`) to a package of the runtime stage's RUNTIME_PKGS, to one of
#   their Depends/Pre-Depends (what apt installs with them), or to the
#   libc/libgcc base every Debian image has;
# - the binaries the runtime stage copies are exactly the Makefile's
#   SAGAD_PROGS;
# - the runtime stage installs no compiler or -dev package and its USER is
#   numeric and not root.
# Each failure names what is wrong; the exit code is 1 if anything is.
set -euo pipefail
cd "$(dirname "$0")/../.."

bindir=${1:-bin}
dockerfile=${SAGAD_DOCKERFILE:-deploy/Dockerfile} # another file: the self-test
base_pkgs="libc6 libgcc-s1"
failures=0

fail() {
    echo "check-image: $*" >&2
    failures=$((failures + 1))
}

# The runtime stage: everything after the last FROM.
runtime_stage=$(awk '/^FROM /{buf=""} {buf = buf $0 "\n"} END{printf "%s", buf}' "$dockerfile")
runtime_pkgs=$(sed -n 's/^ARG RUNTIME_PKGS="\(.*\)"$/\1/p' <<<"$runtime_stage")
[ -n "$runtime_pkgs" ] || { echo "check-image: no ARG RUNTIME_PKGS=\"...\" in the runtime stage of $dockerfile" >&2; exit 1; }

# Every installed package and its Depends/Pre-Depends, read once.
declare -A installed=() deps=()
while IFS=$'\t' read -r name status dep; do
    [ "${status##* }" = installed ] || continue
    installed[$name]=1
    deps[$name]=$dep
done < <(dpkg-query -W -f='${Package}\t${Status}\t${Depends}, ${Pre-Depends}\n')

# Package names only: "libfoo (>= 1) | libbar, libbaz:any" -> the first
# installed alternative of each clause.
depends_of() {
    tr ',' '\n' <<<"${deps[$1]:-}" | while read -r clause; do
        for alt in $(sed 's/([^)]*)//g; s/|/ /g' <<<"$clause"); do
            alt=${alt%%:*}
            if [ -n "${installed[$alt]:-}" ]; then
                echo "$alt"
                break
            fi
        done
    done
}

# The runtime packages and what apt installs with them.
declare -A allowed=()
queue=()
for p in $runtime_pkgs $base_pkgs; do
    if [ -z "${installed[$p]:-}" ]; then
        fail "runtime package $p is not installed here, so its libraries cannot be checked (make deps)"
        continue
    fi
    queue+=("$p")
done
while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    [ -z "${allowed[$p]:-}" ] || continue
    allowed[$p]=1
    for d in $(depends_of "$p"); do
        [ -n "${allowed[$d]:-}" ] || queue+=("$d")
    done
done

# The package owning a library path; dpkg records /lib or /usr/lib paths
# depending on the package (merged /usr), so both spellings are tried.
owner_of() {
    local path=$1 real cand
    real=$(readlink -f "$path")
    for cand in "$path" "${path#/usr}" "/usr$path" "$(dirname "$real")/$(basename "$path")" \
        "$real" "${real#/usr}"; do
        dpkg -S "$cand" 2>/dev/null | head -1 | cut -d: -f1 && return 0
    done
    return 1
}

declare -A owner_cache=()
# The SAGAD_PROGS := line of the Makefile, with its continuation lines.
progs=$(sed -n '/^SAGAD_PROGS := /{:a;/\\$/{N;ba};s/\\\n//g;s/^SAGAD_PROGS := //p}' Makefile)
for prog in $progs; do
    bin=$bindir/$(basename "$prog")
    [ -x "$bin" ] || { fail "$bin is not built (make all)"; continue; }
    while read -r line; do
        case $line in
        *"not found"*) fail "$bin: ${line%% *} does not resolve" ;;
        *"=> "/*)
            lib=$(sed 's/.*=> \([^ ]*\) .*/\1/' <<<"$line")
            [ -n "${owner_cache[$lib]:-}" ] || owner_cache[$lib]=$(owner_of "$lib" || echo -)
            pkg=${owner_cache[$lib]}
            if [ "$pkg" = - ]; then
                fail "$bin: $lib belongs to no Debian package"
            elif [ -z "${allowed[$pkg]:-}" ]; then
                fail "$bin: $(basename "$lib") comes from package $pkg, which is not in RUNTIME_PKGS of $dockerfile nor a dependency of it"
            fi
            ;;
        esac
    done < <(ldd "$bin")
done

# The runtime stage copies the Makefile's binaries, no more, no fewer.
copied=$(grep -o '/src/bin/[A-Za-z0-9_-]*' <<<"$runtime_stage" | xargs -n1 basename | sort | tr '\n' ' ')
built=$(for p in $progs; do basename "$p"; done | sort | tr '\n' ' ')
[ "$copied" = "$built" ] || fail "the runtime stage copies [$copied] but the Makefile builds [$built]"

for p in $runtime_pkgs; do
    case $p in
    *-dev | gcc* | g++* | clang* | cpp* | make | binutils*) fail "runtime package $p is a build tool" ;;
    esac
done
user=$(sed -n 's/^USER \(.*\)$/\1/p' <<<"$runtime_stage" | tail -1)
[[ $user =~ ^[0-9]+(:[0-9]+)?$ ]] || fail "the runtime stage's USER must be numeric uid[:gid] (runAsNonRoot checks it), got '$user'"
[[ ${user%%:*} != 0 ]] || fail "the runtime stage runs as root"

if [ $failures -gt 0 ]; then
    echo "check-image: $failures problem(s) in $dockerfile" >&2
    exit 1
fi
echo "check-image: $built load only libraries of: $runtime_pkgs (+ their dependencies, $base_pkgs)"
