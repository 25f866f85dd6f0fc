# SPDX-License-Identifier: Apache-2.0
"""Failures in a PMIx step, on the real 4-node cluster: teardown by default,
run-through on request (--exit-recoverable), and the root cause as srun's
code (docs/pmix-service.md).

A real Open MPI program (tests/clients/ep_mpi_fail.c) in which rank 5, on
node3, dies while every other rank waits in a barrier: the survivors can
never pass it, and without a teardown they would wait for their watchdog
(90 s). Real PMIx clients that register what real runtimes register: a
default handler only (Open MPI 4.1), PMIX_ERR_PROC_ABORTED only (OpenPMIx's
examples/fault.c).
"""

import re

import pytest

from test_exit_policy import EARLY_MARK, wait_for_files_sh
from test_pmix import N4N8, client, lines, parse_events, srun, srun_mpi_timed

pytestmark = pytest.mark.integration

SURVIVORS = [0, 1, 2, 3, 4, 6, 7]
# How rank 5 dies: ep_mpi_fail's --fail, its code, and how the report says it.
FAILURES = {
    "segfault": ("5:segv", 139, "killed by SIGSEGV"),
    "exit-3": ("5:exit:3", 3, "exited with code 3 without finalizing"),
    "abort-7": ("5:abort:7", 7, "aborted with status 7"),
}
ROOT_CAUSE_POLICIES = ["main-rank", "main-rank-check", "lowest-rank", "first-failure"]
# Far below the survivors' own watchdog (90 s): only a teardown ends the
# step this soon. A functional bound against a hang; bench/run.sh failure
# has the figures.
HANG = 30


@pytest.fixture
def pmix(plugstack):
    plugstack.enable("fanout=2", "grace_ms=3000")
    return plugstack


def mpi_fail(cluster, workdir, fail, *srun_args, user=None):
    return srun_mpi_timed(cluster, workdir, *N4N8, *srun_args, client("ep_mpi_fail"), "--fail", fail,
                          "--timeout", "90", user=user)


@pytest.mark.parametrize("policy", ROOT_CAUSE_POLICIES + ["all-success", None])
@pytest.mark.parametrize("how", FAILURES)
def test_a_rank_dying_in_a_collective_ends_the_step_with_its_code(cluster, workdir, pmix, how, policy):
    fail, code, description = FAILURES[how]
    args = [f"--exit-policy={policy}"] if policy else []
    rc, out, err, elapsed = mpi_fail(cluster, workdir, fail, *args)
    assert "fail rank=5" in out, out + err
    assert lines(out, "passed ") == [], out  # nobody passes a barrier a dead rank is missing from
    assert elapsed < HANG, f"the step took {elapsed:.1f} s\n{err}"
    if policy in ROOT_CAUSE_POLICIES:
        assert rc == code, err
    elif policy == "all-success":
        assert rc == 1, err
    elif how == "abort-7":
        assert rc == 7, err  # no policy: an abort's status, as under Slurm's mpi/pmix
    else:
        assert rc != 0, err
    report = lines(err, "exitpolicy:")
    if policy:
        assert f"exitpolicy: first failure: rank 5 on node3, {description}" in report, err
        # The root cause comes first, the collateral tasks after it.
        first = report.index(f"exitpolicy: first failure: rank 5 on node3, {description}")
        labelled = [i for i, line in enumerate(report) if "(collateral: ended after rank 5 failed)" in line]
        assert labelled and first < labelled[0], err
    else:
        assert not [l for l in report if "first failure" in l], err


