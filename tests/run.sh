#!/usr/bin/env bash
# tests/run.sh - the project's test command.
#
# On a Debian 12 machine, as root: installs what is missing (apt-get),
# configures and builds with warnings as errors, runs every CTest label
# (unit, pmix, integration; integration brings up a real local Slurm cluster
# and always tears it down), then builds again with ASan+UBSan and runs the
# unit tests there, and fuzzes the frame codec for 30 s (tests/fuzz/run.sh).
# Exits non-zero on any failure.
#
#   bash tests/run.sh            everything
#   EXITPOLICY_SKIP_SANITIZE=1   skip the sanitizer build
#   EXITPOLICY_BUILD_DIR=DIR     build tree (default: build under the source)
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${EXITPOLICY_BUILD_DIR:-$src/build}
jobs=$(nproc)

step() { printf '\n== %s\n' "$*"; }

step "dependencies"
bash "$src/contrib/install-deps"

# Whatever happens, leave no cluster behind (the pytest fixture tears its own
# down; this catches an interrupted run).
export EXITPOLICY_CLUSTER_DIR=${EXITPOLICY_CLUSTER_DIR:-/tmp/exitpolicy-test-cluster}
trap '"$src/contrib/slurm/cluster" down >/dev/null 2>&1 || true' EXIT

step "build ($build)"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEXITPOLICY_WERROR=ON >/dev/null
cmake --build "$build" -j "$jobs"

step "tests: unit, pmix, integration"
ctest --test-dir "$build" --output-on-failure -L 'unit|pmix|integration'
# Every test carries a label: nothing may run unlabelled, nothing is left out.
unlabelled=$(ctest --test-dir "$build" -N -LE 'unit|pmix|integration' | sed -n 's/^Total Tests: //p')
if [ "${unlabelled:-0}" != 0 ]; then
  echo "tests/run.sh: $unlabelled test(s) carry none of the labels unit, pmix, integration" >&2
  exit 1
fi

if [ "${EXITPOLICY_SKIP_SANITIZE:-0}" != 1 ]; then
  step "unit tests under ASan+UBSan"
  cmake -S "$src" -B "$build-sanitize" -DCMAKE_BUILD_TYPE=Debug -DEXITPOLICY_WERROR=ON \
    -DEXITPOLICY_SANITIZE=ON -DEXITPOLICY_BUILD_BENCH=OFF >/dev/null
  cmake --build "$build-sanitize" -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$build-sanitize" --output-on-failure -L unit
fi

step "the frame codec under libFuzzer (30 s)"
fuzz_log=$(mktemp)
if ! EXITPOLICY_FUZZ_BUILD_DIR="$build-fuzz" bash "$src/tests/fuzz/run.sh" 30 >"$fuzz_log" 2>&1; then
  tail -n 80 "$fuzz_log"
  echo "tests/run.sh: the codec fuzzer found something (see above)" >&2
  exit 1
fi
tail -n 5 "$fuzz_log"
rm -f "$fuzz_log"

step "no cluster process left"
"$src/contrib/slurm/cluster" down
step "all tests passed"
