#!/usr/bin/env bash
# The model checker's bounded run in make test (tests/run.sh, after the
# unit tests of each build): the regression cases, then every shape
# explored to a small depth.  Known defects (tests/model/known-failing.txt)
# are expected to fail until their fixes land.  A sanitizer build explores
# less deep (it runs some 3x slower).  MODEL_DEPTH and MODEL_SECONDS
# override the bound.
#
#   tests/model/run.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${1:?usage: tests/model/run.sh BUILD_DIR}
bin=$build/tests/model-check
known=tests/model/known-failing.txt
case $build in
*asan*) depth=${MODEL_DEPTH:-8} seconds=${MODEL_SECONDS:-15} ;;
*) depth=${MODEL_DEPTH:-12} seconds=${MODEL_SECONDS:-30} ;;
esac

"$bin" --check-cases tests/model/cases --known "$known"
"$bin" --depth "$depth" --max-seconds "$seconds" --known "$known"
