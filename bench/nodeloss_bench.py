#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""nodeloss_bench.py - how soon the survivors hear of a lost node.

For each run: a fresh 4-node cluster (SlurmdTimeout=5) with exitpolicy's
PMIx service (fanout=2); srun --no-kill -N4 -n8 tests/clients/ep_events
with rank 5 waiting (--hang); once it waits, node3 is crashed
(contrib/slurm/cluster crash: SIGKILL to every process of the node at once).
Measured from the kill:
  - PMIX_EVENT_NODE_DOWN in each survivor's handler (6 per run), p50 / max;
  - srun's "Node failure on node3", i.e. when Slurm itself noticed.
Every node is a namespace on this one machine: one clock for all.

Run from the host (bench/run.sh nodeloss does):
    nodeloss_bench.py PLUGIN CLIENTS RUNS
"""

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

plugin, clients, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "contrib", "slurm", "cluster")
events_ms, slurm_ms = [], []

for run in range(runs):
    d = tempfile.mkdtemp(prefix="exitpolicy-nodeloss-", dir="/tmp")
    os.chmod(d, 0o755)
    work = tempfile.mkdtemp(prefix="exitpolicy-nodeloss-work-", dir="/tmp")
    os.chmod(work, 0o1777)
    env = {**os.environ, "EXITPOLICY_CLUSTER_DIR": d,
           "EXITPOLICY_CLUSTER_SLURM_CONF_EXTRA": "SlurmdTimeout=5\nMessageTimeout=3"}
    try:
        subprocess.run([script, "up", "4"], env=env, check=True, capture_output=True)
        with open(os.path.join(d, "etc", "plugstack.d", "exitpolicy.conf"), "w") as f:
            f.write(f"required {plugin} fanout=2 grace_ms=3000\n")
        p = subprocess.Popen([script, "exec", "srun", "--no-kill", "--exit-recoverable", "--mpi=none", "-N4", "-n8",
                              os.path.join(clients, "ep_events"), "--victim", "5", "--hang", "--expect", "3",
                              "--timeout", "60"], env=env, cwd=work, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err, waiting, slurm_seen = [], [], threading.Event(), []

        def read_out():
            for line in p.stdout:
                out.append(line)
                if line.startswith("victim rank=5 "):
                    waiting.set()

        def read_err():
            for line in p.stderr:
                err.append(line)
                if "Node failure on node3" in line and not slurm_seen:
                    slurm_seen.append(time.time_ns() // 1000)

        readers = [threading.Thread(target=read_out), threading.Thread(target=read_err)]
        for r in readers:
            r.start()
        if not waiting.wait(60):
            p.kill()
            sys.exit("the step never got going:\n" + "".join(out + err))
        crashed = subprocess.run([script, "crash", "node3"], env=env, check=True, capture_output=True, text=True)
        killed_us = int(crashed.stdout.split(" at ")[1].split()[0])
        p.wait(120)
        for r in readers:
            r.join()
        downs = [int(l.rsplit("t_us=", 1)[1]) for l in out if l.startswith("event ") and "status=-231 " in l]
        if len(downs) != 6:
            sys.exit(f"run {run}: {len(downs)} of 6 survivors heard of the lost node:\n" + "".join(out + err))
        events_ms += [(t - killed_us) / 1000 for t in downs]
        if slurm_seen:
            slurm_ms.append((slurm_seen[0] - killed_us) / 1000)
    finally:
        subprocess.run([script, "down"], env=env, capture_output=True)
        subprocess.run(["rm", "-rf", d, work])

print(f"node3 crashed under srun --no-kill -N4 -n8, {runs} runs (SlurmdTimeout=5)")
print(f"  PMIX_EVENT_NODE_DOWN in the survivors' handlers after the kill: p50 {statistics.median(events_ms):.1f} ms, "
      f"max {max(events_ms):.1f} ms ({len(events_ms)} deliveries)")
if slurm_ms:
    print(f"  srun's own 'Node failure on node3' after the kill: median {statistics.median(slurm_ms) / 1000:.1f} s")
