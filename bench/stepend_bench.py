#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""stepend_bench.py - how long a step takes to end under a cgroup setup,
with the plugin as sites get it and without it, side by side.

On a 2-node cluster of contrib/slurm/cluster with a cgroup setup
(EXITPOLICY_CLUSTER_CGROUP=v1|v2: proctrack/cgroup, task/cgroup,task/affinity),
three steps, with the plugin as sites get it (pmix=auto, main-rank) and
without, in interleaved rounds: `srun -N2 -n4 true` and a shell step whose
rank 1 segfaults, beside the same without the plugin; an Open MPI step
(exitpolicy's PMIx service) whose rank 1 segfaults in a barrier, beside the
same program under Slurm's own --mpi=pmix where the cluster has it. Each
step starts on idle nodes. Prints each one's srun time (median, and the
median of the per-round ratios against the first), how long the nodes took
to be idle again after srun returned, and the nodes that ended drained
(there must be none).

Run it inside the cluster's namespace (bench/run.sh stepend does):
    contrib/slurm/cluster exec /usr/bin/python3 bench/stepend_bench.py PLUGIN CLIENTS PLUGSTACK_D ROUNDS
"""

import os
import statistics
import subprocess
import sys
import time

from plugstack import configure, interleaved, open_mpi_env, settle

plugin, clients, plugstack_d, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
conf = os.path.join(plugstack_d, "exitpolicy.conf")
mpi_env = {**os.environ, **open_mpi_env()}
segv_shell = ["bash", "-c", 'if [ "$SLURM_PROCID" = 1 ]; then kill -SEGV $$; fi; sleep 1']
segv_mpi = [os.path.join(clients, "ep_mpi_fail"), "--fail", "1:segv", "--timeout", "60"]
has_pmix = "pmix" in subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True).stdout

# Each step's configurations, the first its baseline: an Open MPI step
# without the plugin is one under Slurm's own PMIx service (under
# --mpi=none with no PMIx server each rank would run alone).
PLUGIN = f"optional {plugin}\n"
steps = {
    "true": (["-N2", "-n4", "true"], 0, [("no plugin", None, []), ("plugin", PLUGIN, ["--exit-policy=main-rank"])]),
    "shell, rank 1 SIGSEGV": (["-N2", "-n4", *segv_shell], None,
                              [("no plugin", None, []), ("plugin", PLUGIN, ["--exit-policy=main-rank"])]),
    "Open MPI, rank 1 SIGSEGV": (["-N2", "-n4", *segv_mpi], None,
                                 ([("--mpi=pmix", None, ["--mpi=pmix"])] if has_pmix else []) +
                                 [("plugin", PLUGIN, ["--mpi=none", "--exit-policy=main-rank"])]),
}


# The seconds from srun's return until the nodes were idle again, by
# configuration: what the nodes go on doing for the step (a step held at
# its end shows here, and in the next step's start).
tails = {}


def run(name):
    step, config = name
    args, want, configs = steps[step]
    _, line, extra = next(c for c in configs if c[0] == config)
    configure(conf, line)
    settle()  # the step before it is the nodes' no more
    t0 = time.perf_counter()
    rc = subprocess.run(["srun", *extra, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        env=mpi_env if step.startswith("Open MPI") else None).returncode
    elapsed = time.perf_counter() - t0
    tails.setdefault(name, []).append(settle())
    if want is not None and rc != want:
        sys.exit(f"srun {' '.join(extra + args)} gave {rc} under '{config}'")
    return elapsed


names = [(step, c[0]) for step, (_, _, configs) in steps.items() for c in configs]
times = interleaved(names, run, rounds)
configure(conf, None)

drained = subprocess.run(["sinfo", "-h", "-R", "-o", "%N %E"], capture_output=True, text=True).stdout.strip()
print(f"a step's end, {rounds} interleaved rounds (cgroup setup: {os.environ.get('EXITPOLICY_CLUSTER_CGROUP', '?')})")
print(f"{'step':<26} {'configuration':<14} {'srun median':>11} {'max':>7} {'ratio vs the first':>19} "
      f"{'then idle in':>13} {'max':>7}")
for step, (_, _, configs) in steps.items():
    base = times[(step, configs[0][0])]
    for config, _, _ in configs:
        t = times[(step, config)]
        ratios = [a / b for a, b in zip(t, base)]
        tail = tails[(step, config)]
        print(f"{step:<26} {config:<14} {statistics.median(t):10.2f}s {max(t):6.2f}s {statistics.median(ratios):19.3f} "
              f"{statistics.median(tail):12.2f}s {max(tail):6.2f}s")
print(f"nodes drained: {drained or 'none'}")
