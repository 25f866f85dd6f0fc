# SPDX-License-Identifier: Apache-2.0
"""A step over 16 nodes, four times the cluster the other tests use: with
fanout=2 the overlay tree is four levels deep, so fences, events and
outcomes pass relays of relays, and the front end serves 16 daemons and 16
slurmstepds. Functional checks only: bench/ has the figures."""

import pytest

from conftest import Plugstack
from test_pmix import client, lines, parse_events, srun

pytestmark = pytest.mark.integration

NODES = 16
TASKS = 2 * NODES
STEP = ["--mpi=none", f"-N{NODES}", f"-n{TASKS}"]


@pytest.fixture
def sixteen(new_cluster, exitpolicy_so):
    cluster = new_cluster(NODES)
    proc = cluster.up()
    assert proc.returncode == 0, f"cluster up failed:\n{proc.stdout}\n{proc.stderr}"
    Plugstack(cluster, exitpolicy_so).enable("fanout=2", "grace_ms=3000")
    return cluster


def test_sixteen_nodes_fence_get_and_hear_of_a_death(sixteen, workdir):
    # A fence that collects every rank's value, and every rank reads all 32.
    rc, out, err = srun(sixteen, workdir, *STEP, client("ep_fence"), "--data")
    assert rc == 0, err
    assert len(lines(out, "fence ok ")) == TASKS, out + err

    # The direct modex: each rank asks for every other's value, most of them
    # on another node, routed through the tree.
    rc, out, err = srun(sixteen, workdir, *STEP, client("ep_putget"), "--mode=dmodex")
    assert rc == 0, err
    ok = lines(out, "putget ok ")
    assert len(ok) == TASKS and all(f"peers={TASKS - 1} mode=dmodex" in l for l in ok), out + err

    # Run-through: the last rank, on the deepest leaf, exits 6; the 31
    # survivors on every node hear of it, then fence among themselves.
    victim = TASKS - 1
    rc, out, err = srun(sixteen, workdir, *STEP, "--exit-recoverable", "--exit-policy=lowest-rank",
                        client("ep_events"), "--victim", str(victim), "--exit", "6", "--expect", "3",
                        "--timeout", "30", "--fence-survivors")
    assert rc == 6, err
    events = parse_events(out)
    for rank in range(victim):
        mine = sorted(e["status"] for e in events if e["rank"] == str(rank))
        assert mine == sorted(["-200", "-201", "-7"]), f"rank {rank}: {mine}\n{err}"
        assert f"survivor fence rank={rank} n={victim}" in out, out + err
        assert f"survivor done rank={rank} events=3" in out, out + err
    report = lines(err, "exitpolicy:")
    assert f"exitpolicy:   rank {victim} on node{NODES}: exited with code 6 without finalizing" in report, err
