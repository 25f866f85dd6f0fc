#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""srun_overhead.py - what the plugin costs a step, measured on the real cluster.

Times `srun -N4 -n8 true` on the local 4-node cluster (contrib/slurm/cluster)
in four configurations, interleaved so that machine noise hits all of them
alike: no plugin at all; the plugin with pmix=never and no policy asked;
the plugin with pmix=never and --exit-policy=main-rank (front end, node
links, report path); the plugin as sites get it (pmix=auto: a node daemon
per node serves PMIx) with --exit-policy=main-rank; and, for scale, no
plugin but Slurm's own PMIx service (--mpi=pmix). Prints each
configuration's median and the medians of the per-round ratios against
"no plugin".

Run it inside the cluster's namespace (bench/run.sh srun does):
    contrib/slurm/cluster exec /usr/bin/python3 bench/srun_overhead.py PLUGIN PLUGSTACK_D ROUNDS
"""

import os
import statistics
import subprocess
import sys
import time

from plugstack import configure, interleaved

plugin, plugstack_d, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
conf = os.path.join(plugstack_d, "exitpolicy.conf")
step = ["srun", "-N4", "-n8", "true"]

configs = {
    "no plugin": (None, []),
    "pmix=never, no policy": (f"optional {plugin} pmix=never\n", []),
    "pmix=never, main-rank": (f"optional {plugin} pmix=never\n", ["--exit-policy=main-rank"]),
    "pmix=auto, main-rank": (f"optional {plugin}\n", ["--exit-policy=main-rank"]),
    # For scale: what Slurm's own PMIx service costs the same step.
    "no plugin, --mpi=pmix": (None, ["--mpi=pmix"]),
}


def run(name):
    line, extra = configs[name]
    configure(conf, line)
    t0 = time.perf_counter()
    rc = subprocess.run(step[:1] + extra + step[1:], stdout=subprocess.DEVNULL).returncode
    elapsed = time.perf_counter() - t0
    if rc != 0:
        sys.exit(f"srun failed with {rc} under '{name}'")
    return elapsed


names = list(configs)
times = interleaved(names, run, rounds)
if os.path.exists(conf):
    os.unlink(conf)

base = times["no plugin"]
print(f"srun -N4 -n8 true, {rounds} interleaved rounds")
print(f"{'configuration':<24} {'median':>9} {'min':>9} {'median ratio vs no plugin':>27}")
for name in names:
    ratios = [t / b for t, b in zip(times[name], base)]
    print(f"{name:<24} {statistics.median(times[name]) * 1000:7.1f}ms {min(times[name]) * 1000:7.1f}ms "
          f"{statistics.median(ratios):27.3f}")
