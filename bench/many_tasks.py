#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""many_tasks.py - one step of many tasks on one node, with and without the plugin.

Times `srun -N1 -nTASKS --overcommit true` on a one-node cluster that takes
that many tasks (bench/run.sh many raises Slurm's MaxTasksPerNode), in four
configurations, interleaved so that machine noise hits all of them alike: no
plugin; the plugin as sites get it (pmix=auto: the node daemon stands by,
slurmstepd tells it of every task's start, each task gets its PMIx and PMI
environment); the same with --exit-policy=main-rank (every task's outcome
goes to srun); main-rank on a site with pmix=never (no node daemon: the
outcomes go from slurmstepd to srun alone). Prints each configuration's median and the median of the
per-round ratios against "no plugin", paired round by round.

Each step starts on an idle cluster: slurmstepd goes on for a second or two
after srun has returned (Slurm ends and accounts 1 024 tasks), then
slurmctld completes the job, and a step started meanwhile would pay for its
predecessor's end (srun: "queued and waiting for resources"). That tail,
from srun's return until the cluster is idle again, is the second figure.

Then what each step cost the machine, from srun's start until the cluster
is idle: its CPU time (/proc/stat, each configuration's mean and its ratio
to no plugin), and the context switches and page faults it made per task
(medians). The CPU time of one and the same step moves by a third on this
shared machine from run to run; the counts hardly move, and show what the
plugin adds to each task.

MANY_EACH=1 prints every round's time as well. MANY_OTHER_PLUGIN=PATH runs
another build of the plugin (its plugstack arguments may follow the path)
in the same rounds: a change measured against the build it changes.
MANY_ONLY=NAME,NAME runs only these configurations ("no plugin" always
runs: every ratio is to it), for a shorter paired run.

Run it inside the cluster's namespace (bench/run.sh many does):
    contrib/slurm/cluster exec /usr/bin/python3 bench/many_tasks.py PLUGIN PLUGSTACK_D TASKS ROUNDS
"""

import os
import statistics
import subprocess
import sys
import time

from plugstack import configure, cpu_seconds, interleaved, kernel_counts, settle

plugin, plugstack_d, tasks, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
conf = os.path.join(plugstack_d, "exitpolicy.conf")
step = ["srun", "-N1", f"-n{tasks}", "--overcommit", "true"]

configs = {
    "no plugin": (None, []),
    "pmix=auto": (f"optional {plugin}\n", []),
    "pmix=auto, main-rank": (f"optional {plugin}\n", ["--exit-policy=main-rank"]),
    # A site without the PMIx service (or a step under Slurm's mpi/pmix):
    # every outcome goes to srun from slurmstepd alone.
    "pmix=never, main-rank": (f"optional {plugin} pmix=never\n", ["--exit-policy=main-rank"]),
}
# Another build of the plugin beside this one, in the same rounds (a
# change measured against what it changes): MANY_OTHER_PLUGIN=PATH.
other = os.environ.get("MANY_OTHER_PLUGIN")
if other:
    configs["other: pmix=auto"] = (f"optional {other}\n", [])
    configs["other: main-rank"] = (f"optional {other}\n", ["--exit-policy=main-rank"])
only = os.environ.get("MANY_ONLY")
if only:
    wanted = {"no plugin", *(n.strip() for n in only.split(","))}
    unknown = wanted - configs.keys()
    if unknown:
        sys.exit(f"MANY_ONLY: no configuration {', '.join(sorted(unknown))} (there are: {', '.join(configs)})")
    configs = {name: value for name, value in configs.items() if name in wanted}

tails = {name: [] for name in configs}
cpus = {name: [] for name in configs}
counts = {name: [] for name in configs}


def run(name):
    line, extra = configs[name]
    configure(conf, line)
    settle()
    k0, c0, t0 = kernel_counts(), cpu_seconds(), time.perf_counter()
    proc = subprocess.run(step[:1] + extra + step[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"srun failed with {proc.returncode} under '{name}': {proc.stderr[-2000:]}")
    tails[name].append(settle())
    cpus[name].append(cpu_seconds() - c0)
    counts[name].append([b - a for a, b in zip(k0, kernel_counts())])
    return elapsed


names = list(configs)
times = interleaved(names, run, rounds)
configure(conf, None)

base = times["no plugin"]
print(f"srun -N1 -n{tasks} --overcommit true, {rounds} interleaved rounds")
print(f"{'configuration':<22} {'median':>9} {'min':>9} {'median ratio vs no plugin':>27} {'cluster busy after':>21}"
      f" {'CPU':>7} {'CPU ratio':>10} {'switches/task':>14} {'faults/task':>12}")
base_cpu = statistics.fmean(cpus["no plugin"][-rounds:])
for name in names:
    ratios = [t / b for t, b in zip(times[name], base)]
    cpu = statistics.fmean(cpus[name][-rounds:])
    print(f"{name:<22} {statistics.median(times[name]):8.2f}s {min(times[name]):8.2f}s "
          f"{statistics.median(ratios):27.3f} {statistics.median(tails[name][-rounds:]):20.2f}s"
          f" {cpu:6.2f}s {cpu / base_cpu:10.3f}"
          f" {statistics.median(c[0] for c in counts[name][-rounds:]) / tasks:14.2f}"
          f" {statistics.median(c[1] for c in counts[name][-rounds:]) / tasks:12.1f}")
if os.environ.get("MANY_EACH"):
    for name in names:
        print(name, "wall", " ".join(f"{t:.2f}" for t in times[name]))
        print(name, "CPU ", " ".join(f"{c:.2f}" for c in cpus[name][-rounds:]))
