#!/usr/bin/env bash
# Installs the pinned tools `make k8s-check` uses, from the registries, into
# the build tree (nothing global), and only what is missing:
#
#   build/tools/bin/kustomize    kustomize (Go module proxy, go install)
#   tests/k8s/node_modules       kubernetes-models with the KEDA and
#                                prometheus-operator models (npm ci, lock file)
#   build/tools/k8s-venv         kubernetes-validate (PyPI, requirements.txt)
#
# CI runs it through make k8s-check on a fresh machine; a second run is a
# no-op.
set -euo pipefail
cd "$(dirname "$0")/../.."

KUSTOMIZE_VERSION=v5.5.0
tools=$PWD/build/tools
mkdir -p "$tools/bin"

need() {
    command -v "$1" >/dev/null || { echo "k8s-check: $1 is needed ($2)" >&2; exit 2; }
}

# The module version the binary was built from (`kustomize version` says
# "(devel)" for a go-installed build).
built=$(go version -m "$tools/bin/kustomize" 2>/dev/null | awk '$1 == "mod" {print $3}' || true)
if [ "$built" != "$KUSTOMIZE_VERSION" ]; then
    need go "the Go toolchain builds kustomize from the Go module proxy"
    echo "k8s-check: installing kustomize $KUSTOMIZE_VERSION"
    GOBIN=$tools/bin GOFLAGS=-mod=mod go install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
fi

# npm ci again only when the lock file changed since the last install.
stamp=tests/k8s/node_modules/.sagad-lock
if ! cmp -s tests/k8s/package-lock.json "$stamp" 2>/dev/null; then
    need npm "Node.js and npm run the schema validation"
    echo "k8s-check: npm ci in tests/k8s"
    (cd tests/k8s && npm ci --no-audit --no-fund --loglevel=error)
    cp tests/k8s/package-lock.json "$stamp"
fi

venv=$tools/k8s-venv
if ! cmp -s tests/k8s/requirements.txt "$venv/.sagad-requirements" 2>/dev/null; then
    need python3 "Python runs the strict validation and the sagad checks"
    echo "k8s-check: installing kubernetes-validate into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r tests/k8s/requirements.txt
    cp tests/k8s/requirements.txt "$venv/.sagad-requirements"
fi
