# SPDX-License-Identifier: Apache-2.0
"""The site's settings hold on the nodes, not only in srun, on the real
cluster (docs/security.md): the bootstrap variable reaches slurmstepd from
the job's environment, which its user can set."""

import pytest

from test_pmix import daemons

pytestmark = pytest.mark.integration

# What a user could set by hand: a front end that is not there, and the
# PMIx service asked for.
FORGED = "1:9:" + "ab" * 32 + ":pmix:2"
REFUSAL = "SLURM_EXITPOLICY_BOOTSTRAP asks for exitpolicy's PMIx service, but "


def slurmd_lines(cluster, job, text):
    out = []
    for k in range(1, 5):
        log = (cluster.dir / "log" / f"slurmd.node{k}.log").read_text(errors="replace")
        out += [l for l in log.splitlines() if f"[{job}." in l and text in l]
    return out


@pytest.mark.parametrize("plug_args, srun_args, why", [
    (["pmix=never"], [], "this node's plugstack.conf says pmix=never"),
    ([], ["--mpi=SLURMS"], "the step has Slurm's own MPI plugin"),
], ids=["site-pmix-never", "slurms-own-mpi"])
def test_a_forged_bootstrap_starts_no_daemon(cluster, workdir, plugstack, plug_args, srun_args, why):
    """No policy, so srun starts no front end and leaves the user's variable
    as it is: slurmstepd refuses the PMIx part (one line in the node's log),
    starts no daemon, and the step runs as without the plugin. Before, every
    node started a daemon for it, waited for it to become ready (20 s) and
    left a failure in its log."""
    if srun_args == ["--mpi=SLURMS"]:  # pmix, or pmi2 where Slurm has no mpi/pmix (forky)
        srun_args = ["--mpi=pmix" if "pmix" in cluster.mpi_plugins() else "--mpi=pmi2"]
    plugstack.enable("grace_ms=3000", *plug_args)
    before = set(daemons())
    rc, out, err = cluster.exec("srun", "-N4", "-n4", *srun_args, "sh", "-c", 'echo "job=$SLURM_JOB_ID"',
                                cwd=workdir, env={"SLURM_EXITPOLICY_BOOTSTRAP": FORGED}, timeout=60)
    assert rc == 0, err
    job = out.split("job=")[1].split()[0]
    refusals = slurmd_lines(cluster, job, REFUSAL)
    assert len(refusals) == 4 and all(why in l for l in refusals), refusals
    assert slurmd_lines(cluster, job, "PMIx service failed") == []
    assert set(daemons()) <= before
