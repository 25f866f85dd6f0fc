# SPDX-License-Identifier: Apache-2.0
"""A step leaves nothing behind, however it ends (docs/pmix-service.md,
"What a step leaves"): on the real 4-node cluster, after Open MPI steps that
succeed, fail, are torn down or abort, and after real PMIx clients
(tests/clients/ep_cleanup) asked the node's server to remove a directory of
theirs when they are gone (PMIX_REGISTER_CLEANUP_DIR, as Open MPI 4.1 does
for its session directory), whether the step ends normally, a node daemon is
told to stop (SIGTERM), srun goes away, or a parent daemon dies.

The daemons stop and slurmstepd removes the step's directories after srun
has returned: every check waits (bounded) for the step's daemons to end.
"""

import os
import pathlib
import signal
import threading
import time

import pytest

from conftest import Plugstack
from test_pmix import N4N8, client, daemons, lines, node_daemon, srun, srun_mpi

pytestmark = pytest.mark.integration

# A bound against a hang, not a figure: the daemons stop within seconds of
# the step's end (bench/run.sh soak has the figures).
SETTLE = 15


@pytest.fixture
def pmix(plugstack):
    plugstack.enable("fanout=2", "grace_ms=3000")
    return plugstack


def snapshot():
    """What a step could leave: Open MPI's and OpenPMIx's files in /tmp, the
    plugin's step directories, /dev/shm."""
    found = set()
    for pattern in ("ompi.*", "pmix*", "exitpolicy.*.*.*", "spmix*"):
        for top in pathlib.Path("/tmp").glob(pattern):
            found.add(str(top))
            # The step's end removes these while we look: os.walk skips what
            # went away under it, where Path.rglob raises.
            for parent, dirs, files in os.walk(top):
                found |= {os.path.join(parent, name) for name in dirs + files}
    found |= {str(p) for p in pathlib.Path("/dev/shm").iterdir()}
    return found


def settle(cluster, before):
    """Waits until the cluster's node daemons are gone (the step's end);
    what is new since `before`."""
    def ours():
        inside = set(cluster.pids())
        return [pid for pid in daemons() if pid in inside]

    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        if not ours() and not snapshot() - before:
            return []
        time.sleep(0.1)
    return sorted(snapshot() - before) + [f"exitpolicy-pmixd {pid}" for pid in ours()]


# --- Open MPI: its session directory, whatever happened -----------------------------------

@pytest.mark.parametrize("how, code", [(None, 0), ("5:segv", 139), ("5:exit:3", 3), ("3:abort:7", 7)],
                         ids=["success", "segfault-teardown", "exit-3", "abort-7"])
def test_an_open_mpi_step_leaves_nothing(cluster, workdir, pmix, how, code):
    """Open MPI puts its session directory (and OpenPMIx 5 its segments) in
    the namespace's directory the server gives it (PMIX_NSDIR), which goes
    with the step; before, a failed step left /tmp/ompi.<node>.<uid>/jf.N on
    every node."""
    before = snapshot()
    if how is None:
        rc, out, err = srun_mpi(cluster, workdir, *N4N8, "--exit-policy=main-rank", client("ep_mpi_ring"),
                                "--timeout", "60")
    else:
        rc, out, err = srun_mpi(cluster, workdir, *N4N8, "--exit-policy=main-rank", client("ep_mpi_fail"),
                                "--fail", how, "--timeout", "60")
    assert rc == code, err
    assert settle(cluster, before) == [], err


def test_an_ordinary_users_failed_open_mpi_step_leaves_nothing(cluster, workdir, pmix):
    before = snapshot()
    rc, out, err = srun_mpi(cluster, workdir, *N4N8, "--exit-policy=main-rank", client("ep_mpi_fail"),
                            "--fail", "5:segv", "--timeout", "60", user=cluster.NOBODY)
    assert rc == 139, err
    assert settle(cluster, before) == [], err


# --- what clients asked to have removed ---------------------------------------------------

def client_dir(workdir, name, user=None):
    d = workdir / name
    d.mkdir()
    if user is not None:
        os.chown(d, user, user)
    os.chmod(d, 0o700)
    return d


@pytest.mark.parametrize("scope", ["proc", "job"])
@pytest.mark.parametrize("then, code", [("finalize", 0), ("exit:3", 3), ("segv", 139)])
def test_what_a_client_asked_to_have_removed_is_removed(cluster, workdir, pmix, scope, then, code):
    d = client_dir(workdir, f"cleanup-{scope}-{then.replace(':', '')}", user=cluster.NOBODY)
    before = snapshot()
    rc, out, err = srun(cluster, workdir, *N4N8, "--exit-policy=main-rank", client("ep_cleanup"),
                        "--dir", d, "--scope", scope, "--then", then, "--timeout", "30", user=cluster.NOBODY)
    assert rc == code, err
    assert len(lines(out, "registered ")) == 8, out + err
    assert settle(cluster, before) == [], err
    assert sorted(os.listdir(d)) == [], out + err


