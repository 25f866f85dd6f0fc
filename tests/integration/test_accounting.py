# SPDX-License-Identifier: Apache-2.0
"""What Slurm's accounting records of a failing step, with and without the
plugin: sacct on a cluster with a real slurmdbd and MariaDB
(contrib/slurm/cluster, EXITPOLICY_CLUSTER_ACCOUNTING=slurmdbd).

Each case is a batch job whose last command is its one step, `srun -N2
-n4`, as most jobs are: the job's ExitCode is then srun's, so the policy's,
while the step's State and ExitCode and the job's DerivedExitCode stay
Slurm's own rules. The table in docs/mpi.md ("What sacct shows") is what
these tests measure; a cell it holds for another release than this one is
not compared. Run with -s to see the table as measured here.
"""

import os
import pathlib
import re
import time

import pytest

from conftest import REPO, Cluster, Plugstack
from test_cgroups import HUNGRY, plugin_dir
from test_pmix import client

pytestmark = pytest.mark.integration

DOC = REPO / "docs" / "mpi.md"
POLICY = "main-rank"
# A node is declared down this long after its slurmd stopped answering.
SLURMD_TIMEOUT = 10
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "OUT_OF_ME+",
            "CANCELLED+", "BOOT_FAIL", "DEADLINE", "PREEMPTED")

SEGV_RANK0 = '[ "$SLURM_PROCID" = 0 ] && kill -SEGV $$; sleep 1'
EXIT1_RANK1 = '[ "$SLURM_PROCID" = 1 ] && exit 1; sleep 1'
SEGV_RANK1 = '[ "$SLURM_PROCID" = 1 ] && kill -SEGV $$; sleep 1'
EXIT3_RANK1 = '[ "$SLURM_PROCID" = 1 ] && exit 3; exec sleep 60'
OOM_RANK1 = f'[ "$SLURM_PROCID" = 1 ] && exec /usr/bin/python3 -c "{HUNGRY}"; sleep 2'
# Every rank says it runs, then waits for its node to be lost.
RUNNING = 'touch "running.$SLURM_JOB_ID.$SLURM_PROCID"; exec sleep 120'

# (case as the table names it, srun's options, the tasks' shell command)
CASES = [
    ("all succeed", [], "true"),
    ("rank 0 segfaults", [], SEGV_RANK0),
    ("rank 1 exits 1", [], EXIT1_RANK1),
    ("rank 1 segfaults", [], SEGV_RANK1),
    ("rank 1 exits 3 under srun -K1", ["-K1"], EXIT3_RANK1),
    ("rank 1 calls PMIx_Abort(7)", None, None),
    ("rank 1 goes past --mem=50M", ["--mem=50M"], OOM_RANK1),
]
LOST = "a node is lost"


def release():
    major, minor = Cluster.slurm_release()
    return f"{major}.{minor:02d}"


def memory_constrained():
    """Whether this Slurm and this machine run cgroup/v1 with ConstrainRAMSpace
    (the OOM case's setup; cgroup/v2 constrains memory only where the nodes'
    cgroups have the memory controller, which a hybrid host's have not)."""
    return (plugin_dir() / "cgroup_v1.so").exists() and pathlib.Path("/sys/fs/cgroup/memory").is_dir()


@pytest.fixture(scope="module")
def acct(exitpolicy_so, tmp_path_factory):
    """A 3-node cluster with slurmdbd and MariaDB, on cgroup/v1 where it can
    (for the OOM case), node3 kept for a lost node of its own."""
    d = tmp_path_factory.mktemp("accounting")
    os.chmod(d, 0o755)
    c = Cluster(d, nodes=3, owned=True, accounting="slurmdbd",
                cgroup="v1" if memory_constrained() else None,
                slurm_conf_extra=f"SlurmdTimeout={SLURMD_TIMEOUT}\nMessageTimeout=5")
    proc = c.up()
    try:
        assert proc.returncode == 0, f"cluster up (accounting) failed:\n{proc.stdout}\n{proc.stderr}"
        c.plugstack = Plugstack(c, exitpolicy_so)
        yield c
    finally:
        down = c.down()
        assert down.returncode == 0, f"cluster down failed:\n{down.stdout}\n{down.stderr}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("accounting-work")
    os.chmod(d, 0o1777)
    return d


