# SPDX-License-Identifier: Apache-2.0
"""plugstack.py - the benchmarks' one way to turn the plugin on and off on the local cluster, and to
time configurations side by side."""

import os
import subprocess
import time


def configure(conf, line):
    """Writes `line` as the plugstack file `conf`, or removes it (no plugin) when line is None."""
    if line is None:
        if os.path.exists(conf):
            os.unlink(conf)
    else:
        with open(conf, "w") as f:
            f.write(line)


def interleaved(names, run, rounds):
    """Each configuration once to warm up, then `rounds` rounds of all of
    them, who goes first rotating, so that machine noise hits all alike:
    {name: [seconds of each round]} from run(name)."""
    for name in names:
        run(name)
    times = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(run(name))
    return times


def cpu_seconds():
    """The machine's busy CPU time so far: user, nice, system, irq, softirq
    (/proc/stat, in ticks of 1/USER_HZ s)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def kernel_counts():
    """(context switches, page faults) of the whole machine so far, from
    /proc/stat and /proc/vmstat: counts of work, unlike times untouched by
    how fast this shared machine runs at the moment."""
    with open("/proc/stat") as f:
        switches = next(int(line.split()[1]) for line in f if line.startswith("ctxt "))
    with open("/proc/vmstat") as f:
        faults = next(int(line.split()[1]) for line in f if line.startswith("pgfault "))
    return switches, faults


def open_mpi_env():
    """Open MPI's settings on the local cluster: TCP only (shared memory
    segments of different virtual nodes would collide), over what joins the
    nodes: each node's own address, or the one loopback they share
    (EXITPOLICY_CLUSTER_NET=shared)."""
    try:
        with open(os.path.join(os.environ.get("EXITPOLICY_CLUSTER_DIR", "/tmp/exitpolicy-cluster"), "run", "net")) as f:
            net = f.read().strip()
    except OSError:
        net = "nodes"
    network = "lo" if net == "shared" else "10.253.0.0/24"
    return {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": network,
            "OMPI_MCA_oob_tcp_if_include": network, "OMPI_MCA_pml": "ob1"}


def node_busy():
    """Whether a slurmstepd still runs on this machine, or slurmctld has a
    job or a node that is not idle yet."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "slurmstepd":
                        return True
            except OSError:
                pass
    jobs = subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip()
    states = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True).stdout.split()
    return bool(jobs) or any(state != "idle" for state in states)


def settle(limit=60.0):
    """Seconds until the cluster is idle again (at most `limit`): what a
    step's node and slurmctld go on doing after srun has returned. A step
    started before would wait for them ("queued and waiting for
    resources")."""
    t0 = time.perf_counter()
    while node_busy() and time.perf_counter() - t0 < limit:
        time.sleep(0.02)
    return time.perf_counter() - t0
