# SPDX-License-Identifier: Apache-2.0
"""A shared node: exitpolicy runs in root's slurmstepd for every step, beside
other users' jobs and on nodes of many tasks. Each test here is an attack
or a load as it happens on such a node, against the real local cluster,
with a real second user (uid 4242) where another user is the attacker:

- another user who knows a step's PMIx environment (its port is in
  /proc/net/tcp, the rest follows a pattern) and claims the step's uid
  (OpenPMIx's native security over TCP believes what a client says) joins
  as a rank that has not connected and calls PMIx_Abort(42): refused, the
  step's code is its own;
- a node of 1 024 tasks of one step whose daemon stands by: no task waits
  on the plugin (slurmstepd's link to the standby was read by nobody and
  filled after 278 tasks, each later one waited 2 s), and the daemon knows
  every task, so that its teardown ends them all.
"""

import os
import pathlib
import shutil
import tempfile
import time

import pytest

from conftest import Plugstack
from test_pmix import client, srun

pytestmark = pytest.mark.integration

INTRUDER = 4242  # another user of the node: no account, no group of the job's


def pmix_environment_of(program, rank, timeout=20):
    """The PMIX_* environment of the running `program` whose PMIX_RANK is
    `rank` (what the intruder could have guessed; read here by root to be
    quick), once its PMIx server serves it."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.path.basename(os.readlink(f"/proc/{entry}/exe")) != program:
                    continue
                raw = pathlib.Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            env = dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)
            if env.get("PMIX_RANK") == str(rank):
                return {k: v for k, v in env.items() if k.startswith("PMIX_")}
        time.sleep(0.1)
    pytest.fail(f"no {program} of rank {rank} ran within {timeout} s", pytrace=False)


@pytest.fixture
def daemon_logs():
    """A directory the daemons of any user write their logs to."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="exitpolicy-logs-", dir="/tmp"))
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_another_user_claiming_the_steps_uid_cannot_join_it_nor_abort_it(cluster, plugstack, workdir, daemon_logs):
    logs = daemon_logs
    plugstack.enable("grace_ms=3000", f"log_dir={logs}", "debug=1")
    # The step of user 65534: rank 0 a PMIx client that fences with rank
    # 1 and waits (8 s); rank 1 a task that never uses PMIx.
    script = workdir / "victim.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$SLURM_PROCID" = 0 ]; then exec {client("ep_abort")} --status 9 --rank 1 --timeout 8; fi\n'
        "exec sleep 9\n"
    )
    script.chmod(0o755)
    victim = cluster.popen("setpriv", f"--reuid={cluster.NOBODY}", f"--regid={cluster.NOBODY}", "--clear-groups",
                           "srun", "--mpi=none", "-N1", "-n2", "--exit-policy=first-failure", str(script), cwd=workdir)
    try:
        env = pmix_environment_of("ep_abort", 0)
        env["PMIX_RANK"] = "1"
        shim = pathlib.Path(client("ep_claim_uid.so"))
        # The intruder: uid 4242 in the nodes' network namespace, the
        # victim's PMIx environment as rank 1, claiming uid/gid 65534.
        rc, out, err = cluster.exec(
            "env", "-i", "PATH=/usr/bin:/bin", f"LD_PRELOAD={shim}", f"EP_CLAIM_UID={cluster.NOBODY}",
            f"EP_CLAIM_GID={cluster.NOBODY}", *[f"{k}={v}" for k, v in env.items()],
            client("ep_abort"), "--status", "42", "--rank", "1", "--timeout", "5",
            user=INTRUDER, cwd=workdir, timeout=30)
        assert rc != 0 and "abort rank=1 status=42" not in out, f"the intruder joined the step:\n{out}\n{err}"
        victim_out, victim_err = victim.communicate(timeout=60)
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.communicate()
    # The step ends as its own tasks make it end: rank 0's watchdog (3),
    # never the intruder's 42.
    assert victim.returncode == 3, f"srun {victim.returncode}:\n{victim_out}\n{victim_err}"
    log = "".join(p.read_text() for p in logs.glob("exitpolicy-pmixd.*.log"))
    assert f"refused a PMIx connection from uid {INTRUDER}" in log, log


@pytest.fixture
def crowded(new_cluster, exitpolicy_so):
    """One node that takes 1 024 tasks of one step (Slurm's MaxTasksPerNode
    is 512 by default), exitpolicy serving PMIx on it."""
    c = new_cluster(1, slurm_conf_extra="MaxTasksPerNode=1024")
    proc = c.up()
    assert proc.returncode == 0, f"cluster up failed:\n{proc.stdout}\n{proc.stderr}"
    Plugstack(c, exitpolicy_so).enable("grace_ms=3000")
    return c


def test_a_thousand_tasks_never_wait_on_a_standing_by_daemon_which_then_ends_them_all(crowded, workdir):
    tasks = 1024
    # Rank 0 uses PMIx (the daemon wakes), then exits 3; the others never
    # use it and wait: the teardown must find every one of them.
    script = workdir / "crowd.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$SLURM_PROCID" = 0 ]; then {client("ep_hello")} --timeout 60; exit 3; fi\n'
        "exec sleep 300\n"
    )
    script.chmod(0o755)
    rc, out, err = srun(crowded, workdir, "--mpi=none", "-N1", f"-n{tasks}", "--overcommit",
                        "--exit-policy=first-failure", "--exit-report=always", str(script), timeout=240)
    assert rc == 3, f"srun {rc}:\n{out[-2000:]}\n{err[-4000:]}"
    assert "hello rank=0 size=1024 " in out, out[-2000:] + err[-4000:]
    assert f"ranks 1-{tasks - 1} on node1: killed by SIGTERM (collateral" in err, err[-4000:]
    slurmd = (crowded.dir / "log" / "slurmd.node1.log").read_text()
    assert "cannot tell the node daemon" not in slurmd, [l for l in slurmd.splitlines() if "exitpolicy" in l][-5:]
