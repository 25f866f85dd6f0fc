#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""cost_bench.py - what exitpolicy costs a step, with and without PMIx clients, on the real cluster.

Six kinds of step on the local 4-node cluster, interleaved round by round so
that machine noise hits all alike:

  no plugin               srun -N4 -n8 true
  pmix=never              the plugin with pmix=never, --exit-policy=main-rank
  pmix=auto               the plugin as sites get it, --exit-policy=main-rank:
                          the tasks never touch PMIx
  --mpi=pmix              no plugin, Slurm's own PMIx service (tasks: true)
  pmix=auto, Open MPI     an Open MPI program (tests/clients/ep_mpi_ring) on
                          exitpolicy's PMIx service, --exit-policy=main-rank
  --mpi=pmix, Open MPI    the same program under Slurm's mpi/pmix

Time: each kind's median, and the median of the per-round ratios: the four
`true` steps against "no plugin", the Open MPI steps against each other.

CPU: the whole machine's CPU time (user, system and interrupts, from
/proc/stat) while the step ran, each kind's mean (the kernel counts it in
ticks of 1/USER_HZ s, 10 ms here, too coarse for a median): what the step cost the
nodes' cores, which on a machine with fewer cores than busy processes is
also wall time. Other work on the machine adds to every kind alike.

Memory per node: the same steps with tasks that stay (sleep, or the Open
MPI program held after its ring), sampled while they run: the step's
slurmstepd plus every process exitpolicy started for the step (its node
daemon and the daemon's helpers), summed over the nodes and divided by
their number. RSS counts a shared library's pages in every process that
maps them; PSS shares them out, and is what the node loses.

Run inside the cluster's namespace (bench/run.sh cost does):
    contrib/slurm/cluster exec /usr/bin/python3 bench/cost_bench.py PLUGIN CLIENTS PLUGSTACK_D ROUNDS
"""

import os
import re
import statistics
import subprocess
import sys
import time

from plugstack import configure, cpu_seconds, open_mpi_env

plugin, clients, plugstack_d, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
nodes = 4
conf = os.path.join(plugstack_d, "exitpolicy.conf")
ring = os.path.join(clients, "ep_mpi_ring")
mpi_env = {**os.environ, **open_mpi_env()}
never = f"optional {plugin} pmix=never\n"
auto = f"optional {plugin}\n"
policy = ["--exit-policy=main-rank"]

# name: (plugstack line or None, srun options, program, held program)
kinds = {
    "no plugin": (None, [], ["true"], ["sleep", "3"]),
    "pmix=never": (never, policy, ["true"], ["sleep", "3"]),
    "pmix=auto": (auto, policy, ["true"], ["sleep", "3"]),
    "--mpi=pmix": (None, ["--mpi=pmix"], ["true"], ["sleep", "3"]),
    "pmix=auto, Open MPI": (auto, ["--mpi=none"] + policy, [ring], [ring, "--hold", "3"]),
    "--mpi=pmix, Open MPI": (None, ["--mpi=pmix"], [ring], [ring, "--hold", "3"]),
}


def srun(name, held=False):
    line, options, program, held_program = kinds[name]
    configure(conf, line)
    argv = ["srun", f"-N{nodes}", "-n8"] + options + (held_program if held else program)
    return subprocess.Popen(argv, env=mpi_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def timed(name):
    """(wall, CPU) seconds of one step. Open MPI's TCP transport between
    virtual nodes of one machine fails now and then, under either PMIx
    server: such a run is repeated."""
    for _ in range(3):
        c0, t0 = cpu_seconds(), time.perf_counter()
        p = srun(name)
        out, err = p.communicate()
        elapsed, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        if p.returncode == 0 and ("Open MPI" not in name or out.count("mpi ok") == 8):
            return elapsed, cpu
    sys.exit(f"'{name}' failed 3 times in a row ({p.returncode}):\n{out}{err}")


def kib(path, key):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def step_processes():
    """The newest step's slurmstepds, exitpolicy's node daemons (or their standbys) and their children (helpers)."""
    stepds, comm, parent = {}, {}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        comm[pid] = stat[stat.index("(") + 1:stat.rindex(")")]
        parent[pid] = stat[stat.rindex(")") + 2:].split()[1]
        m = re.search(r"\[(\d+)\.(\d+)\]", cmd)
        if comm[pid] == "slurmstepd" and m:
            stepds.setdefault(int(m.group(1)), []).append(pid)
    daemons = {p for p, c in comm.items() if c.startswith(("exitpolicy-pmix", "exitpolicy-deta"))}
    helpers = {p for p, pp in parent.items() if pp in daemons}
    return (stepds[max(stepds)] if stepds else []) + sorted(daemons | helpers)


def memory(name):
    """(RSS, PSS) per node in MiB while the step's tasks run."""
    p = srun(name, held=True)
    time.sleep(1.8)
    rss = pss = 0
    for pid in step_processes():
        rss += kib(f"/proc/{pid}/status", "VmRSS:")
        pss += kib(f"/proc/{pid}/smaps_rollup", "Pss:")
    out, err = p.communicate()
    if p.returncode != 0:
        sys.exit(f"'{name}' (held) failed ({p.returncode}):\n{out}{err}")
    return rss / 1024 / nodes, pss / 1024 / nodes


names = list(kinds)
for name in names:  # warm up caches and the controller
    timed(name)
times = {n: [] for n in names}
cpus = {n: [] for n in names}
for r in range(rounds):
    order = names[r % len(names):] + names[:r % len(names)]
    for name in order:
        elapsed, cpu = timed(name)
        times[name].append(elapsed)
        cpus[name].append(cpu)
mems = {n: [] for n in names}
for r in range(max(1, min(3, rounds))):
    for name in names[r % len(names):] + names[:r % len(names)]:
        mems[name].append(memory(name))
configure(conf, None)


def ratio(name, base):
    return statistics.median(a / b for a, b in zip(times[name], times[base]))


print(f"srun -N{nodes} -n8, {rounds} interleaved rounds; memory per node: the step's slurmstepd and "
      f"exitpolicy's processes, median of {len(mems[names[0]])} samples")
print(f"{'step':24} {'median':>9} {'ratio':>7} {'against':>20} {'CPU ms':>7} {'+CPU':>6} {'RSS MiB':>8} {'+RSS':>6} "
      f"{'PSS MiB':>8} {'+PSS':>6}")
base_rss = statistics.median(m[0] for m in mems["no plugin"])
base_pss = statistics.median(m[1] for m in mems["no plugin"])
base_cpu = statistics.fmean(cpus["no plugin"]) * 1000
# What each kind is measured against: the Open MPI step under our service
# against the same under Slurm's; the rest against no plugin.
against = {n: ("--mpi=pmix, Open MPI" if n == "pmix=auto, Open MPI" else "no plugin") for n in names}
against["--mpi=pmix, Open MPI"] = None
for name in names:
    vs = against[name]
    r = f"{ratio(name, vs):.3f}" if vs else "-"
    rss = statistics.median(m[0] for m in mems[name])
    pss = statistics.median(m[1] for m in mems[name])
    cpu = statistics.fmean(cpus[name]) * 1000
    print(f"{name:24} {statistics.median(times[name]) * 1000:7.1f}ms {r:>7} {vs or '-':>20} {cpu:7.1f} "
          f"{cpu - base_cpu:+6.1f} {rss:8.1f} {rss - base_rss:+6.1f} {pss:8.1f} {pss - base_pss:+6.1f}")