class Step:
    """An ep_cleanup step whose ranks wait to be killed, read as it runs."""

    def __init__(self, cluster, workdir, d, *srun_args, timeout="10"):
        self.proc = cluster.popen("srun", *N4N8, *srun_args, client("ep_cleanup"), "--dir", d, "--scope", "job",
                                  "--then", "wait", "--timeout", timeout, cwd=workdir)
        self.out = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.out.append(line)
            if sum(l.startswith("ready ") for l in self.out) == 8:
                self.ready.set()

    def wait_ready(self):
        assert self.ready.wait(30), "".join(self.out)

    def finish(self):
        err = self.proc.stderr.read()
        self.proc.wait(60)
        self.reader.join(10)
        return self.proc.returncode, "".join(self.out), err


def gone_within(paths, seconds):
    deadline = time.monotonic() + seconds
    while any(p.exists() for p in paths) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [str(p) for p in paths if p.exists()]


def test_a_daemon_told_to_stop_cleans_up_first(cluster, workdir, pmix):
    """SIGTERM to node1's daemon mid-step: it stops as at the step's end,
    its clients deregistered, so what they asked to have removed is removed
    now, while the step still runs; before, SIGTERM ended it on the spot."""
    d = client_dir(workdir, "cleanup-sigterm")
    before = snapshot()
    step = Step(cluster, workdir, d)
    step.wait_ready()
    os.kill(node_daemon("node1"), signal.SIGTERM)
    assert gone_within([d / "rank.0", d / "rank.1"], 5) == [], os.listdir(d)
    assert step.proc.poll() is None, "the step ended with the daemon"
    rc, out, err = step.finish()
    assert settle(cluster, before) == [], err
    assert os.listdir(d) == [], out + err


def test_when_srun_goes_away_the_daemons_clean_up(cluster, workdir, pmix):
    """srun killed (SIGKILL) mid-step: the daemons lose the front end and
    stop at once, their clients deregistered, so what the clients asked to
    have removed is removed while Slurm still runs the tasks (they run on
    until they end or are cancelled); when the job is cancelled nothing is
    left on any node."""
    d = client_dir(workdir, "cleanup-srun-killed")
    before = snapshot()
    step = Step(cluster, workdir, d, timeout="60")
    step.wait_ready()
    inside = cluster.pids()
    sruns = [pid for pid in inside if open(f"/proc/{pid}/comm").read().strip() == "srun"]
    assert sruns
    for pid in sruns:
        os.kill(pid, signal.SIGKILL)
    step.finish()
    assert gone_within([d / f"rank.{r}" for r in range(8)], 10) == [], os.listdir(d)
    rc, jobs, err = cluster.exec("squeue", "-h", "-o", "%i")
    assert rc == 0, err
    for job in jobs.split():
        cluster.exec("scancel", job)
    assert settle(cluster, before) == []


def test_a_dead_parent_daemon_leaves_only_what_it_held(cluster, workdir, pmix):
    """node1's daemon (the parent of node3 and node4 at fan-out 2) killed
    mid-step: the others clean up at the step's end; node1's step directory
    is removed by slurmstepd (root) all the same. What node1's own clients
    asked their dead server to remove, outside any directory of the step,
    nothing can remove."""
    d = client_dir(workdir, "cleanup-parent-killed")
    before = snapshot()
    step = Step(cluster, workdir, d, "--exit-recoverable", timeout="6")
    step.wait_ready()
    os.kill(node_daemon("node1"), signal.SIGKILL)
    rc, out, err = step.finish()
    assert settle(cluster, before) == [], err
    assert sorted(os.listdir(d)) == ["rank.0", "rank.1"], out + err


def task_of(cluster, node):
    """A task of the running step on `node` (its environment says where)."""
    for pid in cluster.pids():
        try:
            if open(f"/proc/{pid}/comm").read().strip() != "ep_cleanup":
                continue
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"SLURMD_NODENAME={node}".encode() in env:
            return pid
    return None


def test_a_daemon_never_outlives_its_slurmstepd(new_cluster, exitpolicy_so, workdir):
    """node2's slurmstepd killed mid-step (SIGKILL, as the OOM killer or a
    crash would): nobody is left there to stop node2's daemon at the step's
    end, so it stops as soon as slurmstepd's control link closes; before, it
    ran on, a process of the user that root no longer watched, until srun
    went away. A cluster of its own: Slurm drains a node whose slurmstepd
    died."""
    cluster = new_cluster(4)
    up = cluster.up()
    assert up.returncode == 0, up.stdout + up.stderr
    Plugstack(cluster, exitpolicy_so).enable("fanout=2", "grace_ms=3000")
    d = client_dir(workdir, "stepd-killed")
    step = Step(cluster, workdir, d, "--exit-recoverable", timeout="20")
    step.wait_ready()
    daemon = node_daemon("node2")
    task = task_of(cluster, "node2")
    assert task, "no task of the step on node2"
    stepd = int(open(f"/proc/{task}/stat").read().rsplit(")", 1)[1].split()[1])
    assert open(f"/proc/{stepd}/comm").read().strip() == "slurmstepd"
    os.kill(stepd, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while daemon in daemons() and time.monotonic() < deadline:
        time.sleep(0.1)
    still = daemon in daemons()
    rc, jobs, err = cluster.exec("squeue", "-h", "-o", "%i")
    for job in jobs.split():
        cluster.exec("scancel", job)
    step.finish()
    assert not still, "node2's daemon outlived its slurmstepd by 10 s"
