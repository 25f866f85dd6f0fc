# SPDX-License-Identifier: Apache-2.0
"""Open MPI 5's fault tolerance (ULFM) under srun, served by exitpolicy's
PMIx service: with --exit-recoverable a rank's death reaches every survivor
on every node as the events Open MPI's ULFM handler takes, and the survivors
revoke, shrink or agree and finish their work (tests/clients/ep_ulfm.c, with
OMPI_MCA_mpi_ft_enable=1); srun's code follows the policy. Without
run-through the step is torn down with the root cause's code, as any other.
Only where the MPI has ULFM (Debian 13's Open MPI 5.0.7): elsewhere
ep_ulfm is not built and these are skipped."""

import pytest

from test_pmix import CLIENTS, N4N8, OMPI_ENV, Streamed, lines, srun

pytestmark = pytest.mark.integration

# Two settings Open MPI 5.0.7's fault tolerance needs across nodes, under
# any launcher (docs/mpi.md, "Fault-tolerant MPI (ULFM)"):
# - coll/han is not fault tolerant: its first collective over a communicator
#   with a dead member crashes in mca_coll_han_comm_create (open-mpi/ompi#13915);
# - a peer never spoken to is not in its communicators' groups yet, and is
#   taken as alive: MPIX_Comm_agree and MPIX_Comm_shrink wait for it forever
#   (fixed after 5.0.7 by open-mpi/ompi#13501). add_procs_cutoff above
#   the world's size makes every peer at MPI_Init.
ULFM_ENV = {**OMPI_ENV, "OMPI_MCA_mpi_ft_enable": "1", "OMPI_MCA_coll": "^han",
            "OMPI_MCA_mpi_add_procs_cutoff": "65536"}


@pytest.fixture
def ep_ulfm():
    path = CLIENTS / "ep_ulfm"
    if not path.is_file():
        pytest.skip("this MPI has no ULFM (Open MPI 5's ftmpi extension): ep_ulfm is not built")
    return str(path)


@pytest.fixture
def pmix(plugstack):
    plugstack.enable("fanout=2", "grace_ms=3000")
    return plugstack


def ulfm(cluster, workdir, ep_ulfm, fail, *srun_args, mode="shrink", user=None):
    return srun(cluster, workdir, *N4N8, *srun_args, ep_ulfm, "--fail", fail, "--mode", mode, "--timeout", "60",
                env=ULFM_ENV, user=user)


def survivors_done(out, survivors):
    """Each survivor's "done" line says the shrunk communicator holds them all."""
    n = len(survivors)
    done = {int(l.split()[1].split("=")[1]): l for l in lines(out, "done rank=")}
    assert sorted(done) == survivors, out
    for line in done.values():
        assert f"size={n} sum={n}" in line, line


@pytest.mark.parametrize("mode", ["shrink", "agree"])
@pytest.mark.parametrize("fail", ["5:segv", "5:exit:3", "5:exit:0"], ids=["segfault", "exit-3", "exit-0"])
def test_the_survivors_recover_and_finish(cluster, workdir, pmix, ep_ulfm, fail, mode):
    rc, out, err = ulfm(cluster, workdir, ep_ulfm, fail, "--exit-recoverable", "--exit-policy=main-rank", mode=mode)
    assert rc == 0, out + err  # main-rank: rank 0's own code
    assert lines(out, "passed ") == [], out
    assert len(lines(out, "recovered ")) == 7, out + err
    survivors_done(out, [0, 1, 2, 3, 4, 6, 7])
    assert "PMIx Event Notification" not in err, err


@pytest.mark.parametrize("mode", ["shrink", "agree"])
def test_run_through_works_as_users_first_try_it(cluster, workdir, pmix, ep_ulfm, mode):
    """Nothing of Open MPI's set, only --exit-recoverable: the step's tasks
    get what ULFM needs there (with only mpi_ft_enable, Open MPI 5.0.7 hung
    until its time limit)."""
    rc, out, err = srun(cluster, workdir, *N4N8, "--exit-recoverable", "--exit-policy=main-rank", ep_ulfm,
                        "--fail", "5:segv", "--mode", mode, "--timeout", "60", env=OMPI_ENV)
    assert rc == 0, out + err
    survivors_done(out, [0, 1, 2, 3, 4, 6, 7])


def test_an_ordinary_users_step_recovers(cluster, workdir, pmix, ep_ulfm):
    rc, out, err = ulfm(cluster, workdir, ep_ulfm, "5:segv", "--exit-recoverable", "--exit-policy=main-rank",
                        user=cluster.NOBODY)
    assert rc == 0, out + err
    survivors_done(out, [0, 1, 2, 3, 4, 6, 7])


def test_a_lost_node_is_seen_and_the_survivors_finish(crashable, workdir, ep_ulfm):
    """node3 (ranks 4 and 5) lost whole, its slurmd, slurmstepd, daemon and
    tasks killed, while the others wait in an allreduce for rank 5: the
    survivors on the three other nodes see both ranks fail and shrink to six."""
    cluster = crashable(4)
    proc = cluster.popen("srun", "--no-kill", "--exit-recoverable", "--exit-policy=main-rank", *N4N8, ep_ulfm,
                         "--fail", "5:hang", "--timeout", "60", cwd=workdir, env=ULFM_ENV)
    step = Streamed(proc, "fail rank=5 ", 1)
    assert step.wait(60), step.abandon("rank 5 never got to its failure")
    crashed = cluster.crash("node3")
    assert crashed.returncode == 0, crashed.stderr
    rc, out, err = step.finish(90)
    assert rc == 0, out + err  # main-rank: rank 0's own code
    survivors_done(out, [0, 1, 2, 3, 6, 7])
    assert "PMIx Event Notification" not in err, err
    assert "exitpolicy:   ranks 4-5 on node3: lost (no outcome reported; counted as code 1)" \
        in lines(err, "exitpolicy:"), err


def test_two_failures_one_after_the_other(cluster, workdir, pmix, ep_ulfm):
    rc, out, err = ulfm(cluster, workdir, ep_ulfm, "5:segv,2:exit:4", "--exit-recoverable",
                        "--exit-policy=main-rank")
    assert rc == 0, out + err
    survivors_done(out, [0, 1, 3, 4, 6, 7])


def test_without_run_through_the_root_cause_ends_the_step(cluster, workdir, pmix, ep_ulfm):
    rc, out, err = ulfm(cluster, workdir, ep_ulfm, "5:segv", "--exit-policy=first-failure")
    assert rc == 139, out + err
    assert "exitpolicy: first failure: rank 5 on node3, killed by SIGSEGV" in lines(err, "exitpolicy:"), err
