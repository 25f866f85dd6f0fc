#!/usr/bin/env bash
# bench/run.sh - build and run exitpolicy's benchmarks, print the figures.
#
#   bash bench/run.sh          all benchmarks
#   bash bench/run.sh decide   only the policy core (decide/report over 10^6 tasks)
#
# Figures are for comparison on one machine in one run, never thresholds.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${EXITPOLICY_BUILD_DIR:-$src/build}
what=${1:-all}

bash "$src/contrib/install-deps"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target decide_bench >/dev/null

case $what in
  all|decide)
    echo "== policy core: deciding and reporting (bench/decide_bench.cpp)"
    "$build/bench/decide_bench" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
      --benchmark_min_time=0.5 2>/dev/null | grep -E '^Benchmark|_median' ;;
  *) echo "bench/run.sh: unknown benchmark '$what': valid are all, decide" >&2; exit 2 ;;
esac
