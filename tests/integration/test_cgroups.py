# SPDX-License-Identifier: Apache-2.0
"""The plugin under the cgroup setups sites run: proctrack/cgroup,
task/cgroup,task/affinity, ConstrainCores and ConstrainRAMSpace, on
cgroup/v1 and cgroup/v2 (contrib/slurm/cluster, EXITPOLICY_CLUSTER_CGROUP).

What is at stake: under cgroup/v2, Slurm waits at a step's end for every
process of the step's cgroup, slurmstepd's own part (job_N/step_N/slurm,
where the node daemon lives) included, but signals only the tasks' part
(step_N/user): a node daemon still alive then would hold the step until
UnkillableStepTimeout and have the node drained ("Kill task failed"). Each
step here runs with UnkillableStepTimeout=20, and must end long before it,
leave no node drained and no process of ours behind, and still bring srun
every rank's outcome. Every job has an extern step (PrologFlags=Contain),
which runs no node daemon. The figures (plugin against none, paired) are
`bash bench/run.sh stepend`'s.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import time

import pytest

from conftest import Cluster, Plugstack
from test_pmix import OMPI_ENV, WAKE, client, daemon_arg, daemons, running, standbys

pytestmark = pytest.mark.integration

# EXITPOLICY_CGROUP_UNKILLABLE: a longer one where the machine is slower,
# such as the emulated guest of test_cgroup_v2_host.py (the bounds below
# keep their meaning: a held step takes it and more).
UNKILLABLE = int(os.environ.get("EXITPOLICY_CGROUP_UNKILLABLE", "20"))
# A step that is not held ends in a few seconds on the loaded machine of
# the full run (one whose node daemons hang, in the time slurmstepd waits
# for them: about 5 s); one that is held takes UNKILLABLE and more. A
# functional bound, not a speed goal (bench/run.sh stepend has the figures).
NOT_HELD = UNKILLABLE * 3 / 4
# PrologFlags=Contain, as sites with pam_slurm_adopt run: every job has an
# extern step on each node, which must get no node daemon.
SLURM_CONF = f"UnkillableStepTimeout={UNKILLABLE}\nKillWait=2\nPrologFlags=Contain"


def plugin_dir():
    """Where the cluster's Slurm keeps its plugins."""
    if Cluster.SLURM_PREFIX:
        return pathlib.Path(Cluster.SLURM_PREFIX) / "lib" / "slurm"
    return pathlib.Path("/usr/lib/x86_64-linux-gnu/slurm-wlm")


# SignalChildrenProcesses (cgroup.conf): scancel's signals reach every
# process of the step, the daemon too. Slurm 22.05 knows no such key; the
# first release seen with it here is 25.11.
SIGNAL_CHILDREN_FROM = (25, 11)


def setups():
    """(cgroup version, SignalChildrenProcesses) pairs this Slurm can run:
    a version whose plugin it has."""
    out = []
    for version in ("v1", "v2"):
        for signal_children in (False, True):
            marks = []
            if not (plugin_dir() / f"cgroup_{version}.so").exists():
                marks.append(pytest.mark.skip(reason=f"this Slurm has no cgroup_{version}.so in {plugin_dir()}"))
            elif signal_children and Cluster.slurm_release() < SIGNAL_CHILDREN_FROM:
                marks.append(pytest.mark.skip(reason=f"Slurm {'.'.join(map(str, Cluster.slurm_release()))} has no "
                                                     "SignalChildrenProcesses"))
            out.append(pytest.param((version, signal_children), marks=marks,
                                    id=f"{version}{'-signal-children' if signal_children else ''}"))
    return out


@pytest.fixture(scope="module", params=setups())
def cg(request, exitpolicy_so, tmp_path_factory):
    """A 2-node cluster of the setup, exitpolicy.so loaded as sites load it
    (pmix=auto: every step has a standby on each node)."""
    version, signal_children = request.param
    d = tmp_path_factory.mktemp(f"cgroup-{version}-{int(signal_children)}")
    os.chmod(d, 0o755)
    c = Cluster(d, nodes=2, owned=True, slurm_conf_extra=SLURM_CONF, cgroup=version,
                cgroup_conf_extra="SignalChildrenProcesses=yes" if signal_children else None)
    proc = c.up()
    try:
        assert proc.returncode == 0, f"cluster up ({version}) failed:\n{proc.stdout}\n{proc.stderr}"
        c.plugstack = Plugstack(c, exitpolicy_so)
        c.plugstack.enable("grace_ms=3000")
        c.version = version
        c.signal_children = signal_children
        yield c
    finally:
        down = c.down()
        assert down.returncode == 0, f"cluster down ({version}) failed:\n{down.stdout}\n{down.stderr}"


