#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""scale_bench.py - one row of `bench/run.sh scale`: a step over N nodes of the
local cluster, 2 ranks per node, measured in paired, interleaved rounds.

  trivial    `srun -N N -n 2N true`: no plugin; the plugin with a policy and
             pmix=never; with a policy and pmix=auto (a PMIx daemon per node);
             no plugin under Slurm's --mpi=pmix. The time without the plugin,
             and the others as the median of per-round ratios to it.
  fence      tests/clients/ep_fence --data (every rank's value to every
             rank): the fence call's time on the rank that entered it last
             (the smallest of the ranks' times: the collective alone), median
             over rounds, under exitpolicy's service and under Slurm's.
  event      tests/clients/ep_events, the last rank exits 1 under
             --exit-recoverable: from its death to the last survivor's
             handler, median over rounds.
  exit       from the last task's end (each task prints its clock as it
             exits) to srun's return: no plugin, policy with pmix=never,
             policy with pmix=auto; median over rounds.

Every node is a namespace on this one machine: the clocks are one clock.

Run inside the cluster's namespace (bench/run.sh scale does, once per N):
    contrib/slurm/cluster exec /usr/bin/python3 bench/scale_bench.py PLUGIN CLIENTS PLUGSTACK_D NODES ROUNDS [--header]
"""

import os
import statistics
import subprocess
import sys
import time

from plugstack import configure

plugin, clients, plugstack_d, nodes, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
conf = os.path.join(plugstack_d, "exitpolicy.conf")
ranks = 2 * nodes
fanout = os.environ.get("FANOUT")
auto_line = f"optional {plugin}" + (f" fanout={fanout}" if fanout else "") + "\n"
never_line = f"optional {plugin} pmix=never\n"
policy = ["--exit-policy=main-rank"]


def plugstack(line):
    configure(conf, line)


def srun(args, expect=0):
    t0 = time.perf_counter()
    p = subprocess.run(["srun", *args], capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if p.returncode != expect:
        sys.exit(f"srun {' '.join(args)} ended with {p.returncode}, not {expect}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return elapsed, p.stdout, time.time()


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


step = [f"-N{nodes}", f"-n{ranks}"]
trivial = {
    "none": (None, ["--mpi=none", *step, "true"]),
    "never": (never_line, ["--mpi=none", *policy, *step, "true"]),
    "auto": (auto_line, ["--mpi=none", *policy, *step, "true"]),
    "mpi/pmix": (None, ["--mpi=pmix", *step, "true"]),
}


def fence(mpi):
    plugstack(auto_line if mpi == "none" else None)
    _, out, _ = srun([f"--mpi={mpi}", *step, os.path.join(clients, "ep_fence"), "--data", "--timeout", "60"])
    us = [float(fields(l)["us"]) for l in out.splitlines() if l.startswith("fence ok ")]
    if len(us) != ranks:
        sys.exit(f"fence under --mpi={mpi}: {len(us)} of {ranks} ranks passed\n{out[-2000:]}")
    return min(us) / 1000


def event():
    plugstack(auto_line)
    victim = ranks - 1
    _, out, _ = srun(["--mpi=none", "--exit-recoverable", *step, os.path.join(clients, "ep_events"), "--victim",
                      str(victim), "--exit", "1", "--expect", "3", "--timeout", "30"], expect=1)
    died, told = None, []
    for line in out.splitlines():
        if line.startswith("victim "):
            died = int(fields(line)["t_us"])
        elif line.startswith("event ") and fields(line).get("status") == "-200":
            told.append(int(fields(line)["t_us"]))
    if died is None or len(told) != ranks - 1:
        sys.exit(f"event: {len(told)} of {ranks - 1} survivors told\n{out[-2000:]}")
    return (max(told) - died) / 1000


def last_exit(line, extra):
    plugstack(line)
    _, out, returned = srun(["--mpi=none", *extra, *step, "date", "+%s%6N"])
    ends = [int(l) for l in out.split()]
    if len(ends) != ranks:
        sys.exit(f"exit: {len(ends)} of {ranks} tasks printed their end\n{out[-2000:]}")
    return (returned * 1e6 - max(ends)) / 1000


for name, (line, args) in trivial.items():  # warm up
    plugstack(line)
    srun(args)
times = {n: [] for n in trivial}
fences = {"none": [], "pmix": []}
events, exits = [], {"none": [], "never": [], "auto": []}
for r in range(rounds):
    names = list(trivial)
    names = names[r % len(names):] + names[:r % len(names)]  # who goes first rotates
    for name in names:
        line, args = trivial[name]
        plugstack(line)
        times[name].append(srun(args)[0])
    for mpi in (["none", "pmix"] if r % 2 == 0 else ["pmix", "none"]):
        fences[mpi].append(fence(mpi))
    events.append(event())
    for name, line, extra in [("none", None, []), ("never", never_line, policy), ("auto", auto_line, policy)]:
        exits[name].append(last_exit(line, extra))
plugstack(None)


def ratio(name):
    return statistics.median(t / b for t, b in zip(times[name], times["none"]))


if "--header" in sys.argv:
    print(f"{'':>5} {'trivial step (ratio to no plugin)':^46} {'fence with data':^17} {'event':>7} "
          f"{'last exit -> srun (ms)':^24}")
    print(f"{'nodes':>5} {'none ms':>9} {'never+pol':>9} {'auto+pol':>9} {'mpi/pmix':>9} {'auto/pmix':>9} "
          f"{'ours ms':>8} {'pmix ms':>8} {'ms':>7} {'none':>7} {'never':>7} {'auto':>8}")
print(f"{nodes:>5} {statistics.median(times['none']) * 1000:9.1f} {ratio('never'):9.3f} {ratio('auto'):9.3f} "
      f"{ratio('mpi/pmix'):9.3f} "
      f"{statistics.median(a / p for a, p in zip(times['auto'], times['mpi/pmix'])):9.3f} "
      f"{statistics.median(fences['none']):8.2f} {statistics.median(fences['pmix']):8.2f} "
      f"{statistics.median(events):7.1f} {statistics.median(exits['none']):7.1f} "
      f"{statistics.median(exits['never']):7.1f} {statistics.median(exits['auto']):8.1f}", flush=True)