@pytest.mark.parametrize("policy", ["main-rank", "lowest-rank"])
def test_under_slurms_own_pmix_the_root_cause_decides_over_its_teardown(cluster, workdir, pmix, policy):
    """Under Slurm's own mpi/pmix (our PMIx service stands aside), Slurm ends
    the step when rank 5 segfaults in the barrier: with SIGKILL up to 25.11,
    with SIGTERM and SIGKILL after KillWait from 26.05, where natively 143
    can hide the segfault. Open MPI 5's survivors abort through Slurm's PMIx
    server (unseen by exitpolicy) and exit 14 around the segfault, some of
    them on record before it. Either way the survivors' ends are collateral
    and srun's code is the segfault's."""
    cluster.skip_without_slurms_pmix()
    rc, out, err, elapsed = srun_mpi_timed(cluster, workdir, "--mpi=pmix", "-N4", "-n8", f"--exit-policy={policy}",
                                           client("ep_mpi_fail"), "--fail", "5:segv", "--timeout", "90")
    assert "fail rank=5" in out, out + err
    assert lines(out, "passed ") == [], out
    assert elapsed < HANG, f"the step took {elapsed:.1f} s\n{err}"
    assert rc == 139, err
    report = lines(err, "exitpolicy:")
    assert "exitpolicy: first failure: rank 5 on node3, killed by SIGSEGV" in report, err
    assert [l for l in report if "(collateral: ended after rank 5 failed)" in l], err


def test_an_ordinary_users_step_is_torn_down_too(cluster, workdir, pmix):
    rc, out, err, elapsed = mpi_fail(cluster, workdir, "5:segv", "--exit-policy=main-rank", user=cluster.NOBODY)
    assert rc == 139, err
    assert lines(out, "passed ") == [], out
    assert elapsed < HANG, f"the step took {elapsed:.1f} s\n{err}"


def test_run_through_lets_open_mpis_own_handler_end_the_step(cluster, workdir, pmix):
    """With --exit-recoverable we tear nothing down: the step ends because
    Open MPI 4.1's default event handler (a code-less registration, which
    OpenPMIx keeps only thanks to the node daemon's event anchor) heard of
    rank 5's death and aborted its own rank. The aborts came after the
    segfault: srun's code is the segfault's."""
    rc, out, err, elapsed = mpi_fail(cluster, workdir, "5:segv", "--exit-recoverable", "--exit-policy=main-rank")
    assert rc == 139, err
    assert lines(out, "passed ") == [], out
    assert elapsed < HANG, f"the step took {elapsed:.1f} s\n{err}"
    assert "ending the step" not in err, err  # not our teardown
    report = lines(err, "exitpolicy:")
    assert any("aborted with status" in line for line in report), err  # Open MPI's own handler
    assert "exitpolicy: first failure: rank 5 on node3, killed by SIGSEGV" in report, err


@pytest.mark.parametrize("register, expected", [
    ("default", ["-402"]),  # once: ABORTED_BY_SIG (the others are for handlers of their own codes)
    ("aborted", ["-7"]),
], ids=["default-handler-only", "proc-aborted-only"])
def test_clients_hear_what_they_registered_for_and_run_on(cluster, workdir, pmix, register, expected):
    """Under --exit-recoverable every survivor on every node is told of
    rank 5's segfault through the handlers it has, finalizes and exits 0;
    srun returns the policy's code (first-failure: the segfault)."""
    rc, out, err = srun(cluster, workdir, *N4N8, "--exit-recoverable", "--exit-policy=first-failure",
                        client("ep_events"), "--victim", "5", "--signal", "11", "--register", register,
                        "--expect", str(len(expected)), "--timeout", "20")
    assert rc == 139, err
    events = parse_events(out)
    for rank in SURVIVORS:
        mine = [e for e in events if e["rank"] == str(rank)]
        assert sorted(e["status"] for e in mine) == sorted(expected), f"rank {rank}: {mine}\n{err}"
        assert all(e["affected"].endswith(":5") and e["exit_code"] == "139" for e in mine), mine
        assert f"survivor done rank={rank} events={len(expected)}" in out, out + err


def test_a_client_that_listens_for_proc_aborted_is_torn_down_after_it_heard(cluster, workdir, pmix):
    """OpenPMIx's examples/fault.c: rank 0 exits 1, the others wait for
    PMIX_ERR_PROC_ABORTED. By default they hear it, and the step is torn
    down a moment later: srun returns rank 0's code."""
    rc, out, err = srun(cluster, workdir, *N4N8, "--exit-policy=main-rank", client("ep_events"), "--victim", "0",
                        "--exit", "1", "--register", "aborted", "--expect", "1", "--timeout", "60")
    assert rc == 1, err
    events = parse_events(out)
    for rank in range(1, 8):
        assert [e["status"] for e in events if e["rank"] == str(rank)] == ["-7"], out + err