@pytest.fixture
def workdir(tmp_path):
    os.chmod(tmp_path, 0o1777)
    return tmp_path


def drained(c):
    """sinfo -R's lines: the nodes drained or down, and why."""
    rc, out, err = c.exec("sinfo", "-h", "-R", "-o", "%N %T %E")
    assert rc == 0, err
    return [line for line in out.splitlines() if line.strip()]


def held_steps(c):
    """What slurmd logged of steps it had to give up on."""
    said = []
    for log in (c.dir / "log").glob("slurmd.node*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if "STEPD TERMINATED" in line or "Kill task failed" in line or "giving up after" in line:
                said.append(f"{log.name}: {line}")
    return said


def ours_left(c):
    """Processes of ours still running in the cluster's namespaces."""
    mine = set(c.pids())
    return sorted(p for p in daemons() + standbys() if p in mine)


def node_daemons(c):
    """The cluster's node daemons (not their event anchors, which run the
    same program)."""
    mine = set(c.pids())
    return [p for p in daemons() if p in mine and daemon_arg(p, b"--hostname") is not None]


def timed_srun(c, workdir, *args, env=None, timeout=90):
    t0 = time.monotonic()
    rc, out, err = c.exec("srun", *args, cwd=workdir, env=env, timeout=timeout)
    return rc, out, err, time.monotonic() - t0


def assert_not_held(c, took, err):
    """The step ended long before UnkillableStepTimeout, and left the
    nodes as assert_nodes_clean says."""
    print(f"the step took {took:.2f} s")
    assert took < NOT_HELD, f"the step took {took:.1f} s (UnkillableStepTimeout={UNKILLABLE}):\n{err}"
    assert_nodes_clean(c)


def assert_nodes_clean(c):
    """No node is drained, slurmd gave up on no step, nothing of ours is
    left."""
    assert drained(c) == [], f"nodes drained: {drained(c)}\n{held_steps(c)}"
    assert held_steps(c) == []
    deadline = time.monotonic() + 5
    while ours_left(c) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ours_left(c) == [], "exitpolicy's processes left after the step"


def wait_for_files(workdir, pattern, count, timeout=30):
    """Whether `count` files matching `pattern` came to `workdir` in time:
    what the step's tasks leave as they come to a point."""
    deadline = time.monotonic() + timeout
    while len(list(workdir.glob(pattern))) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(list(workdir.glob(pattern))) >= count


def report(workdir, name):
    doc = json.loads((workdir / name).read_text())
    return {t["rank"]: t for t in doc["tasks"]}


def test_a_trivial_step_ends_as_without_the_plugin(cg, workdir):
    rc, out, err, took = timed_srun(cg, workdir, "-N2", "-n4", "--exit-policy=main-rank",
                                    "--exit-report-json=trivial.json", "true")
    assert rc == 0, err
    assert_not_held(cg, took, err)
    assert sorted(report(workdir, "trivial.json")) == [0, 1, 2, 3]


# A step whose rank 1 segfaults: its policy, srun's arguments and their
# environment (the PMIx step is an Open MPI program's).
SEGFAULTS = {
    "shell": ("first-failure",
              lambda: (["bash", "-c", 'if [ "$SLURM_PROCID" = 1 ]; then kill -SEGV $$; fi; sleep 1'], None)),
    "pmix": ("main-rank-check",
             lambda: (["--mpi=none", client("ep_mpi_fail"), "--fail", "1:segv", "--timeout", "60"], OMPI_ENV)),
}


@pytest.mark.parametrize("kind", SEGFAULTS)
def test_a_step_whose_rank_segfaults(cg, workdir, kind):
    policy, step = SEGFAULTS[kind]
    args, env = step()
    rc, out, err, took = timed_srun(cg, workdir, "-N2", "-n4", f"--exit-policy={policy}",
                                    f"--exit-report-json={kind}.json", *args, env=env)
    assert rc == 139, err
    assert_not_held(cg, took, err)
    tasks = report(workdir, f"{kind}.json")
    assert sorted(tasks) == [0, 1, 2, 3]
    assert tasks[1]["signal"] == signal.SIGSEGV


def test_a_successful_pmix_step(cg, workdir):
    rc, out, err, took = timed_srun(cg, workdir, "--mpi=none", "-N2", "-n4", "--exit-policy=main-rank",
                                    "--exit-report-json=ok.json", "sh", "-c",
                                    '/usr/bin/python3 -c "$0"', WAKE)
    assert rc == 0, err
    assert_not_held(cg, took, err)
    assert sorted(report(workdir, "ok.json")) == [0, 1, 2, 3]


def test_srun_kill_on_bad_exit(cg, workdir):
    script = 'if [ "$SLURM_PROCID" = 3 ]; then exit 3; fi; sleep 30'
    rc, out, err, took = timed_srun(cg, workdir, "-K1", "-N2", "-n4", "--exit-policy=first-failure",
                                    "--exit-report-json=k.json", "bash", "-c", script)
    assert rc == 3, err
    assert_not_held(cg, took, err)
    assert sorted(report(workdir, "k.json")) == [0, 1, 2, 3]


def test_scancel(cg, workdir):
    step = cg.popen("srun", "-N2", "-n4", "--exit-policy=main-rank", "--exit-report-json=cancel.json", "sh", "-c",
                    '/usr/bin/python3 -c "$0" && touch started.$SLURM_PROCID && sleep 60', WAKE, cwd=workdir)
    try:
        assert wait_for_files(workdir, "started.*", 4), "the step's tasks never all started"
        t0 = time.monotonic()
        rc, out, err = cg.exec("scancel", "--user=root")
        assert rc == 0, err
        out, err = step.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if step.poll() is None:
            step.kill()
            step.communicate()
    assert_not_held(cg, took, err)
    # srun, cancelled, may end before its front end had every rank: what
    # it wrote names only ranks it had.
    if (workdir / "cancel.json").exists():
        assert set(report(workdir, "cancel.json")) <= {0, 1, 2, 3}


def test_a_step_ended_by_its_time_limit(cg, workdir):
    """A PMIx step whose job runs out of time (--time=1): slurmctld ends it
    at its next check of time limits (every 30 s), and the step's end is
    not held past that. Run without SignalChildrenProcesses only: a minute
    or more a setup."""
    if cg.signal_children:
        pytest.skip("the same end as without SignalChildrenProcesses; a minute a run")
    t0 = time.monotonic()
    rc, out, err = cg.exec("srun", "--time=1", "--mpi=none", "-N2", "-n4", "--exit-policy=main-rank",
                           "--exit-report-json=time.json", "sh", "-c",
                           '/usr/bin/python3 -c "$0" && exec sleep 300', WAKE, cwd=workdir, timeout=200)
    took = time.monotonic() - t0
    print(f"the step took {took:.1f} s with a time limit of 60 s")
    assert rc != 0, err
    assert "TIME LIMIT" in err, err
    # At most a check period (30 s) after its minute, and not held.
    assert took < 60 + 30 + NOT_HELD, f"the step took {took:.1f} s:\n{err}"
    assert_nodes_clean(cg)
    if (workdir / "time.json").exists():
        assert set(report(workdir, "time.json")) <= {0, 1, 2, 3}


def test_a_node_daemon_that_hangs_never_holds_the_step(cg, workdir):
    """Every node daemon stopped (SIGSTOP) while its tasks run: slurmstepd
    waits for it a bounded time at the node's last task, kills it, and
    sends what it held the direct way."""
    step = cg.popen("srun", "--mpi=none", "-N2", "-n4", "--exit-policy=main-rank", "--exit-report-json=hang.json",
                    "sh", "-c", '/usr/bin/python3 -c "$0" && echo $SLURM_JOB_ID > woke.$SLURM_PROCID && sleep 3',
                    WAKE, cwd=workdir)
    try:
        assert wait_for_files(workdir, "woke.*", 4), "the step's daemons never all started"
        # This step's: an earlier step's daemon may still be on its way out.
        deadline = time.monotonic() + 10
        while not (job := (workdir / "woke.0").read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)  # made, not yet written
        stopped = [p for p in node_daemons(cg) if daemon_arg(p, b"--job") == job]
        assert len(stopped) == 2, f"one daemon a node, got {stopped} of job {job} (all: {node_daemons(cg)})"
        t0 = time.monotonic()
        for p in stopped:
            os.kill(p, signal.SIGSTOP)
        out, err = step.communicate(timeout=90)
        took = time.monotonic() - t0
    finally:
        if step.poll() is None:
            step.kill()
            step.communicate()
    assert step.returncode == 0, err
    assert_not_held(cg, took, err)
    assert sorted(report(workdir, "hang.json")) == [0, 1, 2, 3]


# A task that wants 300 MiB, every page written, where the step may have 50.
HUNGRY = "b = b'x' * (300 << 20); print(len(b))"


def memory_constrained(c):
    """Whether Slurm constrains the step's memory here (ConstrainRAMSpace):
    always on cgroup/v1; on cgroup/v2 only where the nodes' cgroups have the
    memory controller, which a hybrid host's cgroup v2 has not."""
    conf = (c.dir / "etc" / "cgroup.conf").read_text()
    return "ConstrainRAMSpace=yes" in conf


@pytest.mark.parametrize("kill_on_bad_exit", [False, True], ids=["run-on", "srun-K"])
def test_the_rank_the_oom_killer_ends_is_named(cg, workdir, kill_on_bad_exit):
    """Rank 1 allocates past --mem=50M (ConstrainRAMSpace): the kernel's
    OOM killer ends it. The report and the JSON name it, and only it; its
    code is 137. Under srun -K1 the main rank is SIGTERMed after it, which
    is collateral: main-rank gives 137, not the teardown's 143 (and Slurm's
    own srun says 1 for its step-wide OOM label)."""
    if cg.signal_children:
        pytest.skip("SignalChildrenProcesses changes nothing of an OOM kill")
    if not memory_constrained(cg):
        pytest.skip(f"{cg.version} here has no memory controller for the nodes' cgroups (ConstrainRAMSpace=no)")
    script = (f'if [ "$SLURM_PROCID" = 1 ]; then exec /usr/bin/python3 -c "{HUNGRY}"; fi; '
              + ("exec sleep 30" if kill_on_bad_exit else "sleep 2"))
    policy = "main-rank" if kill_on_bad_exit else "first-failure"
    args = ["-K1"] if kill_on_bad_exit else []
    rc, out, err, took = timed_srun(cg, workdir, *args, "--mem=50M", "-N2", "-n4", f"--exit-policy={policy}",
                                    "--exit-report-json=oom.json", "sh", "-c", script)
    print(err)
    assert rc == 137, f"srun {rc}:\n{err}"
    # Named with the memory limit Slurm set it (the step's --mem).
    assert re.search(r"rank 1 on node\d+, killed by the OOM killer \(SIGKILL\), memory limit 50M", err), err
    # What Slurm's own srun returns for it (its step-wide OOM label).
    assert "exitpolicy: Slurm's native exit code would be 1\n" in err, err
    assert json.loads((workdir / "oom.json").read_text())["native_exit_code"] == 1
    assert_not_held(cg, took, err)
    tasks = report(workdir, "oom.json")
    assert sorted(tasks) == [0, 1, 2, 3]
    assert [r for r, t in tasks.items() if t["oom_killed"]] == [1], tasks
    assert tasks[1]["code"] == 137 and tasks[1]["signal_name"] == "SIGKILL"
    assert tasks[1]["memory_limit"] == 50 << 20, tasks[1]
    assert all(tasks[r]["memory_limit"] is None for r in (0, 2, 3)), tasks
    if kill_on_bad_exit:
        # The others ended by srun -K's teardown, after it: collateral.
        assert all(tasks[r]["collateral"] for r in (0, 2, 3) if not tasks[r]["succeeded"]), tasks
    else:
        assert all(tasks[r]["succeeded"] for r in (0, 2, 3)), tasks


@pytest.mark.parametrize("how", ["srun-K", "KillOnBadExit"])
def test_an_oom_killed_main_rank_gives_137_under_main_rank(cg, workdir, how):
    """The main rank 0 allocates past --mem=50M; srun -K1, or the site's
    KillOnBadExit=1, then ends the others with SIGTERM. main-rank gives
    the OOM kill's 137, not the teardown's 143, and the others are
    collateral."""
    if cg.signal_children:
        pytest.skip("SignalChildrenProcesses changes nothing of an OOM kill")
    if not memory_constrained(cg):
        pytest.skip(f"{cg.version} here has no memory controller for the nodes' cgroups (ConstrainRAMSpace=no)")
    script = f'if [ "$SLURM_PROCID" = 0 ]; then exec /usr/bin/python3 -c "{HUNGRY}"; fi; exec sleep 30'
    srun = ["srun", "-K1"]
    if how == "KillOnBadExit":
        # srun takes KillOnBadExit from its slurm.conf.
        conf = cg.dir / "etc" / "slurm.kill-on-bad-exit.conf"
        conf.write_text((cg.dir / "etc" / "slurm.conf").read_text() + "KillOnBadExit=1\n")
        os.chmod(conf, 0o644)
        srun = ["env", f"SLURM_CONF={conf}", "srun"]
    t0 = time.monotonic()
    rc, out, err = cg.exec(*srun, "--mem=50M", "-N2", "-n4", "--exit-policy=main-rank",
                           "--exit-report-json=oom-main.json", "sh", "-c", script, cwd=workdir, timeout=90)
    took = time.monotonic() - t0
    print(err)
    assert rc == 137, f"srun {rc}:\n{err}"
    assert "main rank 0 on node1 killed by the OOM killer (SIGKILL)" in err, err
    assert_not_held(cg, took, err)
    tasks = report(workdir, "oom-main.json")
    assert [r for r, t in tasks.items() if t["oom_killed"]] == [0], tasks
    # Torn down after it: collateral, every one.
    assert all(tasks[r]["collateral"] for r in (1, 2, 3)), tasks


def proc_read(pid, what):
    return pathlib.Path(f"/proc/{pid}/{what}").read_text().strip()


def parent(pid):
    return int(proc_read(pid, "stat").rsplit(")", 1)[1].split()[1])


def test_the_daemon_scores_for_the_oom_killer_as_a_task(cg, workdir):
    """The node daemon's oom_score_adj is a task's, not slurmstepd's, and
    its cgroups are the step's: on cgroup/v2 slurmstepd's part of the step
    (step_0/slurm), on cgroup/v1 the step's cgroup of every hierarchy but
    the freezer, which root moves it and its event anchor into, and its
    CPUs the step's. Read from /proc beside the step."""
    step = cg.popen("srun", "--mpi=none", "-N1", "-n1", "sh", "-c",
                    '/usr/bin/python3 -c "$0" && touch woke && exec sleep 31', WAKE, cwd=workdir)
    try:
        assert wait_for_files(workdir, "woke", 1), "the step's daemon never started"
        time.sleep(0.2)  # the exec of sleep
        mine = set(cg.pids())
        found = node_daemons(cg)
        assert len(found) == 1, f"one daemon, got {found}"
        daemon = found[0]
        # The task, not the extern step's own sleep (PrologFlags=Contain).
        tasks = [p for p in running("sleep")
                 if p in mine and proc_read(p, "cmdline").split("\0")[:2] == ["sleep", "31"]]
        assert len(tasks) == 1, f"one task, got {tasks}"
        task, stepd = tasks[0], parent(tasks[0])
        seen = {name: proc_read(pid, "oom_score_adj") for name, pid in
                (("task", task), ("slurmstepd", stepd), ("daemon", daemon))}
        daemon_cgroup = proc_read(daemon, "cgroup")
        task_cgroup = proc_read(task, "cgroup")
        anchors = [p for p in daemons() if p in mine and parent(p) == daemon]
        anchor_cgroup = proc_read(anchors[0], "cgroup") if anchors else None
        cpus = {name: next(line.split()[1] for line in proc_read(pid, "status").splitlines()
                           if line.startswith("Cpus_allowed_list:"))
                for name, pid in (("task", task), ("slurmstepd", stepd), ("daemon", daemon))}
    finally:
        step.kill()
        step.communicate()
    print(f"{cg.version}: oom_score_adj {seen}; CPUs allowed {cpus}; the daemon's cgroups: {daemon_cgroup!r}")
    assert seen["daemon"] == seen["task"] == "0", seen
    if seen["slurmstepd"] == "0":
        print("slurmstepd's own oom_score_adj is 0: this kernel refused its -999 (or -1000), so the daemon's 0 "
              "cannot tell a reset from an inherited value here")
    if cg.version == "v2":
        # The step's cgroup holds it (job_N/step_0/...), whose limits and
        # accounting are the step's.
        assert "/step_0/" in daemon_cgroup, daemon_cgroup
    else:
        # The step's cgroup of each hierarchy Slurm made one in, less the
        # task's own (task_0); the freezer's stays slurmstepd's, outside
        # what proctrack/cgroup waits for.
        want = {}
        for line in task_cgroup.splitlines():
            _, controllers, path = line.split(":", 2)
            if "/step_0" in path and controllers and controllers != "freezer" and "=" not in controllers:
                want[controllers] = path[:path.index("/step_0") + len("/step_0")]
        assert {"memory", "cpuset"} <= set(want), f"the task has no step cgroups: {task_cgroup!r}"
        for name, seen_cgroup in (("daemon", daemon_cgroup), ("event anchor", anchor_cgroup)):
            if seen_cgroup is None:
                print(f"no {name} to look at")
                continue
            has = dict(line.split(":", 2)[1:] for line in seen_cgroup.splitlines())
            assert {k: has.get(k) for k in want} == want, f"the {name}'s cgroups {seen_cgroup!r}, the task's {task_cgroup!r}"
            assert "/step_0" not in has.get("freezer", ""), f"the {name} is in the step's freezer cgroup: {seen_cgroup!r}"
        # Its CPUs are then the step's cpuset's, not all of the node's:
        # for this step of one task on one CPU, the task's.
        assert cpus["daemon"] == cpus["task"], cpus