def sacct(c, job, *fields, steps=True):
    """sacct's FIELDS of JOB: {"job": [...], STEP: [...]} once slurmdbd has
    the job's end and every step's (it hears of them after srun and sbatch
    have returned)."""
    deadline = time.monotonic() + 60
    while True:
        rc, out, err = c.exec("sacct", "-j", str(job), "-n", "-P", "-o", "JobID,State," + ",".join(fields))
        assert rc == 0, err
        rows = {}
        for line in out.splitlines():
            jobid, state, *values = line.split("|")
            step = jobid.split(".", 1)[1] if "." in jobid else "job"
            rows[step] = [state.split()[0], *values]
        done = "job" in rows and all(r[0] in TERMINAL for r in rows.values())
        if done and (not steps or "0" in rows):
            return rows
        assert time.monotonic() < deadline, f"sacct never showed job {job} ended: {out}"
        time.sleep(0.5)


def batch(c, workdir, name, srun_args, command, sbatch_args=(), wait=True):
    """Submit a batch job of one step, srun SRUN_ARGS sh -c COMMAND, whose
    code is the job's (it says it in its output, "srun: N"); returns its
    job id, sbatch's code (with wait: --wait's, the job's) and stderr."""
    script = workdir / f"{name}.sh"
    quoted = command.replace("'", "'\\''")
    script.write_text("#!/bin/sh\n" + Cluster.job_path_prefix()
                      + f"srun {' '.join(srun_args)} sh -c '{quoted}'\n"
                      + 'rc=$?; echo "srun: $rc"; exit $rc\n')
    args = ["sbatch", "--parsable", "--no-requeue", "-N2", "-n4", "-J", name, "-o", f"{name}.out", *sbatch_args]
    rc, out, err = c.exec(*args, *(["--wait"] if wait else []), str(script), cwd=workdir, timeout=180)
    assert out.strip(), f"sbatch said nothing (rc {rc}): {err}"
    job = int(out.split(";")[0].split()[0])
    return job, rc, err


def srun_code(workdir, name):
    """What the batch job's srun returned, as its output says; "-" when
    Slurm ended the whole job (a lost node) before it could say it."""
    out = (workdir / f"{name}.out").read_text(errors="replace")
    m = re.search(r"^srun: (\d+)$", out, re.M)
    if not m and re.search(r"JOB \d+ ON \S+ CANCELLED AT .* DUE TO NODE FAILURE", out):
        return "-"
    assert m, f"{name}'s job never said srun's code:\n{out}"
    return m.group(1)


def cells(workdir, name, rows):
    """(srun's code, job State, ExitCode, DerivedExitCode, step State,
    ExitCode), as the table has them."""
    return (srun_code(workdir, name), rows["job"][0], rows["job"][1], rows["job"][2], rows["0"][0], rows["0"][1])


def measure(c, workdir, name, srun_args, command):
    job, rc, err = batch(c, workdir, name, srun_args, command)
    rows = sacct(c, job, "ExitCode", "DerivedExitCode")
    assert str(rc) == srun_code(workdir, name), f"sbatch --wait {rc}, the job's srun {srun_code(workdir, name)}"
    return cells(workdir, name, rows)


def case_args(case, on):
    """srun's options and command of a case; the abort: Slurm's own
    mpi/pmix without the plugin, the plugin's PMIx with it."""
    name, args, command = case
    if args is not None:
        return (["--exit-policy=" + POLICY] if on else []) + args, command
    abort = f"exec {client('ep_abort')} --status 7 --rank 1 --timeout 30"
    return (["--mpi=none", "--exit-policy=" + POLICY] if on else ["--mpi=pmix"]), abort


def documented():
    """The rows of docs/mpi.md's "What sacct shows": {(case, plugin): cells}."""
    text = DOC.read_text()
    start = text.index("## What sacct shows")
    rows = {}
    for line in text[start:].splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if len(cells) != 8 or cells[0] in ("case", "") or set(cells[0]) <= {"-"}:
            continue
        rows[(cells[0], cells[1])] = cells[2:]
    assert rows, f"no table under '## What sacct shows' in {DOC}"
    return rows


def allowed(cell):
    """What a cell allows here: "A" everywhere, "A (22.05: B)" B on 22.05
    (and "A (22.05: B; 24.11, 25.05: C)"), each of which may be "A or B",
    where Slurm's own order of events decides (a race)."""
    m = re.fullmatch(r"(.*?)\s*\((.*)\)", cell)
    value = m.group(1) if m else cell
    for part in (m.group(2).split(";") if m else []):
        releases, _, other = part.rpartition(": ")
        if release() in [r.strip() for r in releases.split(",")]:
            value = other
    return {v.strip() for v in value.split(" or ")}


def compare(measured):
    table = documented()
    wrong = []
    for key, cells in measured.items():
        assert key in table, f"docs/mpi.md's table has no row {key}; measured here: {cells}"
        want = [allowed(c) for c in table[key]]
        if any(got not in ok for got, ok in zip(cells, want)):
            wrong.append(f"{key}: measured {list(cells)}, the table says {table[key]}")
    assert not wrong, f"Slurm {release()}:\n" + "\n".join(wrong)