@pytest.mark.parametrize("policy", ROOT_CAUSE_POLICIES)
def test_srun_kill_on_bad_exit_keeps_the_root_cause(cluster, workdir, pmix, policy):
    """srun -K kills the survivors of rank 5's segfault (Slurm's own
    teardown, on top of ours): their SIGKILLs and aborts never hide it."""
    rc, out, err, elapsed = mpi_fail(cluster, workdir, "5:segv", "-K", f"--exit-policy={policy}")
    assert rc == 139, err
    assert elapsed < HANG, f"the step took {elapsed:.1f} s\n{err}"


def test_srun_kill_on_bad_exit_in_a_step_without_pmix_clients(cluster, workdir, pmix):
    """No PMIx client: only Slurm's -K ends the others; their SIGKILLs after
    the segfault are collateral all the same."""
    # exec: the task is what the teardown kills (a shell waiting for its
    # child may instead exit 143 when the child dies first).
    script = 'if [ "$SLURM_PROCID" = 5 ]; then sleep 0.5; kill -SEGV $$; fi; exec sleep 30'
    rc, out, err = srun(cluster, workdir, *N4N8, "-K", "--exit-policy=main-rank", "sh", "-c", script)
    assert rc == 139, err
    assert "exitpolicy: first failure: rank 5 on node3, killed by SIGSEGV" in lines(err, "exitpolicy:"), err


def test_a_step_of_tasks_without_pmix_is_not_torn_down(cluster, workdir, pmix):
    """Tasks that never connected to PMIx keep Slurm's own rules: rank 5
    exits 3, the others finish their work."""
    script = 'if [ "$SLURM_PROCID" = 5 ]; then exit 3; fi; sleep 2; echo "done $SLURM_PROCID"'
    rc, out, err = srun(cluster, workdir, *N4N8, "--exit-policy=main-rank", "sh", "-c", script)
    assert rc == 0, err
    assert sorted(lines(out, "done ")) == sorted(f"done {r}" for r in SURVIVORS), out + err
    assert "ending the step" not in err, err


def test_clients_that_start_after_a_peer_died_hear_of_it(cluster, workdir, pmix):
    """Rank 5, a task that never uses PMIx, exits 3 at once; the others
    start PMIx a second after it came to its exit. No node's PMIx server ran when rank 5 died
    (each starts with its first client), and still every survivor hears of
    it by each handler of its own code (PMIX_ERR_EXIT_NONZERO_TERM: rank 5
    was no client; then PMIX_EVENT_PROC_TERMINATED and PMIX_ERR_PROC_ABORTED)
    as it would from a server up before the tasks: the event waited for the
    server, which keeps it for handlers registered later. (What OpenPMIx's
    cache gives such handlers differs: 4.2 gives a default handler the event
    too, and gives each event again at the client's next registration; 5.0
    gives each once, and nothing to a default handler.) Nothing is torn
    down: rank 5 never used PMIx."""
    ep_events = client("ep_events")
    script = (f'if [ "$SLURM_PROCID" = 5 ]; then touch {EARLY_MARK}.5; exit 3; fi; '
              f'{wait_for_files_sh(f"{EARLY_MARK}.*", 1)}sleep 1; exec {ep_events} --victim 5 --exit 3 '
              "--no-fence --register all --expect 3 --timeout 20")
    rc, out, err = srun(cluster, workdir, *N4N8, "--exit-policy=main-rank", "sh", "-c", script)
    assert rc == 0, err
    events = parse_events(out)
    for rank in SURVIVORS:
        mine = [e for e in events if e["rank"] == str(rank)]
        assert {e["status"] for e in mine} == {"-201", "-404", "-7"}, f"rank {rank}: {mine}\n{out}{err}"
        assert all(e["affected"].endswith(":5") and e["exit_code"] == "3" for e in mine), mine
        assert re.search(rf"^survivor done rank={rank} events=[3-9]", out, re.M), out + err
