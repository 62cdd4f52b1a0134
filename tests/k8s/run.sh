#!/usr/bin/env bash
# make k8s-check: renders deploy/k8s (the base and every overlay) with
# kustomize and validates the result offline:
#   schemas.mjs  every object against its API schema (Kubernetes, KEDA,
#                prometheus-operator);
#   check.py     core objects strictly (unknown fields), and what sagad
#                needs: config keys, required keys, probes, grace period,
#                security context, scaling limits, KEDA trigger.
# Then the broken overlay tests/k8s/bad must fail with every problem in
# its EXPECT files, so a check that stopped checking shows.
#
#   tests/k8s/run.sh [BINDIR]
set -euo pipefail
cd "$(dirname "$0")/../.."

bindir=${1:-bin}
out=build/k8s
tests/k8s/install.sh
mkdir -p "$out"
kustomize=build/tools/bin/kustomize
python=build/tools/k8s-venv/bin/python

rendered=()
for dir in deploy/k8s/base deploy/k8s/overlays/*/; do
    dir=${dir%/}
    file=$out/$(echo "$dir" | tr / _).yaml
    "$kustomize" build "$dir" > "$file"
    rendered+=("$file")
done
node tests/k8s/schemas.mjs "${rendered[@]}"
"$python" tests/k8s/check.py --bin "$bindir" "${rendered[@]}"

# The negative control.
bad=$out/bad.yaml
"$kustomize" build tests/k8s/bad > "$bad"
expect_failure() { # EXPECT-FILE COMMAND...
    local expect=$1 log rc=0 missing=0
    shift
    log=$("$@" 2>&1) || rc=$?
    if [ $rc -eq 0 ]; then
        echo "k8s-check: $* passed the broken overlay tests/k8s/bad" >&2
        return 1
    fi
    while IFS= read -r line; do
        grep -qF -- "$line" <<<"$log" || { echo "k8s-check: not reported for tests/k8s/bad: $line" >&2; missing=1; }
    done < "$expect"
    [ $missing -eq 0 ] || { echo "$log" >&2; return 1; }
}
expect_failure tests/k8s/bad/EXPECT-schemas node tests/k8s/schemas.mjs "$bad"
expect_failure tests/k8s/bad/EXPECT "$python" tests/k8s/check.py --bin "$bindir" "$bad"
echo "k8s-check: the broken overlay fails with each of its $(cat tests/k8s/bad/EXPECT tests/k8s/bad/EXPECT-schemas | wc -l) expected problems"
