#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/run.sh - build and run exitpolicy's benchmarks, print the figures.
#
#   bash bench/run.sh          all benchmarks
#   bash bench/run.sh decide   only the policy core (decide/report over 10^6 tasks)
#   bash bench/run.sh seal     the per-frame tag of authenticated links, by frame size, and
#                              per further link of a frame sent to many,
#                              beside a plain copy of the same bytes
#   bash bench/run.sh srun     srun -N4 -n8 true on the local cluster: plugin off,
#                              loaded, and with a policy (ROUNDS=15 paired rounds)
#   bash bench/run.sh many     one step of MANY_TASKS=1024 tasks on one node (a one-node
#                              cluster whose MaxTasksPerNode allows them): no plugin,
#                              pmix=auto (the daemon stands by), pmix=auto with a policy
#                              (MANY_ROUNDS=15 paired rounds; bench/many_tasks.py);
#                              MANY_OTHER_PLUGIN=PATH: another build in the same rounds;
#                              MANY_ONLY="pmix=auto,other: pmix=auto": only these
#   bash bench/run.sh forks    what loading the plugin costs each fork and exec of the process
#                              that loaded it, as slurmstepd forks every task: CPU time per
#                              fork and exec of /bin/true (FORK_TASKS=800 each, FORK_ROUNDS=14
#                              interleaved rounds; bench/fork_cost.c); FORK_OTHER_PLUGIN=PATH:
#                              another build in the same rounds
#   bash bench/run.sh cost     what a step pays, as one table: no plugin, pmix=never,
#                              pmix=auto with tasks that never use PMIx and with Open
#                              MPI ones, Slurm's --mpi=pmix; time (COST_ROUNDS=9
#                              interleaved rounds, medians of per-round ratios), the
#                              machine's CPU per step, and memory per node (RSS and
#                              PSS, bench/cost_bench.py)
#   bash bench/run.sh pmix     Open MPI -N4 -n8 under exitpolicy's PMIx servers vs
#                              Slurm's mpi/pmix (PAIRS=9), failure-event latency
#                              (EVENT_RUNS=10); the daemons' fan-out is the site
#                              default (FANOUT=32) unless FANOUT says otherwise
#   bash bench/run.sh pmi      an MPICH ring -N4 -n8 on exitpolicy's PMI-1 service vs
#                              Slurm's mpi/pmi2 (PMI_PAIRS=9; bench/pmi_bench.py)
#   bash bench/run.sh nodeloss node3 crashed mid-step: when the survivors hear of
#                              it, and when Slurm does (NODELOSS_RUNS=5)
#   bash bench/run.sh failure  an Open MPI rank dies in a barrier: from its death to
#                              srun's exit, exitpolicy's teardown vs Slurm's mpi/pmix
#                              (FAILURE_PAIRS=7, TEARDOWN_GRACE_MS=500)
#   bash bench/run.sh scale    steps over SCALE_NODES="4 16 32 64" nodes (2 ranks each), a
#                              fresh cluster per size, SCALE_ROUNDS=5 interleaved rounds: a
#                              trivial step without the plugin, with a policy (pmix=never,
#                              pmix=auto) and under Slurm's mpi/pmix; fence with data; the
#                              failure event to the last survivor; last exit to srun's exit
#                              (bench/scale_bench.py); not part of "all" (about 15 min)
#   bash bench/run.sh overlay  the overlay without Slurm or PMIx (bench/overlay_sim.cpp): srun's front
#                              end and N agents with 16 simulated ranks each, N in OVERLAY_NODES=
#                              "16 64 256 1024" (fan-out FANOUT=32, FENCE_BYTES=8 per rank); then the
#                              fan-outs OVERLAY_FANOUTS="8 16 32 64 128" at the largest N
#   bash bench/run.sh stepend  a step's end under a cgroup setup (a 2-node cluster with
#                              EXITPOLICY_CLUSTER_CGROUP=STEPEND_CGROUP, default v2:
#                              proctrack/cgroup, task/cgroup,task/affinity,
#                              UnkillableStepTimeout=20): srun -N2 -n4 true, a shell step
#                              and an Open MPI step whose rank segfaults, plugin vs none
#                              (STEPEND_ROUNDS=7 interleaved rounds; bench/stepend_bench.py);
#                              with EXITPOLICY_SLURM_PREFIX, on that Slurm (and the plugin
#                              built against it)
#   bash bench/run.sh soak     steps that succeed, fail, segfault, fence, run Open MPI and
#                              abort it: SOAK_STEPS=150 in a row and SOAK_WAVES=3 waves of
#                              4 at once; wrong codes, and whatever is left in /tmp,
#                              /dev/shm or the process table; the MPI steps beside
#                              Slurm's mpi/pmix (exit status 1 if anything was wrong)
#
# Figures are for comparison on one machine in one run, never thresholds.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# A development tree of its own (its plugin falls back to the tree's
# daemon: EXITPOLICY_BUILD_TREE_DAEMON), never the one docs/install.md
# installs from; cmake --install refuses it.
build=${EXITPOLICY_BUILD_DIR:-$src/build-dev}
what=${1:-all}
# The benchmarks' working directories, one per benchmark under one of
# this run's, removed when the run ends, however it ends.
work=$(mktemp -d /tmp/exitpolicy-bench.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
workdir() { local d; d=$(mktemp -d "$work/XXXXXX") && chmod 755 "$d" && echo "$d"; }

bash "$src/contrib/install-deps"
# The benchmarks load the plugin from this build tree, with its daemon.
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEXITPOLICY_BUILD_TREE_DAEMON=ON \
  ${EXITPOLICY_SLURM_PREFIX:+-DSLURM_ROOT="$EXITPOLICY_SLURM_PREFIX"} >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null

case $what in
  all|decide)
    echo "== policy core: deciding and reporting (bench/decide_bench.cpp)"
    "$build/bench/decide_bench" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
      --benchmark_min_time=0.5 2>/dev/null | grep -E '^Benchmark|_median' ;;
  srun|many|forks|cost|pmix|pmi|nodeloss|failure|seal|soak|scale|overlay|stepend) ;;
  *) echo "bench/run.sh: unknown benchmark '$what': valid are all, decide, seal, srun, many, forks, cost, pmix, pmi, nodeloss, failure, soak, scale, overlay, stepend" >&2; exit 2 ;;
