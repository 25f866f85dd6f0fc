#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""pmi_bench.py - exitpolicy's PMI-1 service against Slurm's mpi/pmi2, on the real cluster.

An MPICH program (tests/clients/ep_mpi_ring built against Debian's MPICH as
ep_mpich_ring: MPI_Init, Allreduce, a ring Sendrecv across nodes,
MPI_Finalize) with -N4 -n8, under exitpolicy's per-node PMI service
(--mpi=none) and under Slurm's mpi/pmi2 (--mpi=pmi2, which MPICH's PMI-1
client speaks to as well), in paired, alternating runs; the median of the
per-pair ratios. The site default fan-out (32) unless FANOUT says otherwise.

Run inside the cluster's namespace (bench/run.sh pmi does):
    contrib/slurm/cluster exec /usr/bin/python3 bench/pmi_bench.py PLUGIN CLIENTS PLUGSTACK_D PAIRS
"""

import os
import statistics
import subprocess
import sys
import time

plugin, clients, plugstack_d, pairs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
fanout = int(os.environ.get("FANOUT", "32"))
with open(os.path.join(plugstack_d, "exitpolicy.conf"), "w") as f:
    f.write(f"optional {plugin} fanout={fanout}\n")
ring = os.path.join(clients, "ep_mpich_ring")
if not os.access(ring, os.X_OK):
    sys.exit(f"{ring} is missing: it is built where pkg-config finds MPICH (libmpich-dev)")


def run(mpi):
    t0 = time.perf_counter()
    p = subprocess.run(["srun", f"--mpi={mpi}", "-N4", "-n8", ring, "--timeout", "60"], capture_output=True,
                       text=True)
    elapsed = time.perf_counter() - t0
    if p.returncode != 0 or p.stdout.count("mpi ok") != 8:
        sys.exit(f"--mpi={mpi} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return elapsed


run("none"), run("pmi2")  # warm up
ours, theirs = [], []
for i in range(pairs):
    for mpi in (["none", "pmi2"] if i % 2 == 0 else ["pmi2", "none"]):
        (ours if mpi == "none" else theirs).append(run(mpi))
ratios = [a / b for a, b in zip(ours, theirs)]
print(f"MPICH ring, srun -N4 -n8, {pairs} alternating pairs (exitpolicy's fanout={fanout})")
print(f"  exitpolicy (--mpi=none)  median {statistics.median(ours) * 1000:7.1f} ms")
print(f"  Slurm mpi/pmi2           median {statistics.median(theirs) * 1000:7.1f} ms")
print(f"  median ratio exitpolicy / mpi/pmi2: {statistics.median(ratios):.3f}")
