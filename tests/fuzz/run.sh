#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/fuzz/run.sh [SECONDS] - fuzz the frame codec (protocol/wire) with
# libFuzzer + ASan + UBSan for SECONDS (default 60).
#
# Builds tests/fuzz/wire_fuzz with clang in its own tree (default: build-fuzz
# under the source, or $EXITPOLICY_FUZZ_BUILD_DIR) and runs it on a scratch
# corpus seeded by wire_seeds (one valid frame of every message type, and a
# stream of them all). Exits non-zero on any finding; the crashing input is left in the
# build tree (crash-*), and it replays with: wire_fuzz FILE.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${EXITPOLICY_FUZZ_BUILD_DIR:-$src/build-fuzz}
seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS]" >&2; exit 2; }
bash "$src/contrib/install-deps" fuzz

CC=clang CXX=clang++ cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEXITPOLICY_FUZZ=ON \
  -DEXITPOLICY_BUILD_BENCH=OFF -DEXITPOLICY_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target wire_fuzz wire_seeds -j "$(nproc)"

corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
"$build/tests/fuzz/wire_seeds" "$corpus"
cd "$build"
./tests/fuzz/wire_fuzz -max_total_time="$seconds" -print_final_stats=1 -timeout=10 "$corpus"