esac
if [ "$what" = all ] || [ "$what" = forks ]; then
  echo "== what loading the plugin costs each fork and exec (bench/fork_cost.c)"
  cc -std=c11 -O2 -o "$work/fork_cost" "$src/bench/fork_cost.c" -ldl
  # shellcheck disable=SC2086 # FORK_OTHER_PLUGIN: a path, or nothing
  "$work/fork_cost" "${FORK_TASKS:-800}" "${FORK_ROUNDS:-14}" "$build/spank_plugin/exitpolicy.so" ${FORK_OTHER_PLUGIN:-}
  [ "$what" = forks ] && exit 0
fi
case $what in
  all|seal)
    echo "== the per-frame tag of authenticated links (bench/seal_bench.cpp)"
    "$build/bench/seal_bench" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
      --benchmark_min_time=0.2 2>/dev/null | grep -E '^Benchmark|_median' ;;
esac

if [ "$what" = overlay ]; then
  # One run per line; the figures as a table (milliseconds unless named).
  table() {
    awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
           printf "%6s %5s %6s %6s %9s %9s %9s %10s %9s %8s %7s %8s %9s %9s\n", v["nodes"], v["fanout"], v["depth"],
             v["tasks"], v["startup_ms"], v["fence_ms"], v["event_ms"], v["decision_ms"], v["fe_bytes_per_task"],
             v["fe_connections"], v["lost_heard_ms"], v["adopted_ms"], v["fence_after_loss_ms"], v["code"] }'
  }
  head="$(printf '%6s %5s %6s %6s %9s %9s %9s %10s %9s %8s %7s %8s %9s %9s' nodes fanout depth tasks startup \
    fence event decision 'FE B/task' 'FE conns' lost adopted 'fence lost' code)"
  echo "== the overlay without Slurm or PMIx: 16 ranks per node, ${FENCE_BYTES:-8} bytes per rank in each fence (bench/overlay_sim.cpp)"
  echo "$head"
  largest=16
  for n in ${OVERLAY_NODES:-16 64 256 1024}; do
    "$build/bench/overlay_sim" --nodes "$n" --ranks 16 --fanout "${FANOUT:-32}" --bytes "${FENCE_BYTES:-8}" \
      2>/dev/null | table
    largest=$n
  done
  echo "== fan-outs at $largest nodes"
  echo "$head"
  for k in ${OVERLAY_FANOUTS:-8 16 32 64 128}; do
    "$build/bench/overlay_sim" --nodes "$largest" --ranks 16 --fanout "$k" --bytes "${FENCE_BYTES:-8}" \
      2>/dev/null | table
  done
  exit 0