def print_rows(measured):
    print(f"\nWhat sacct shows here (Slurm {release()}):")
    for (case, plugin), cells in measured.items():
        print("| " + " | ".join([case, plugin, *cells]) + " |")


def test_what_sacct_shows_is_docs_tables(acct, workdir):
    """Every case with and without the plugin: srun's code and what sacct
    shows are the table's."""
    measured = {}
    for i, case in enumerate(CASES):
        if case[0].startswith("rank 1 goes past") and not memory_constrained():
            continue  # no memory constraint here: no OOM kill to see
        for on in (False, True):
            if on:
                acct.plugstack.enable("grace_ms=3000")
            else:
                acct.plugstack.disable()
            args, command = case_args(case, on)
            if "--mpi=pmix" in args and "pmix" not in acct.mpi_plugins():
                continue  # Debian forky's Slurm has no mpi/pmix
            measured[(case[0], POLICY if on else "none")] = measure(acct, workdir, f"case{i}-{int(on)}", args,
                                                                    command)
    acct.plugstack.disable()
    print_rows(measured)
    compare(measured)


def test_sacct_is_the_same_under_every_policy(acct, workdir):
    """The policy changes srun's code, so the job's ExitCode, and nothing
    else sacct shows."""
    acct.plugstack.enable("grace_ms=3000")
    seen = {}
    for policy in ("max", "main-rank", "all-success", "main-rank-check", "first-failure", "lowest-rank"):
        job, rc, err = batch(acct, workdir, f"policy-{policy}", [f"--exit-policy={policy}"], SEGV_RANK1)
        rows = sacct(acct, job, "ExitCode", "DerivedExitCode")
        seen[policy] = (rc, rows["job"], rows["0"])
    acct.plugstack.disable()
    print(seen)
    codes = {"max": 139, "main-rank": 0, "all-success": 1, "main-rank-check": 1, "first-failure": 139,
             "lowest-rank": 139}
    # A job whose srun returned that code: its State and ExitCode, as the
    # table has them.
    table = documented()
    job_of = {0: table[("rank 1 segfaults", POLICY)][1:3], 1: table[("rank 1 exits 1", "none")][1:3],
              139: table[("rank 1 segfaults", "none")][1:3]}
    for policy, (rc, job, step) in seen.items():
        assert rc == codes[policy], (policy, seen[policy])
        assert all(got in allowed(c) for got, c in zip(job[:2], job_of[rc])), (policy, seen[policy], job_of[rc])
    # The step's State and ExitCode are Slurm's, whatever the policy; the
    # job's DerivedExitCode, the highest of its steps', too.
    assert len({tuple(step) for _, _, step in seen.values()}) == 1, seen
    assert {job[2] for _, job, _ in seen.values()} <= allowed(table[("rank 1 segfaults", "none")][3]), seen


def test_a_step_run_by_srun_alone_keeps_slurms_code_in_sacct(acct, workdir):
    """srun without sbatch or salloc: srun tells slurmctld the job's end
    with Slurm's code before any plugin's exit hook runs, so the job's
    ExitCode is Slurm's, whatever srun then returns."""
    acct.plugstack.enable("grace_ms=3000")
    rc, out, err = acct.exec("srun", "-N2", "-n4", f"--exit-policy={POLICY}", "sh", "-c",
                             '[ "$SLURM_PROCID" = 0 ] && echo "job $SLURM_JOB_ID"; ' + EXIT1_RANK1, cwd=workdir)
    acct.plugstack.disable()
    assert rc == 0, err
    job = int(re.search(r"^job (\d+)$", out, re.M).group(1))
    rows = sacct(acct, job, "ExitCode")
    assert rows["job"] == ["FAILED", "1:0"], rows


def as_recorded(comment):
    """A comment as sacctmgr keeps it: Slurm 22.05's in lower case."""
    return comment.lower() if release() == "22.05" else comment


def job_record(c, job):
    """sacct's State, ExitCode, DerivedExitCode and Comment of the job."""
    return sacct(c, job, "ExitCode", "DerivedExitCode", "Comment", steps=False)["job"]


