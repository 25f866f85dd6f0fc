# SPDX-License-Identifier: Apache-2.0
"""No outcome lost while any path to srun lives, on the real 4-node cluster
(docs/pmix-service.md, "Outcomes").

At fan-out 2 node1's daemon relays for node3 and node4. Every holder of an
outcome (slurmstepd, each daemon on the way) keeps it until srun's front end
has it: a relay that dies with outcomes on their way loses none of them,
and the outcomes its own node's slurmstepd gave it go the direct way.
"""

import json
import os
import random
import signal
import threading
import time

import pytest

from test_pmix import client, node_daemon, pmix  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

RUNS = 20
# Every task runs a PMIx client first (the daemons run once a task uses
# PMIx), sleeps until one wall-clock moment, then exits with a code of its
# own: a burst of outcomes through the tree.
TASK = ("import os, subprocess, sys, time; subprocess.run([sys.argv[2]], stdout=subprocess.DEVNULL); "
        "time.sleep(max(0.0, float(sys.argv[1]) - time.time())); "
        "os._exit(int(os.environ['SLURM_PROCID']) % 5 + 1)")


def expected(rank):
    return rank % 5 + 1


@pytest.mark.own_code  # the overlay's acknowledgements: a race hunt in the project's own protocol
def test_a_relay_killed_in_a_burst_of_outcomes_loses_none(cluster, workdir, pmix):
    """20 steps in a row: 16 tasks on 4 nodes exit at one moment, and
    node1's daemon is SIGKILLed within 30 ms of it, as the outcomes of
    node3 and node4 pass through it. Every rank keeps its real code, none
    is lost. With acknowledgements hop by hop, a rank of a live node came
    back lost (lost_code) now and then."""
    rng = random.Random(24)
    for run in range(RUNS):
        report = workdir / f"delivery-{run}.json"
        at = time.time() + 3.0
        # 4 tasks on each node of 2 CPUs: --overcommit.
        # Recoverable: the tasks were PMIx clients, and their ends are no
        # teardown's.
        proc = cluster.popen("srun", "-N4", "-n16", "--overcommit", "--exit-policy=max", "--exit-recoverable",
                             f"--exit-report-json={report}",
                             "/usr/bin/python3", "-c", TASK, f"{at:.6f}", client("ep_hello"), cwd=workdir)
        killed = {}

        def kill_the_relay():
            # A loaded machine may start the step late: a kill after the
            # burst loses nothing either, and the run still counts.
            pid = node_daemon("node1", timeout=60)
            time.sleep(max(0.0, at + rng.uniform(0.0, 0.03) - time.time()))
            os.kill(pid, signal.SIGKILL)
            killed["pid"] = pid

        killer = threading.Thread(target=kill_the_relay)
        killer.start()
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            killer.join(15)
        assert killed, f"run {run}: node1's daemon was never killed\n{err}"
        doc = json.loads(report.read_text())
        tasks = {t["rank"]: t for t in doc["tasks"]}
        assert sorted(tasks) == list(range(16)), f"run {run}\n{err}"
        for rank, t in tasks.items():
            assert t["state"] != "lost", f"run {run}: rank {rank} lost\n{err}"
            assert (t["state"], t["exit_code"]) == ("exited", expected(rank)), f"run {run}: rank {rank}: {t}\n{err}"
        assert proc.returncode == 5, f"run {run}\n{err}"  # max: the highest code


def test_what_srun_has_is_never_sent_twice(cluster, workdir, pmix):
    """The daemons live: each tells its slurmstepd, on its way out, which
    outcomes srun has, and none goes the direct way again (the node's log
    would say so)."""
    pmix.enable("fanout=2", "grace_ms=3000", "debug=2")  # the plugin's verbose lines too
    rc, out, err = cluster.exec("srun", "-N4", "-n8", "--exit-policy=main-rank", "sh", "-c",
                                f'{client("ep_hello")} >/dev/null; echo "job=$SLURM_JOB_ID"; exit 3', cwd=workdir,
                                timeout=60)
    assert rc == 3, err
    job = out.split("job=")[1].split()[0]
    said = []
    for k in range(1, 5):
        log = (cluster.dir / "log" / f"slurmd.node{k}.log").read_text(errors="replace")
        said += [l for l in log.splitlines() if f"[{job}." in l and "exitpolicy" in l]
    assert said, "no exitpolicy line for the step in the nodes' logs"
    assert [l for l in said if "go the direct way" in l or "cannot deliver" in l or "cannot send" in l] == [], said