fi

export EXITPOLICY_CLUSTER_DIR=${EXITPOLICY_CLUSTER_DIR:-/tmp/exitpolicy-bench-cluster}
cluster=$src/contrib/slurm/cluster
if [ "$what" = seal ]; then
  exit 0
fi
if [ "$what" = scale ]; then
  trap '"$cluster" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
  cd "$(workdir)"
  echo "== steps over N nodes, 2 ranks per node, ${SCALE_ROUNDS:-5} interleaved rounds each (bench/scale_bench.py)"
  header=--header
  for n in ${SCALE_NODES:-4 16 32 64}; do
    "$cluster" up "$n" >/dev/null
    "$cluster" exec /usr/bin/python3 "$src/bench/scale_bench.py" "$build/spank_plugin/exitpolicy.so" \
      "$build/tests/clients" "$EXITPOLICY_CLUSTER_DIR/etc/plugstack.d" "$n" "${SCALE_ROUNDS:-5}" $header
    header=
    "$cluster" down >/dev/null
  done
  exit 0
fi
if [ "$what" = all ] || [ "$what" = many ]; then
  # A cluster of its own: one node that takes that many tasks of a step
  # (Slurm's MaxTasksPerNode is 512 by default).
  many_dir=/tmp/exitpolicy-bench-many-cluster
  trap 'EXITPOLICY_CLUSTER_DIR=$many_dir "$cluster" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
  EXITPOLICY_CLUSTER_DIR=$many_dir EXITPOLICY_CLUSTER_SLURM_CONF_EXTRA="MaxTasksPerNode=${MANY_TASKS:-1024}" \
    "$cluster" up 1 >/dev/null
  echo "== many tasks of one step on one node (bench/many_tasks.py)"
  (cd "$(workdir)" &&
    EXITPOLICY_CLUSTER_DIR=$many_dir "$cluster" exec /usr/bin/python3 "$src/bench/many_tasks.py" \
      "$build/spank_plugin/exitpolicy.so" "$many_dir/etc/plugstack.d" "${MANY_TASKS:-1024}" "${MANY_ROUNDS:-15}")
  EXITPOLICY_CLUSTER_DIR=$many_dir "$cluster" down >/dev/null
  trap 'rm -rf "$work"' EXIT
  [ "$what" = many ] && exit 0
fi
if [ "$what" = all ] || [ "$what" = stepend ]; then
  # A cluster of its own, with the cgroup setup.
  stepend_dir=/tmp/exitpolicy-bench-stepend-cluster
  trap 'EXITPOLICY_CLUSTER_DIR=$stepend_dir "$cluster" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
  export EXITPOLICY_CLUSTER_CGROUP=${STEPEND_CGROUP:-v2}
  EXITPOLICY_CLUSTER_DIR=$stepend_dir EXITPOLICY_CLUSTER_SLURM_CONF_EXTRA="UnkillableStepTimeout=20" \
    "$cluster" up 2 >/dev/null
  echo "== a step's end under cgroup/$EXITPOLICY_CLUSTER_CGROUP, plugin vs none (bench/stepend_bench.py)"
  (cd "$(workdir)" &&
    EXITPOLICY_CLUSTER_DIR=$stepend_dir "$cluster" exec /usr/bin/python3 "$src/bench/stepend_bench.py" \
      "$build/spank_plugin/exitpolicy.so" "$build/tests/clients" "$stepend_dir/etc/plugstack.d" "${STEPEND_ROUNDS:-7}")
  EXITPOLICY_CLUSTER_DIR=$stepend_dir "$cluster" down >/dev/null
  unset EXITPOLICY_CLUSTER_CGROUP
  trap 'rm -rf "$work"' EXIT
  [ "$what" = stepend ] && exit 0