def test_with_record_verdict_sacct_holds_srun_s_code_and_why(acct, workdir):
    """plugstack.conf record_verdict=yes: a job srun made for itself gets
    the policy's code as its DerivedExitCode and the verdict as its
    Comment; the job's ExitCode stays Slurm's."""
    acct.plugstack.enable("grace_ms=3000", "record_verdict=yes")
    try:
        for command, code, why in ((EXIT1_RANK1, 0, "main rank 0 on node1 exited with code 0"),
                                   (SEGV_RANK0, 139, "main rank 0 on node1 killed by SIGSEGV")):
            t0 = time.monotonic()
            rc, out, err = acct.exec("srun", "-N2", "-n4", f"--exit-policy={POLICY}", "--exit-report=never",
                                     "sh", "-c", '[ "$SLURM_PROCID" = 3 ] && echo "job $SLURM_JOB_ID"; ' + command,
                                     cwd=workdir)
            took = time.monotonic() - t0
            assert rc == code, err
            assert "warning" not in err, err
            job = int(re.search(r"^job (\d+)$", out, re.M).group(1))
            state, exit_code, derived, comment = job_record(acct, job)
            print(f"job {job}: srun {rc} in {took:.2f} s; sacct {state} {exit_code} {derived} {comment!r}")
            assert derived == f"{code}:0", (state, exit_code, derived, comment)
            assert comment == as_recorded(f"exitpolicy {POLICY} {code}: {why}"), comment
    finally:
        acct.plugstack.disable()


def test_with_record_verdict_a_batch_job_s_comment_says_why(acct, workdir):
    """In a batch job srun sets only the Comment: the job's ExitCode is
    srun's code already (srun is its last command); its DerivedExitCode
    stays its steps' highest. A job with a --comment of its own gets it
    back at its end (AccountingStoreFlags=job_comment)."""
    acct.plugstack.enable("grace_ms=3000", "record_verdict=yes")
    try:
        job, rc, err = batch(acct, workdir, "record-batch", [f"--exit-policy={POLICY}"], EXIT1_RANK1)
        assert rc == 0, err
        state, exit_code, derived, comment = job_record(acct, job)
        print(f"batch job {job}: {state} {exit_code} {derived} {comment!r}")
        assert (state, exit_code) == ("COMPLETED", "0:0")
        assert derived in allowed(documented()[("rank 1 exits 1", POLICY)][3]), derived
        assert comment == as_recorded(f"exitpolicy {POLICY} 0: main rank 0 on node1 exited with code 0"), comment
        job, rc, err = batch(acct, workdir, "record-commented", [f"--exit-policy={POLICY}"], EXIT1_RANK1,
                             sbatch_args=["--comment=run 42"])
        assert rc == 0, err
        assert job_record(acct, job)[3] == "run 42", job_record(acct, job)
    finally:
        acct.plugstack.disable()


def test_a_verdict_that_cannot_be_recorded_costs_one_warning(acct, workdir):
    """No sacctmgr that works (slurmdbd unreachable: a wrong port in the
    environment srun hands sacct): one warning, srun's code unchanged."""
    acct.plugstack.enable("grace_ms=3000", "record_verdict=yes")
    try:
        conf = acct.dir / "etc" / "slurm.nodbd.conf"
        text = (acct.dir / "etc" / "slurm.conf").read_text()
        conf.write_text(re.sub(r"^AccountingStoragePort=\d+$", "AccountingStoragePort=1", text, flags=re.M))
        os.chmod(conf, 0o644)
        t0 = time.monotonic()
        rc, out, err = acct.exec("env", f"SLURM_CONF={conf}", "srun", "-N2", "-n4", f"--exit-policy={POLICY}",
                                 "--exit-report=never", "sh", "-c", EXIT1_RANK1, cwd=workdir)
        took = time.monotonic() - t0
        print(err, f"{took:.2f} s")
        assert rc == 0, err
        assert "warning: the verdict is not in the job's accounting record: " in err, err
        assert "srun's exit code is not affected" in err, err
    finally:
        acct.plugstack.disable()


def test_a_lost_node_is_what_the_table_says(acct, workdir):
    """node2, then node3, is lost mid-step (every one of its processes
    killed at once), without and with the plugin. Last: the nodes stay
    lost."""
    measured = {}
    for on, node in ((False, "node3"), (True, "node2")):
        if on:
            acct.plugstack.enable("grace_ms=3000")
        else:
            acct.plugstack.disable()
        name = f"lost-{int(on)}"
        script_args = (["--exit-policy=" + POLICY] if on else [])
        job, _, err = batch(acct, workdir, name, script_args, RUNNING, sbatch_args=["-w", f"node1,{node}"],
                            wait=False)
        # On node1 and the node to lose (the other is excluded).
        deadline = time.monotonic() + 60
        while len(list(workdir.glob(f"running.{job}.*"))) < 4:
            assert time.monotonic() < deadline, f"job {job}'s ranks never all ran: {err}"
            time.sleep(0.2)
        proc = acct.crash(node)
        assert proc.returncode == 0, proc.stderr
        rows = sacct(acct, job, "ExitCode", "DerivedExitCode")
        measured[(LOST, POLICY if on else "none")] = cells(workdir, name, rows)
    acct.plugstack.disable()
    print_rows(measured)
    compare(measured)