fi
if [ "$what" != decide ] && [ "$what" != nodeloss ]; then
  trap '"$cluster" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
  "$cluster" up 4 >/dev/null
  cd "$(workdir)"
fi
case $what in
  all|srun)
    echo "== srun overhead on a real 4-node cluster (bench/srun_overhead.py)"
    "$cluster" exec /usr/bin/python3 "$src/bench/srun_overhead.py" \
      "$build/spank_plugin/exitpolicy.so" "$EXITPOLICY_CLUSTER_DIR/etc/plugstack.d" "${ROUNDS:-15}" ;;
esac
case $what in
  all|cost)
    echo "== what a step pays: time and memory per node (bench/cost_bench.py)"
    "$cluster" exec /usr/bin/python3 "$src/bench/cost_bench.py" "$build/spank_plugin/exitpolicy.so" \
      "$build/tests/clients" "$EXITPOLICY_CLUSTER_DIR/etc/plugstack.d" "${COST_ROUNDS:-9}" ;;
esac
case $what in
  all|pmix)
    echo "== PMIx service vs Slurm's mpi/pmix (bench/pmix_bench.py)"
    "$cluster" exec /usr/bin/python3 "$src/bench/pmix_bench.py" "$build/spank_plugin/exitpolicy.so" \
      "$build/tests/clients" "$EXITPOLICY_CLUSTER_DIR/etc/plugstack.d" "${PAIRS:-9}" "${EVENT_RUNS:-10}" ;;
esac
case $what in
  all|pmi)
    echo "== PMI-1 service vs Slurm's mpi/pmi2, MPICH (bench/pmi_bench.py)"
    "$cluster" exec /usr/bin/python3 "$src/bench/pmi_bench.py" "$build/spank_plugin/exitpolicy.so" \
      "$build/tests/clients" "$EXITPOLICY_CLUSTER_DIR/etc/plugstack.d" "${PMI_PAIRS:-9}" ;;
esac
case $what in
  all|failure)
    echo "== a rank dies in a collective: until srun returns, vs Slurm's mpi/pmix (bench/failure_bench.py)"
    "$cluster" exec /usr/bin/python3 "$src/bench/failure_bench.py" "$build/spank_plugin/exitpolicy.so" \
      "$build/tests/clients" "$EXITPOLICY_CLUSTER_DIR/etc/plugstack.d" "${FAILURE_PAIRS:-7}" ;;
esac
case $what in
  all|nodeloss)
    echo "== a lost node: PMIx events vs Slurm's own notice (bench/nodeloss_bench.py)"
    cd "$(workdir)"
    /usr/bin/python3 "$src/bench/nodeloss_bench.py" "$build/spank_plugin/exitpolicy.so" "$build/tests/clients" \
      "${NODELOSS_RUNS:-5}" ;;
esac
# Last: its exit status (1: a wrong code, or something left behind) is run.sh's.
case $what in
  all|soak)
    echo "== steps of six kinds, in a row and in waves: wrong codes, anything left behind (bench/soak_bench.py)"
    "$cluster" exec /usr/bin/python3 "$src/bench/soak_bench.py" "$build/spank_plugin/exitpolicy.so" \
      "$build/tests/clients" "$EXITPOLICY_CLUSTER_DIR/etc/plugstack.d" "${SOAK_STEPS:-150}" "${SOAK_WAVES:-3}" ;;
esac
