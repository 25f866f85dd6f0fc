# SPDX-License-Identifier: Apache-2.0
"""Exit policies end to end: real srun, real tasks, exitpolicy.so loaded from
the cluster's plugstack.d (see the README's "Options" and "Choosing a policy", and
contrib/slurm/plugstack.conf.example).

Tasks set their outcome per rank ($SLURM_PROCID): `exit N`, `kill -SEGV $$`,
`kill -KILL $$`, or a real `timeout`. Block placement on the 4-node cluster:
with -N4 -n4 rank k runs on node k+1; with -N4 -n8 ranks 2k and 2k+1 run on
node k+1. Where the order of failures matters (first-failure), the later one
sleeps a second first.

Every srun takes ~0.2 s; each reference-table case runs the six policies in
one test and reports all mismatches together.
"""

import json
import pathlib
import re
import select
import shlex
import subprocess
import time

import pytest

from conftest import Plugstack

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = REPO / "docs" / "report.schema.json"
NOBODY = 65534

ROOT_AND_NOBODY = [pytest.param(None, id="root"), pytest.param(NOBODY, id="nobody")]

POLICIES = ["max", "main-rank", "all-success", "main-rank-check", "first-failure", "lowest-rank"]

VALID_POLICIES = (
    "valid policies are max (native), main-rank (rank0), all-success (require-all-success), "
    "main-rank-check (check-all-nodes), first-failure, lowest-rank"
)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    """Nothing from the caller's environment may choose a policy for us."""
    for name in ("SLURM_EXIT_POLICY", "SLURM_EXIT_MAIN_RANK", "SLURM_EXIT_REPORT",
                 "SLURM_EXIT_REPORT_JSON", "EXITPOLICY_DEBUG"):
        monkeypatch.delenv(name, raising=False)


# --- helpers -----------------------------------------------------------------


class Layout:
    def __init__(self, name, ntasks, roles, spelling):
        self.name = name
        self.ntasks = ntasks
        self.args = ["-N4", f"-n{ntasks}"]
        self.roles = roles        # role -> rank
        self.spelling = spelling  # canonical policy -> how this layout spells it

    def node(self, rank):
        return f"node{rank // (self.ntasks // 4) + 1}"


LAYOUTS = {
    # -N4 -n4: rank k on node k+1. The policies are spelled with their
    # aliases (and in odd case: names are case-insensitive).
    "n4": Layout(
        "n4", 4,
        {"r0": 0, "other": 1, "other2": 3, "far": 2},
        {"max": "native", "main-rank": "RANK0", "all-success": "require-all-success",
         "main-rank-check": "Check-All-Nodes", "first-failure": "First-Failure",
         "lowest-rank": "LOWEST-RANK"},
    ),
    # -N4 -n8: ranks 0-1 node1, 2-3 node2, 4-5 node3, 6-7 node4. The failing
    # "other" rank (5, node3) is never on the main rank's node.
    "n8": Layout(
        "n8", 8,
        {"r0": 0, "other": 5, "other2": 6, "far": 5},
        {p: p for p in POLICIES},
    ),
}


# In the working directory, for "late" actions to wait on: one file per
# rank that has come to its early action, named after the job.
EARLY_MARK = "early.$SLURM_JOB_ID"


def wait_for_files_sh(pattern, count):
    """Shell that waits, 30 s at most, until `count` files of the working
    directory match `pattern` (tasks on other nodes have come that far)."""
    return (f"i=0; while [ $(ls {pattern} 2>/dev/null | wc -l) -lt {count} ] && [ $i -lt 300 ]; "
            "do sleep 0.1; i=$((i + 1)); done; ")


def action_sh(action, late, early=0):
    """Shell for one rank's outcome. "late X": X only once the `early` ranks
    whose actions are not late have come to them, and a second after (only
    when the order of failures matters to the policy under test). Waiting
    for them, not a fixed delay: tasks on different nodes start seconds
    apart on a loaded machine."""
    words = action.split()
    delay = ""
    if words[0] == "late":
        words = words[1:]
        if late:
            delay = wait_for_files_sh(f"{EARLY_MARK}.*", early) + "sleep 1; "
    elif late and early:
        delay = f"touch {EARLY_MARK}.$SLURM_PROCID; "
    kind = words[0]
    if kind == "exit":
        body = f"exit {words[1]}"
    elif kind == "segv":
        body = "kill -SEGV $$"
    elif kind == "kill":
        body = "kill -KILL $$"
    elif kind == "timeout":
        body = "timeout 0.1 sleep 10; exit $?"  # a real time-out: 124
    else:
        raise ValueError(action)
    return delay + body


def task_script(layout, actions, late=False):
    """sh -c script: each role's rank does its action, every other rank
    exits 0 (or does the "*" action)."""
    timed = late and any(a.startswith("late ") for a in actions.values())
    early = sum(1 for role, a in actions.items() if role != "*" and not a.startswith("late ")) if timed else 0
    assert not timed or "*" not in actions, "a late action waits for named ranks only"
    default = "exit 0"
    cases = []
    seen = set()
    for role, action in actions.items():
        if role == "*":
            default = action_sh(action, late)
            continue
        rank = layout.roles[role]
        assert rank not in seen, f"two roles on rank {rank}"
        seen.add(rank)
        cases.append(f"{rank}) {action_sh(action, late, early)};;")
    return f'case "$SLURM_PROCID" in {" ".join(cases)} *) {default};; esac'


def report_lines(text):
    """The plugin's own lines on srun's stderr (report, warnings)."""
    return [line for line in text.splitlines() if line.startswith("exitpolicy:")]


def mentions(text):
    return [line for line in text.splitlines() if "exitpolicy" in line]


def srun(cluster, workdir, *args, user=None, env=None, timeout=60):
    return cluster.exec("srun", *args, user=user, cwd=workdir, env=env, timeout=timeout)


def next_job_id(cluster, workdir):
    """Allocates a tiny job and returns its id (job ids only grow)."""
    rc, out, err = srun(cluster, workdir, "-N1", "-n1", "printenv", "SLURM_JOB_ID")
    assert rc == 0, err
    return int(out.strip())


def validate_report(doc):
    try:
        import jsonschema
    except ImportError:
        pytest.fail(
            "python3-jsonschema is not installed (apt-get install python3-jsonschema): "
            "cannot validate the JSON report against docs/report.schema.json",
            pytrace=False,
        )
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=str)
    assert not errors, "JSON report does not match docs/report.schema.json:\n" + "\n".join(
        f"  {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors
    )


# The design's reference table ("main = rank 0"), with first-failure and
# lowest-rank derived from their definitions, then cases that tell the
# policies apart. Expected codes in POLICIES order:
#   max, main-rank, all-success, main-rank-check, first-failure, lowest-rank
# main: the role of the main rank ("far": --exit-main-rank on another node).
REFERENCE = [
    ("all-succeed", "r0", {}, (0, 0, 0, 0, 0, 0)),
    ("main-segfaults", "r0", {"r0": "segv"}, (139, 139, 1, 139, 139, 139)),
    ("another-fails", "r0", {"other": "exit 1"}, (1, 0, 1, 1, 1, 1)),
    ("all-fail", "r0", {"*": "exit 1"}, (1, 1, 1, 1, 1, 1)),
    ("main-times-out", "r0", {"r0": "timeout"}, (124, 124, 1, 124, 124, 124)),
    ("main-oom-killed", "r0", {"r0": "kill"}, (137, 137, 1, 137, 137, 137)),
    ("main-ok-other-segfaults", "r0", {"other": "segv"}, (139, 0, 1, 1, 139, 139)),
]
DISTINGUISHING = [
    # the other rank fails first with 7, the main rank later with 2
    ("other-first-main-later", "r0", {"r0": "late exit 2", "other": "exit 7"},
     (7, 2, 1, 2, 7, 2)),
    # a higher rank segfaults first, a lower rank exits 5 later
    ("higher-rank-segfaults-first", "r0", {"other": "late exit 5", "other2": "segv"},
     (139, 0, 1, 1, 139, 5)),
    # any signal beats any code, even a code above 128+11
    ("signal-beats-higher-code", "r0", {"r0": "late exit 200", "other": "segv"},
     (139, 200, 1, 200, 139, 200)),
    # the main rank is SIGKILLed after another rank failed with 3: as far as
    # anyone can tell, a teardown's collateral; the root cause's 3 decides
    # (max keeps Slurm's literal rule)
    ("main-killed-after-other-failed", "r0", {"r0": "late kill", "other": "exit 3"},
     (137, 3, 1, 3, 3, 3)),
    # --exit-main-rank on another node: main fails with 7 (later), rank 0 with 2
    ("far-main-fails", "far", {"far": "late exit 7", "r0": "exit 2"},
     (7, 7, 1, 7, 2, 2)),
    # --exit-main-rank on another node succeeds, rank 0 fails with 2
    ("far-main-ok-rank0-fails", "far", {"r0": "exit 2"},
     (2, 0, 1, 1, 2, 2)),
]
ROWS = REFERENCE + DISTINGUISHING
ROWS_BY_NAME = {row[0]: row for row in ROWS}

# As an ordinary user: a representative subset.
NOBODY_ROWS = ["main-segfaults", "another-fails", "other-first-main-later", "far-main-fails"]


def _reference_params():
    params = []
    for layout in ("n4", "n8"):
        for row in ROWS:
            # The policies are the same code on every release: on those
            # tested beside the first, the reference rows in the layout of
            # several tasks a node (and the rows as an ordinary user) stand
            # for the rest.
            own = layout == "n4" or row not in REFERENCE
            params.append(pytest.param(layout, row, None, id=f"{layout}-{row[0]}-root",
                                       marks=[pytest.mark.own_code] if own else []))
    for name in NOBODY_ROWS:
        params.append(pytest.param("n8", ROWS_BY_NAME[name], NOBODY, id=f"n8-{name}-nobody"))
    return params


# --- 1. the reference table, all six policies, real tasks ---------------------


@pytest.mark.parametrize("layout_name, row, user", _reference_params())
def test_reference_table(cluster, workdir, exitpolicy, layout_name, row, user):
    layout = LAYOUTS[layout_name]
    name, main_role, actions, expected = row
    main = layout.roles[main_role]
    problems = []
    for policy, want in zip(POLICIES, expected):
        spelled = layout.spelling[policy]
        argv = [*layout.args, f"--exit-policy={spelled}"]
        if main_role != "r0":
            argv.append(f"--exit-main-rank={main}")
        # first-failure depends on the order of failures, and so does
        # whether a SIGKILL is collateral (after the first failure): only
        # then do the "late" actions wait.
        ordered = policy == "first-failure" or any(a.endswith("kill") for a in actions.values())
        script = task_script(layout, actions, late=ordered)
        rc, out, err = srun(cluster, workdir, *argv, "sh", "-c", script, user=user)
        lines = report_lines(err)
        if rc != want:
            problems.append(f"--exit-policy={spelled}: srun exited {rc}, expected {want}\n{err}")
            continue
        # auto report: when something failed (or the code is not Slurm's)
        if name == "all-succeed":
            if mentions(err + out):
                problems.append(f"--exit-policy={spelled}: unexpected output {mentions(err + out)}")
        else:
            head = f"exitpolicy: exit code {want} under policy {policy}: "
            if not lines or not lines[0].startswith(head):
                problems.append(f"--exit-policy={spelled}: report does not start with {head!r}:\n{err}")
    assert not problems, f"{layout.args} {name}:\n" + "\n".join(problems)


# --- 2. the report ---------------------------------------------------------------


@pytest.mark.parametrize("user", ROOT_AND_NOBODY)
def test_report_exact_lines(cluster, workdir, exitpolicy, user):
    rc, out, err = srun(
        cluster, workdir, "-N4", "-n8", "--exit-policy=main-rank",
        "sh", "-c", '[ "$SLURM_PROCID" = 5 ] && exit 3; exit 0', user=user,
    )
    assert rc == 0, err
    assert report_lines(err) == [
        "exitpolicy: exit code 0 under policy main-rank: main rank 0 on node1 exited with code 0",
        "exitpolicy: Slurm's native exit code would be 3",
        "exitpolicy: 8 tasks on 4 nodes: 7 succeeded, 1 failed",
        "exitpolicy: first failure: rank 5 on node3, exited with code 3",
        "exitpolicy:   rank 5 on node3: exited with code 3",
        "exitpolicy:   ranks 0-4,6-7 on node[1-4]: succeeded",
    ], err
    assert "exitpolicy" not in out


def test_report_names_signals_ranks_and_nodes(cluster, workdir, exitpolicy):
    # rank 6 (node4) is SIGKILLed first; a second after it comes to that,
    # ranks 3 (node2) and 5 (node3) segfault. (A SIGKILL after the first
    # failure would be labelled collateral: see
    # test_report_labels_collateral_teardown.)
    rc, out, err = srun(
        cluster, workdir, "-N4", "-n8", "--exit-policy=main-rank-check", "sh", "-c",
        f'case "$SLURM_PROCID" in 3|5) {wait_for_files_sh(f"{EARLY_MARK}.*", 1)}sleep 1; kill -SEGV $$;; '
        f'6) touch {EARLY_MARK}.$SLURM_PROCID; kill -KILL $$;; *) exit 0;; esac',
    )
    assert rc == 1, err
    lines = report_lines(err)
    assert lines[0].startswith("exitpolicy: exit code 1 under policy main-rank-check: "), err
    assert "exitpolicy: Slurm's native exit code would be 139" in lines, err
    assert "exitpolicy: 8 tasks on 4 nodes: 5 succeeded, 3 failed" in lines, err
    assert "exitpolicy: first failure: rank 6 on node4, killed by SIGKILL" in lines, err
    assert any(re.fullmatch(r"exitpolicy:   ranks 3,5 on node\[2-3\]: killed by SIGSEGV( \(core dumped\))?", l)
               for l in lines), err
    assert "exitpolicy:   rank 6 on node4: killed by SIGKILL" in lines, err
    assert "exitpolicy:   ranks 0-2,4,7 on node[1-4]: succeeded" in lines, err


def test_report_labels_collateral_teardown(cluster, workdir, exitpolicy):
    """srun -K tears the step down when rank 1 fails: the others' SIGTERM is
    collateral, and first-failure gives the root cause, not Slurm's 143."""
    rc, out, err = srun(
        cluster, workdir, "-K1", "-N4", "-n4", "--exit-policy=first-failure",
        f"--exit-report-json={workdir}/collateral-%j.json", "sh", "-c",
        '[ "$SLURM_PROCID" = 1 ] && exit 3; exec sleep 20',
    )
    assert rc == 3, err
    lines = report_lines(err)
    assert lines[0] == ("exitpolicy: exit code 3 under policy first-failure: "
                        "rank 1 on node2 exited with code 3, the first failure"), err
    assert "exitpolicy: first failure: rank 1 on node2, exited with code 3" in lines, err
    # SIGTERM, or SIGKILL for a task still starting when the teardown came:
    # one line per signal, every one collateral to rank 1.
    torn = [l for l in lines if "killed by SIG" in l]
    assert torn and all(l.endswith("(collateral: ended after rank 1 failed)") for l in torn), err
    assert "".join(torn).count("on node") == len(torn) and len(torn) <= 2, err
    # By its name: the teardown may come before any task printed its job id.
    written = list(workdir.glob("collateral-*.json"))
    assert len(written) == 1, written
    doc = json.loads(written[0].read_text())
    validate_report(doc)
    assert doc["counts"]["collateral"] == 3
    assert [t["collateral"] for t in doc["tasks"]] == [True, False, True, True]
    assert doc["native_exit_code"] in (137, 143)


def test_a_task_that_exits_143_on_the_teardowns_sigterm_is_collateral(cluster, workdir, exitpolicy):
    """A shell script's task says the teardown's SIGTERM in its own code
    (128 + 15) and ends a second later, past the reaction window: collateral
    to rank 1's failure all the same, never a failure of its own. Rank 1
    fails only once the others have their trap: on a loaded machine, a task
    still starting when srun -K's signal comes dies of it instead. The
    signal reaches the shell and its child one after the other, in either
    order: the shell says 143 whichever hears it first (a bare `wait` says
    0 when the child dies first and the shell ends before its own signal
    comes)."""
    rc, out, err = srun(
        cluster, workdir, "-K1", "-N4", "-n4", "--exit-policy=first-failure",
        f"--exit-report-json={workdir}/shell-%j.json", "bash", "-c",
        f'if [ "$SLURM_PROCID" = 1 ]; then {wait_for_files_sh("trapped.$SLURM_JOB_ID.*", 3)}exit 3; fi; '
        'trap "sleep 1; exit 143" TERM; touch trapped.$SLURM_JOB_ID.$SLURM_PROCID; '
        'sleep 20 & wait $!; code=$?; sleep 1; exit $code',
    )
    assert rc == 3, err
    lines = report_lines(err)
    shells = [l for l in lines if "exited with code 143" in l]
    assert shells == ["exitpolicy:   ranks 0,2-3 on node[1,3-4]: exited with code 143 "
                      "(collateral: ended after rank 1 failed)"], err
    written = list(workdir.glob("shell-*.json"))
    assert len(written) == 1, written
    doc = json.loads(written[0].read_text())
    ends = [(t["code"], t["collateral"]) for t in doc["tasks"]]
    assert ends == [(143, True), (3, False), (143, True), (143, True)], doc["tasks"]


@pytest.mark.parametrize("user", ROOT_AND_NOBODY)
def test_report_never_and_always(cluster, workdir, exitpolicy, user):
    fail = '[ "$SLURM_PROCID" = 5 ] && exit 3; exit 0'
    json_path = workdir / f"never-{user}-%j.json"
    # never: no line from us, the policy's code all the same, JSON still written
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", "--exit-policy=main-rank", "--exit-report=never",
                        f"--exit-report-json={json_path}", "sh", "-c", fail, user=user)
    assert rc == 0, err
    assert mentions(err + out) == [], err
    written = list(workdir.glob(f"never-{user}-*.json"))
    assert len(written) == 1, written
    assert json.loads(written[0].read_text())["exit_code"] == 0
    # always: a report even when all succeed (and auto says nothing then)
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", "--exit-policy=main-rank", "--exit-report=ALWAYS",
                        "true", user=user)
    assert rc == 0, err
    lines = report_lines(err)
    assert lines and lines[0].startswith("exitpolicy: exit code 0 under policy main-rank: "), err
    assert "exitpolicy: 8 tasks on 4 nodes: 8 succeeded, 0 failed" in lines, err
    assert "exitpolicy:   ranks 0-7 on node[1-4]: succeeded" in lines, err
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", "--exit-policy=main-rank", "--exit-report=auto",
                        "true", user=user)
    assert rc == 0 and mentions(err + out) == [], err


@pytest.mark.parametrize("user", ROOT_AND_NOBODY)
def test_json_report(cluster, workdir, exitpolicy, user):
    """-N4 -n8, main rank 3 (node2) exits 5 a second after rank 6 (node4)
    segfaulted; policy given by its alias. The document validates against
    docs/report.schema.json and holds every task."""
    tag = "root" if user is None else "nobody"
    pattern = f"rep-{tag}-%j-%s.json"
    t0 = time.time()
    rc, out, err = srun(
        cluster, workdir, "-N4", "-n8", "--exit-policy=check-all-nodes", "--exit-main-rank=3",
        f"--exit-report-json={pattern}",  # relative: srun's working directory
        "sh", "-c",
        '[ "$SLURM_PROCID" = 0 ] && echo "$SLURM_JOB_ID $SLURM_STEP_ID"; '
        f'case "$SLURM_PROCID" in 3) {wait_for_files_sh(f"{EARLY_MARK}.*", 1)}sleep 1; exit 5;; '
        f'6) touch {EARLY_MARK}.$SLURM_PROCID; kill -SEGV $$;; *) exit 0;; esac',
        user=user,
    )
    t1 = time.time()
    assert rc == 5, err
    job, step = out.split()
    written = sorted(p.name for p in workdir.glob(f"rep-{tag}-*"))
    assert written == [f"rep-{tag}-{job}-{step}.json"], written
    assert step == "0"
    path = workdir / written[0]
    if user is not None:
        assert path.stat().st_uid == user  # written by srun, as the user
    doc = json.loads(path.read_text())
    validate_report(doc)

    assert doc["version"] == 1
    assert (doc["job_id"], doc["step_id"]) == (job, step)
    assert doc["policy"] == "main-rank-check"  # alias resolved
    assert doc["main_rank"] == 3
    assert doc["lost_code"] == 1
    assert doc["exit_code"] == rc
    assert doc["native_exit_code"] == 139
    assert doc["reason"] == "main_rank_failed"
    assert doc["deciding_rank"] == 3
    assert doc["first_failure_rank"] == 6
    assert doc["abort"] is None
    assert doc["counts"] == {"tasks": 8, "nodes": 4, "succeeded": 6, "failed": 2, "lost": 0, "collateral": 0}
    # the summary's first line says the same in words
    assert f"exitpolicy: exit code 5 under policy main-rank-check: {doc['explanation']}" in report_lines(err), err

    tasks = doc["tasks"]
    assert [t["rank"] for t in tasks] == list(range(8))
    for t in tasks:
        r = t["rank"]
        assert t["node"] == f"node{r // 2 + 1}", t
        assert t["epoch"] == 0 and t["aborted"] is False and t["abort_status"] is None, t
        assert t["finalized"] is None and t["collateral"] is False, t
        assert isinstance(t["pid"], int) and t["pid"] > 0, t
        assert (t0 - 1) * 1e6 <= t["end_time_us"] <= (t1 + 1) * 1e6, t
        if r == 3:
            assert (t["state"], t["exit_code"], t["wait_status"], t["code"], t["succeeded"]) == \
                ("exited", 5, 5 << 8, 5, False), t
            assert (t["signal"], t["signal_name"], t["core_dumped"]) == (None, None, False), t
            assert t["description"] == "exited with code 5", t
        elif r == 6:
            assert (t["state"], t["exit_code"], t["signal"], t["signal_name"], t["code"], t["succeeded"]) == \
                ("signaled", None, 11, "SIGSEGV", 139, False), t
            assert t["wait_status"] & 0x7F == 11, t
            assert t["core_dumped"] == bool(t["wait_status"] & 0x80), t
            assert t["description"].startswith("killed by SIGSEGV"), t
        else:
            assert (t["state"], t["exit_code"], t["wait_status"], t["code"], t["succeeded"]) == \
                ("exited", 0, 0, 0, True), t
            assert (t["signal"], t["signal_name"]) == (None, None), t
    assert tasks[6]["end_time_us"] < tasks[3]["end_time_us"]


def test_json_report_unwritable_path_fails_open(cluster, workdir, exitpolicy):
    """An ordinary user's JSON path that cannot be written: one warning, and
    srun still ends with the policy's code and prints its report."""
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", "--exit-policy=main-rank",
                        "--exit-report-json=/root/exitpolicy-%j.json", "sh", "-c",
                        '[ "$SLURM_PROCID" = 5 ] && exit 3; exit 0', user=NOBODY)
    assert rc == 0, err
    warnings = [l for l in report_lines(err) if l.startswith("exitpolicy: warning:")]
    assert len(warnings) == 1 and "/root/exitpolicy-" in warnings[0], err
    assert warnings[0].endswith(": Permission denied (srun's exit code is not affected)"), err
    assert report_lines(err)[0].startswith("exitpolicy: exit code 0 under policy main-rank: "), err


# --- 3. sbatch/salloc defaults, the environment, the command line -------------------


JOB_SCRIPT = """#!/bin/sh
srun -N4 -n8 /bin/sh -c '[ "$SLURM_PROCID" = 5 ] && exit 3; exit 0'
echo "step0 rc=$?"
srun -N4 -n8 /bin/sh -c '[ "$SLURM_PROCID" = 0 ] && exit 4; [ "$SLURM_PROCID" = 3 ] && exit 9; exit 0'
echo "step1 rc=$?"
"""


def _run_batch(cluster, workdir, tag, *sbatch_args, user=None):
    script = workdir / f"job-{tag}.sh"
    script.write_text(JOB_SCRIPT.replace("\n", "\n" + cluster.job_path_prefix(), 1))
    script.chmod(0o755)
    rc, out, err = cluster.exec(
        "sbatch", "--wait", "-N4", "-n8", "-o", f"{workdir}/job-{tag}-%j.out", *sbatch_args, str(script),
        user=user, cwd=workdir, timeout=90,
    )
    assert rc == 0, out + err
    job = re.search(r"Submitted batch job (\d+)", out).group(1)
    return job, (workdir / f"job-{tag}-{job}.out").read_text()


@pytest.mark.parametrize("user", ROOT_AND_NOBODY)
def test_sbatch_policy_applies_to_every_step(cluster, workdir, exitpolicy, user):
    """sbatch --exit-policy=main-rank: step 0 (rank 5 fails, native 3) gives
    0, step 1 (main rank exits 4, rank 3 exits 9) gives 4. Both steps write
    their JSON (%s: 0 and 1) with the right nodes."""
    tag = "sbatch-root" if user is None else "sbatch-nobody"
    job, output = _run_batch(cluster, workdir, tag, "--exit-policy=main-rank",
                             f"--exit-report-json={workdir}/{tag}-%j-%s.json", user=user)
    assert "step0 rc=0" in output.splitlines(), output
    assert "step1 rc=4" in output.splitlines(), output
    assert "exitpolicy: exit code 0 under policy main-rank: main rank 0 on node1 exited with code 0" in output
    assert "exitpolicy: exit code 4 under policy main-rank: main rank 0 on node1 exited with code 4" in output
    for step, code, native in (("0", 0, 3), ("1", 4, 9)):
        doc = json.loads((workdir / f"{tag}-{job}-{step}.json").read_text())
        validate_report(doc)
        assert (doc["job_id"], doc["step_id"], doc["policy"]) == (job, step, "main-rank")
        assert (doc["exit_code"], doc["native_exit_code"]) == (code, native)
        assert [t["node"] for t in doc["tasks"]] == [f"node{r // 2 + 1}" for r in range(8)]


def test_a_job_arrays_report_paths_take_its_array_ids(cluster, workdir, exitpolicy):
    """A job array of 2 whose script's srun writes exit-%A_%a.%s.json: one
    file per array task, named as srun names its own --output (%A the
    array's job id, %a the task's index), each with its own job id."""
    script = workdir / "job-array.sh"
    script.write_text("#!/bin/sh\n" + cluster.job_path_prefix() +
                      f"srun -N1 -n1 --exit-policy=main-rank --exit-report-json={workdir}/exit-%A_%a.%s.json "
                      "sh -c 'exit $SLURM_ARRAY_TASK_ID'\n")
    script.chmod(0o755)
    rc, out, err = cluster.exec("sbatch", "--wait", "--array=1-2", "-N1", "-n1", "-o", f"{workdir}/array-%A_%a.out",
                                str(script), cwd=workdir, timeout=90)
    array = re.search(r"Submitted batch job (\d+)", out).group(1)
    docs = {p.name: json.loads(p.read_text()) for p in workdir.glob("exit-*.json")}
    assert sorted(docs) == [f"exit-{array}_1.0.json", f"exit-{array}_2.0.json"], (sorted(docs), out, err)
    for index in (1, 2):
        doc = docs[f"exit-{array}_{index}.0.json"]
        validate_report(doc)
        assert doc["exit_code"] == index, doc
    assert len({d["job_id"] for d in docs.values()}) == 2, "the array's tasks are jobs of their own"


def _heterogeneous_steps(cluster, workdir, alloc, steps):
    """Runs `steps` (name -> a command line) one after another in one
    allocation made by salloc `alloc`; each step's code, stderr, and JSON
    report (het-NAME.json when asked for) by name, and the job's id."""
    script = workdir / "het.sh"
    lines = ["#!/bin/sh\n", cluster.job_path_prefix(), "echo job=$SLURM_JOB_ID\n"]
    for name, args in steps.items():
        lines.append(f"{args} 2>{workdir}/{name}.err\necho {name}=$?\n")
    script.write_text("".join(lines))
    script.chmod(0o755)
    rc, out, err = cluster.exec("salloc", *alloc, str(script), cwd=workdir, timeout=180)
    assert rc == 0, f"salloc {rc}:\n{out}\n{err}"
    codes = dict(line.split("=", 1) for line in out.split() if "=" in line)
    results = {}
    for name in steps:
        report = workdir / f"het-{name}.json"
        doc = json.loads(report.read_text()) if report.exists() else None
        results[name] = (int(codes[name]), (workdir / f"{name}.err").read_text(), doc)
    return results, codes["job"]


# Each task exits 3 + its rank, the step's rank (SLURM_PROCID, across
# components).
BY_RANK = "sh -c 'exit $((SLURM_PROCID + 3))'"


@pytest.mark.parametrize("shape", ["het-job", "one-job"])
def test_a_heterogeneous_step_is_decided_with_every_rank(cluster, workdir, exitpolicy, shape):
    """srun A : B. In a heterogeneous job (salloc -n1 : -n2) each component
    is a job of its own; in one job's allocation the components are parts
    of one step (Slurm's step_het_comp). Either way every component's ranks
    reach srun as the step's (rank 0 is component 0's first), the report
    names the components, and main-rank-check sees the second component's
    failure. Before, main-rank-check said 0 with a JSON of 1 of 3 ranks,
    and then the plugin refused such steps."""
    if shape == "het-job":
        alloc = ["-N1", "-n1", ":", "-N1", "-n2"]
        one, two = "-n1", "-n2"
    else:
        alloc = ["-N3", "-n3"]
        one, two = "-N1 -n1", "-N2 -n2"
    steps = {
        "check": f"srun --exit-policy=main-rank-check --exit-report=always --exit-report-json={workdir}/het-check.json "
                 f"{one} true : {two} sh -c 'exit 3'",
        "main": f"srun --exit-policy=main-rank {one} sh -c 'exit 5' : {two} true",
        "lowest": f"srun --exit-policy=lowest-rank --exit-report-json={workdir}/het-lowest.json "
                  f"{one} true : {two} {BY_RANK}",
        # A batch script's default for its every step.
        "env": f"SLURM_EXIT_POLICY=lowest-rank srun {one} true : {two} {BY_RANK}",
        "none": f"srun {one} true : {two} sh -c 'exit 3'",
    }
    got, job = _heterogeneous_steps(cluster, workdir, alloc, steps)
    print({name: (code, report_lines(err)) for name, (code, err, _) in got.items()})

    code, err, doc = got["check"]
    assert code == 1, err
    lines = report_lines(err)
    assert "exitpolicy: heterogeneous step: component 0 rank 0, component 1 ranks 1-2" in lines, err
    assert any(l.startswith("exitpolicy: 3 tasks on ") for l in lines), err
    assert any("first failure: rank 1 (component 1) on " in l or "first failure: rank 2 (component 1) on " in l
               for l in lines), err
    validate_report(doc)
    assert doc["components"] == [0, 1], doc
    assert [(t["rank"], t["exit_code"]) for t in doc["tasks"]] == [(0, 0), (1, 3), (2, 3)], doc["tasks"]
    assert doc["job_id"] == job, "the step's first job"

    code, err, _ = got["main"]
    assert code == 5, err
    # lowest-rank: rank 1 exits 4 (Slurm's highest is rank 2's 5).
    code, err, doc = got["lowest"]
    assert code == 4, err
    assert "Slurm's native exit code would be 5" in err, err
    assert [(t["rank"], t["exit_code"]) for t in doc["tasks"]] == [(0, 0), (1, 4), (2, 5)], doc["tasks"]
    assert got["env"][0] == 4, got["env"]
    # Nothing asked: Slurm's code, no report.
    assert got["none"][0] == 3 and report_lines(got["none"][1]) == [], got["none"]


def test_a_heterogeneous_job_that_srun_makes_is_decided_with_every_rank(cluster, workdir, exitpolicy):
    """srun -n1 A : -n2 B outside any allocation: srun makes the
    heterogeneous job itself, and its id is known only after the options
    are read (the front end's port is reserved before)."""
    rc, out, err = srun(cluster, workdir, "--exit-policy=main-rank-check", "-n1", "true", ":", "-n2",
                        "sh", "-c", "exit 3", timeout=120)
    assert rc == 1, err
    assert "exitpolicy: heterogeneous step: component 0 rank 0, component 1 ranks 1-2" in report_lines(err), err


def test_sbatch_policy_with_export_none(cluster, workdir, exitpolicy):
    """--export=NONE must not lose the job's policy (sbatch --exit-policy is
    the default of every srun in the job: README, "Options")."""
    job, output = _run_batch(cluster, workdir, "sbatch-export-none", "--export=NONE",
                             "--exit-policy=main-rank")
    assert "step0 rc=0" in output.splitlines(), output
    assert "step1 rc=4" in output.splitlines(), output
    assert not [l for l in output.splitlines() if l.startswith("exitpolicy: warning:")], output


def test_sbatch_exit_recoverable_is_every_steps_default(cluster, workdir, exitpolicy):
    """sbatch --exit-recoverable, a flag: the job script's sruns take it as
    yes (the batch step got it as an empty value, and every srun of the job
    then stopped on "SLURM_EXIT_RECOVERABLE: invalid value ''")."""
    script = workdir / "job-recoverable.sh"
    script.write_text("#!/bin/sh\n" + cluster.job_path_prefix() +
                      'echo "recoverable=$SLURM_EXIT_RECOVERABLE"\n'
                      'srun -N2 -n2 --mpi=none sh -c \'echo "ft=${OMPI_MCA_mpi_ft_enable-unset}"\'\n'
                      'echo "step0 rc=$?"\n')
    script.chmod(0o755)
    rc, out, err = cluster.exec("sbatch", "--wait", "-N2", "-n2", "-o", f"{workdir}/job-recoverable-%j.out",
                                "--exit-recoverable", "--exit-policy=main-rank", str(script), cwd=workdir, timeout=90)
    assert rc == 0, out + err
    job = re.search(r"Submitted batch job (\d+)", out).group(1)
    output = (workdir / f"job-recoverable-{job}.out").read_text()
    lines_ = output.splitlines()
    assert "recoverable=yes" in lines_, output
    assert "step0 rc=0" in lines_, output
    assert lines_.count("ft=1") == 2, output  # a run-through step's tasks: Open MPI's fault tolerance on


def test_srun_policy_with_export_none(cluster, workdir, exitpolicy):
    """srun --export=NONE (or a list of variables) still gets its policy."""
    for export in ("--export=NONE", "--export=PATH"):
        rc, out, err = srun(cluster, workdir, export, "-N4", "-n8", "--exit-policy=main-rank",
                            "/bin/sh", "-c", '[ "$SLURM_PROCID" = 5 ] && exit 3; exit 0')
        assert rc == 0, f"{export}: {err}"
        assert report_lines(err)[0].startswith("exitpolicy: exit code 0 under policy main-rank: "), err


def test_salloc_policy_applies_to_every_step(cluster, workdir, exitpolicy):
    rc, out, err = cluster.exec(
        "salloc", "-N4", "-n8", "--exit-policy=main-rank", "/bin/sh", "-c",
        "srun /bin/sh -c '[ \"$SLURM_PROCID\" = 5 ] && exit 3; exit 0'; echo \"step0 rc=$?\"; "
        "srun /bin/sh -c '[ \"$SLURM_PROCID\" = 0 ] && exit 4; [ \"$SLURM_PROCID\" = 3 ] && exit 9'; "
        "echo \"step1 rc=$?\"",
        cwd=workdir,
    )
    assert rc == 0, err
    assert out.splitlines() == ["step0 rc=0", "step1 rc=4"], out + err


@pytest.mark.parametrize("user", ROOT_AND_NOBODY)
def test_environment_and_command_line(cluster, workdir, exitpolicy, user):
    """SLURM_EXIT_* set the step's options; the command line wins."""
    rank5 = '[ "$SLURM_PROCID" = 5 ] && exit 3; exit 0'          # native 3
    two = 'case "$SLURM_PROCID" in 5) exit 7;; 0) exit 2;; *) exit 0;; esac'
    cases = [
        # env, options, script, expected rc, report expected
        ({"SLURM_EXIT_POLICY": "main-rank"}, [], rank5, 0, True),
        ({"SLURM_EXIT_POLICY": "Rank0"}, [], rank5, 0, True),
        ({"SLURM_EXIT_POLICY": "main-rank"}, ["--exit-policy=max"], rank5, 3, True),
        ({"SLURM_EXIT_POLICY": "bogus"}, ["--exit-policy=main-rank"], rank5, 0, True),
        ({"SLURM_EXIT_POLICY": "main-rank", "SLURM_EXIT_MAIN_RANK": "5"}, [], two, 7, True),
        ({"SLURM_EXIT_POLICY": "main-rank", "SLURM_EXIT_MAIN_RANK": "5"}, ["--exit-main-rank=0"], two, 2, True),
        ({"SLURM_EXIT_POLICY": "main-rank", "SLURM_EXIT_REPORT": "never"}, [], rank5, 0, False),
        ({"SLURM_EXIT_POLICY": "main-rank", "SLURM_EXIT_REPORT": "never"}, ["--exit-report=auto"], rank5, 0, True),
    ]
    problems = []
    for env, options, script, want, reported in cases:
        rc, out, err = srun(cluster, workdir, "-N4", "-n8", *options, "sh", "-c", script, user=user, env=env)
        if rc != want:
            problems.append(f"{env} {options}: rc {rc}, expected {want}\n{err}")
        elif bool(report_lines(err)) != reported:
            problems.append(f"{env} {options}: report {'missing' if reported else 'unexpected'}\n{err}")
    assert not problems, "\n".join(problems)

    tag = "root" if user is None else "nobody"
    rc, out, err = srun(cluster, workdir, "-N4", "-n4", "sh", "-c",
                        '[ "$SLURM_PROCID" = 0 ] && echo "$SLURM_JOB_ID"; exit 0', user=user,
                        env={"SLURM_EXIT_POLICY": "lowest-rank",
                             "SLURM_EXIT_REPORT_JSON": f"{workdir}/env-{tag}-%j.%s.json"})
    assert rc == 0, err
    doc = json.loads((workdir / f"env-{tag}-{out.strip()}.0.json").read_text())
    validate_report(doc)
    assert doc["policy"] == "lowest-rank" and doc["reason"] == "all_succeeded"


def test_site_default_policy_and_report(cluster, workdir, plugstack):
    rank5 = '[ "$SLURM_PROCID" = 5 ] && exit 3; exit 0'
    plugstack.enable("grace_ms=3000", "default_policy=rank0", "report=never")
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", "sh", "-c", rank5)
    assert rc == 0 and mentions(err + out) == [], err
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", "--exit-report=auto", "sh", "-c", rank5)
    assert rc == 0, err
    assert report_lines(err)[0].startswith("exitpolicy: exit code 0 under policy main-rank: "), err
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", "--exit-policy=max", "sh", "-c", rank5)
    assert rc == 3, err


def test_boundary_plugstack_values_are_accepted(cluster, workdir, plugstack):
    plugstack.enable("grace_ms=0", "lost_code=255", "fanout=1024", "port_range=61010-61010",
                     "pmix=never", "debug=0", "report=AUTO", "allowed_policies=main-rank,MAX",
                     "default_policy=max")
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", "--exit-policy=main-rank", "sh", "-c",
                        '[ "$SLURM_PROCID" = 5 ] && exit 3; exit 0')
    assert rc == 0, err
    assert report_lines(err)[0].startswith("exitpolicy: exit code 0 under policy main-rank: "), err
    assert not [l for l in mentions(err) if "error" in l or "warning" in l], err


def test_output_is_not_lost(cluster, workdir, exitpolicy):
    """srun ends with _exit(code) under a policy: every task's output is
    still there."""
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", "--exit-policy=main-rank", "sh", "-c",
                        'seq 1 20000 | sed "s/^/$SLURM_PROCID /"; [ "$SLURM_PROCID" = 7 ] && exit 3; exit 0')
    assert rc == 0, err[-2000:]
    lines = out.splitlines()
    assert len(lines) == 160000
    for r in range(8):
        assert f"{r} 20000" in lines


# --- 4. invalid inputs -------------------------------------------------------------

# id, plugstack arguments (None: defaults), environment, srun options,
# expected message (substring), outcome:
#   "before-allocation": srun fails, nothing allocated, the step does not run
#   "fails":             srun fails, the step does not run
#   "native":            the plugin disables itself; the step runs with
#                        Slurm's native code, --exit-* options ignored with a warning
INVALID = [
    ("opt-policy-bogus", None, {}, ["--exit-policy=bogus"],
     "exitpolicy: --exit-policy: invalid exit policy 'bogus': " + VALID_POLICIES, "before-allocation"),
    ("opt-policy-empty", None, {}, ["--exit-policy="],
     "exitpolicy: --exit-policy: invalid exit policy '': " + VALID_POLICIES, "before-allocation"),
    ("opt-main-rank-word", None, {}, ["--exit-policy=main-rank", "--exit-main-rank=abc"],
     "exitpolicy: --exit-main-rank: invalid main rank 'abc'", "before-allocation"),
    ("opt-main-rank-negative", None, {}, ["--exit-policy=main-rank", "--exit-main-rank=-1"],
     "exitpolicy: --exit-main-rank: invalid main rank '-1'", "before-allocation"),
    ("opt-main-rank-out-of-range", None, {}, ["--exit-policy=main-rank", "--exit-main-rank=4"],
     "exitpolicy: main rank 4 is not a task of this step: ", "fails"),
    ("opt-report", None, {}, ["--exit-policy=main-rank", "--exit-report=sometimes"],
     "exitpolicy: --exit-report: invalid exit report mode 'sometimes': valid modes are auto, always, never",
     "before-allocation"),
    ("opt-report-json-empty", None, {}, ["--exit-policy=main-rank", "--exit-report-json="],
     "exitpolicy: --exit-report-json: expected a file path", "before-allocation"),
    ("env-policy", None, {"SLURM_EXIT_POLICY": "nope"}, [],
     "exitpolicy: SLURM_EXIT_POLICY: invalid exit policy 'nope': " + VALID_POLICIES, "before-allocation"),
    ("env-main-rank-word", None, {"SLURM_EXIT_MAIN_RANK": "x"}, ["--exit-policy=main-rank"],
     "exitpolicy: SLURM_EXIT_MAIN_RANK: invalid main rank 'x'", "before-allocation"),
    ("env-main-rank-out-of-range", None, {"SLURM_EXIT_MAIN_RANK": "9"}, ["--exit-policy=main-rank"],
     "exitpolicy: main rank 9 is not a task of this step: ", "fails"),
    ("env-report", None, {"SLURM_EXIT_REPORT": "loud"}, ["--exit-policy=main-rank"],
     "exitpolicy: SLURM_EXIT_REPORT: invalid exit report mode 'loud': valid modes are auto, always, never",
     "before-allocation"),
    ("opt-policy-not-allowed", ["allowed_policies=max,main-rank"], {}, ["--exit-policy=first-failure"],
     "exitpolicy: --exit-policy: exit policy 'first-failure' is not allowed on this cluster; allowed: max, main-rank",
     "before-allocation"),
    ("env-policy-not-allowed", ["allowed_policies=max,main-rank"], {"SLURM_EXIT_POLICY": "lowest-rank"}, [],
     "exitpolicy: SLURM_EXIT_POLICY: exit policy 'lowest-rank' is not allowed on this cluster; "
     "allowed: max, main-rank", "before-allocation"),
    # plugstack.conf arguments: the plugin disables itself, the step runs natively
    ("plugstack-grace-word", ["grace_ms=abc"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf argument grace_ms=abc is invalid: expected milliseconds, 0 to 600000", "native"),
    ("plugstack-grace-too-big", ["grace_ms=600001"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf argument grace_ms=600001 is invalid: expected milliseconds, 0 to 600000", "native"),
    ("plugstack-lost-code", ["lost_code=256"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf argument lost_code=256 is invalid: expected an exit code, 0 to 255", "native"),
    ("plugstack-fanout", ["fanout=1"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf argument fanout=1 is invalid: expected a tree fan-out, 2 to 1024", "native"),
    ("plugstack-port-range-reversed", ["port_range=6000-5000"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf argument port_range=6000-5000 is invalid: expected FIRST-LAST", "native"),
    ("plugstack-port-range-too-big", ["port_range=70000-70001"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf argument port_range=70000-70001 is invalid: expected FIRST-LAST", "native"),
    ("plugstack-debug", ["debug=4"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf argument debug=4 is invalid: expected a level, 0 to 3", "native"),
    ("plugstack-pmix", ["pmix=maybe"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf argument pmix=maybe is invalid: expected auto or never", "native"),
    ("plugstack-daemon-relative", ["daemon=bin/exitpolicy-pmixd"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf argument daemon=bin/exitpolicy-pmixd is invalid: expected an absolute path",
     "native"),
    ("plugstack-log-dir-relative", ["log_dir=logs"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf argument log_dir=logs is invalid: expected an absolute path", "native"),
    ("plugstack-report", ["report=sometimes"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf report: invalid exit report mode 'sometimes': valid modes are auto, always, never",
     "native"),
    ("plugstack-default-policy", ["default_policy=nope"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf default_policy: invalid exit policy 'nope': " + VALID_POLICIES, "native"),
    ("plugstack-allowed-policies", ["allowed_policies=max,bogus"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf allowed_policies: invalid exit policy 'bogus': " + VALID_POLICIES, "native"),
    ("plugstack-default-not-allowed", ["default_policy=main-rank", "allowed_policies=max"], {},
     ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf default_policy=main-rank is not among allowed_policies (max)", "native"),
    ("plugstack-unknown", ["colour=blue"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: unknown plugstack.conf argument 'colour'; valid arguments: default_policy=POLICY", "native"),
    ("plugstack-not-key-value", ["verbose"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf argument 'verbose' is not KEY=VALUE", "native"),
    ("plugstack-twice", ["grace_ms=1", "grace_ms=2"], {}, ["--exit-policy=main-rank"],
     "exitpolicy: plugstack.conf argument grace_ms is given twice", "native"),
]
INVALID_NOBODY = ["opt-policy-bogus", "env-policy", "opt-main-rank-out-of-range", "plugstack-grace-word"]


def _invalid_params():
    params = [pytest.param(*case, None, id=f"{case[0]}-root") for case in INVALID]
    params += [pytest.param(*case, NOBODY, id=f"{case[0]}-nobody") for case in INVALID if case[0] in INVALID_NOBODY]
    return params


@pytest.mark.parametrize("case_id, plug_args, env, options, message, outcome, user", _invalid_params())
def test_invalid_input(cluster, workdir, plugstack, case_id, plug_args, env, options, message, outcome, user):
    plugstack.enable(*(plug_args if plug_args is not None else ["grace_ms=3000"]))
    tag = f"{case_id}-{'root' if user is None else 'nobody'}"
    marker = workdir / f"ran-{tag}"
    # -N4 -n4; rank 1 (node2) fails with 3: natively srun gives 3, under
    # main-rank it would give 0.
    script = (f'touch {marker}; [ "$SLURM_PROCID" = 0 ] && echo "$SLURM_JOB_ID"; '
              '[ "$SLURM_PROCID" = 1 ] && exit 3; exit 0')
    before = next_job_id(cluster, workdir) if outcome == "before-allocation" else None
    rc, out, err = srun(cluster, workdir, "-N4", "-n4", *options, "sh", "-c", script, user=user, env=env)
    with_message = [line for line in err.splitlines() if message in line]
    assert len(with_message) == 1, f"expected one line with {message!r}:\n{err}"

    if outcome in ("before-allocation", "fails"):
        assert rc != 0, err
        assert not marker.exists(), "the step ran"
        assert not report_lines(err) or all(l.startswith("exitpolicy: warning:") for l in report_lines(err)), err
        if before is not None:
            assert next_job_id(cluster, workdir) == before + 1, "srun allocated a job before failing"
        return

    # native: the step ran as without the plugin; the options were ignored with a warning
    assert rc == 3, err
    assert marker.exists(), "the step did not run"
    warnings = [l for l in report_lines(err) if l.startswith("exitpolicy: warning:")]
    assert len(warnings) == 1 and "ignored" in warnings[0], err
    assert [l for l in report_lines(err) if not l.startswith("exitpolicy: warning:")] == [], err
    # ... and the same error, once per step, in every node's Slurm log
    job = out.strip()
    for k in range(1, 5):
        log = (cluster.dir / "log" / f"slurmd.node{k}.log").read_text(errors="replace")
        hits = [l for l in log.splitlines() if f"[{job}.0]" in l and message in l]
        assert len(hits) == 1, f"node{k}: {hits}"


def test_plugstack_error_without_options_is_quiet(cluster, workdir, plugstack):
    """No --exit-* option: the configuration error and nothing else."""
    plugstack.enable("grace_ms=soon")
    rc, out, err = srun(cluster, workdir, "-N4", "-n4", "sh", "-c", '[ "$SLURM_PROCID" = 1 ] && exit 3; exit 0')
    assert rc == 3, err
    lines = mentions(err)
    assert len(lines) == 1 and "grace_ms=soon is invalid" in lines[0], err


def test_sbatch_invalid_policy(cluster, workdir, exitpolicy):
    rc, out, err = cluster.exec("sbatch", "--exit-policy=bogus", "--wrap", "true", cwd=workdir)
    assert rc != 0
    assert "Submitted batch job" not in out
    assert "exitpolicy: --exit-policy: invalid exit policy 'bogus': " + VALID_POLICIES in err, err


# --- 5. loaded, but no policy asked: Slurm's own codes ----------------------------------


@pytest.mark.parametrize("layout_name", ["n4", "n8"])
def test_no_policy_keeps_native_codes(cluster, workdir, plugstack, layout_name):
    layout = LAYOUTS[layout_name]
    cases = []
    for name, main_role, actions, expected in ROWS:
        cases.append((name, task_script(layout, actions), expected[0]))

    def run_all():
        got = {}
        for name, script, _ in cases:
            rc, out, err = srun(cluster, workdir, *layout.args, "sh", "-c", script)
            got[name] = (rc, mentions(out + err))
        return got

    plugstack.disable()
    without = run_all()
    plugstack.enable("grace_ms=3000")
    loaded = run_all()
    assert {n: rc for n, (rc, _) in loaded.items()} == {n: rc for n, (rc, _) in without.items()}
    assert {n: m for n, (_, m) in loaded.items() if m} == {}
    # and the max column of the table is Slurm's own rule, as measured here
    assert {n: rc for n, (rc, _) in without.items()} == {name: want for name, _, want in cases}


# --- 6. fail open ----------------------------------------------------------------

LISTENER = r"""
import socket, sys
socks = []
for port in range(int(sys.argv[1]), int(sys.argv[2]) + 1):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # The previous step's front end may have left the port in TIME_WAIT.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(16)
    socks.append(s)
print("ready", flush=True)
sys.stdin.read()  # hold the ports until the test closes our stdin
"""

FAIL_OPEN_PORTS = (61000, 61001)  # above the namespace's ephemeral range (32768-60999)


@pytest.mark.parametrize("user", ROOT_AND_NOBODY)
def test_fail_open_when_front_end_cannot_listen(cluster, workdir, plugstack, user):
    first, last = FAIL_OPEN_PORTS
    plugstack.enable("grace_ms=3000", f"port_range={first}-{last}")
    script = '[ "$SLURM_PROCID" = 5 ] && exit 3; exit 0'
    holder = subprocess.Popen(
        [str(cluster.SCRIPT), "exec", "/usr/bin/python3", "-c", LISTENER, str(first), str(last)],
        env=cluster.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        ready, _, _ = select.select([holder.stdout], [], [], 20)
        assert ready and holder.stdout.readline().strip() == "ready", holder.stderr.read()
        t0 = time.monotonic()
        rc, out, err = srun(cluster, workdir, "-N4", "-n8", "--exit-policy=main-rank", "sh", "-c", script,
                            user=user)
        elapsed = time.monotonic() - t0
    finally:
        holder.stdin.close()
        try:
            holder.wait(timeout=10)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
    assert rc == 3, err  # Slurm's native code
    lines = mentions(err + out)
    assert len(lines) == 1 and lines[0].startswith("exitpolicy: warning:"), err
    assert elapsed < 3, f"srun took {elapsed:.1f} s"

    # the ports free again: the same step gets its policy
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", "--exit-policy=main-rank", "sh", "-c", script, user=user)
    assert rc == 0, err


# --- a report without a policy: shown, srun's code stays Slurm's -----------------

def test_report_without_policy_keeps_native_code(cluster, workdir, exitpolicy):
    """--exit-report=always or --exit-report-json without --exit-policy: the
    report is shown under max (Slurm's own rule) and srun's code is Slurm's."""
    script = 'case "$SLURM_PROCID" in 5) exit 3;; 2) kill -SEGV $$;; esac; exit 0'
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", "--exit-report=always", "sh", "-c", script)
    assert rc == 139, err
    lines = report_lines(err)
    assert lines[0] == ("exitpolicy: exit code 139 under policy max: rank 2 on node2 killed by SIGSEGV, "
                        "the highest signal (any signal beats any exit code)"), err
    assert "exitpolicy:   rank 5 on node3: exited with code 3" in lines, err

    path = workdir / "report-only.json"
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", f"--exit-report-json={path}", "sh", "-c", script)
    assert rc == 139, err
    assert report_lines(err) == [], err  # auto report: no policy was asked
    doc = json.loads(path.read_text())
    validate_report(doc)
    assert doc["policy"] == "max" and doc["exit_code"] == 139 and doc["counts"]["failed"] == 2


def test_disabled_plugin_warns_about_environment_policy(cluster, workdir, plugstack):
    plugstack.enable("grace_ms=soon")
    rc, out, err = srun(cluster, workdir, "-N4", "-n4", "sh", "-c", '[ "$SLURM_PROCID" = 1 ] && exit 3; exit 0',
                        env={"SLURM_EXIT_POLICY": "main-rank"})
    assert rc == 3, err
    warnings = [l for l in report_lines(err) if l.startswith("exitpolicy: warning:")]
    assert warnings == ["exitpolicy: warning: the plugin is disabled by a plugstack.conf error (see above or the "
                        "Slurm log; ask your administrator); --exit-* options and SLURM_EXIT_* variables are "
                        "ignored"], err


def readme_quick_start():
    """The README's quick start: [(srun's arguments, the lines it prints,
    the code `echo $?` prints)], from its one block of `$ srun ...; echo $?`
    ("..." stands for lines of Slurm's own that it leaves out)."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text[text.index("## Quick start"):]
    block = section[section.index("```\n") + 4:section.index("\n```", section.index("```\n") + 4)]
    runs = []
    for line in block.splitlines():
        if line.startswith("$ "):
            command, echo = line[2:].rsplit("; ", 1)
            assert echo == "echo $?", line
            runs.append((shlex.split(command), []))
        else:
            runs[-1][1].append(line)
    return [(argv, printed[:-1], int(printed[-1])) for argv, printed in runs]


def test_the_readmes_quick_start_is_what_srun_prints(cluster, workdir, exitpolicy):
    """Every command of the README's quick start, run as written: srun ends
    with that code, prints the plugin's lines exactly as shown, and Slurm's
    too (a Slurm release may add lines of its own, and "..." leaves out
    those whose step id, time or order differ from run to run)."""
    runs = readme_quick_start()
    assert len(runs) == 2, runs
    for argv, printed, code in runs:
        assert argv[0] == "srun", argv
        rc, out, err = srun(cluster, workdir, *argv[1:])
        assert rc == code, err
        assert report_lines(err) == [l for l in printed if l.startswith("exitpolicy:")], err
        for line in printed:
            assert line.startswith("exitpolicy:") or line == "..." or line in err.splitlines(), \
                f"{line!r} not in\n{err}"


def readme_usage_lines():
    """Every command line of the README's "Options" section (its sh blocks),
    without its comment."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text[text.index("## Options"):text.index("## Install")]
    lines = []
    for block in section.split("```sh\n")[1:]:
        for line in block[:block.index("```")].splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command:
                lines.append(command)
    return lines


def test_the_readmes_usage_lines_run_as_written(cluster, workdir, exitpolicy):
    """Each command the README shows under "Options" runs as written, in a
    directory where ./app, ./mpi_app and job.sh are programs that succeed:
    srun and sbatch accept every option and value as the README spells
    them, and each step ends with 0."""
    lines = readme_usage_lines()
    assert len(lines) >= 7, lines
    for name in ("app", "mpi_app", "job.sh"):
        program = workdir / name
        program.write_text("#!/bin/sh\nexit 0\n")
        program.chmod(0o755)
    for line in lines:
        argv = shlex.split(line)
        assert argv[0] in ("srun", "sbatch"), line
        rc, out, err = cluster.exec(*argv, cwd=workdir, timeout=60)
        assert rc == 0, f"{line}: {err}"
        assert "warning" not in err and "error" not in err, f"{line}: {err}"
        if argv[0] == "sbatch":
            job = re.search(r"Submitted batch job (\d+)", out)
            assert job, out
            for _ in range(300):
                rc, state, _ = cluster.exec("squeue", "-h", "-j", job.group(1), timeout=30)
                if rc != 0 or not state.strip():  # gone (an unknown id is an error)
                    break
                time.sleep(0.1)
            else:
                pytest.fail(f"{line}: job {job.group(1)} still queued or running after 30 s")
    assert list(workdir.glob("exit-*.json")), "the JSON report was not written"


def test_a_main_rank_without_policy_is_named_as_the_user_gave_it(cluster, workdir, exitpolicy):
    """The warning names the option or the variable that was really used."""
    script = '[ "$SLURM_PROCID" = 1 ] && exit 3; exit 0'
    rc, out, err = srun(cluster, workdir, "-N2", "-n2", "--exit-main-rank=1", "sh", "-c", script)
    assert rc == 3, err
    assert [l for l in report_lines(err) if "warning" in l] == [
        "exitpolicy: warning: --exit-main-rank has no effect without --exit-policy (or SLURM_EXIT_POLICY)"], err
    rc, out, err = srun(cluster, workdir, "-N2", "-n2", "sh", "-c", script, env={"SLURM_EXIT_MAIN_RANK": "1"})
    assert rc == 3, err
    assert [l for l in report_lines(err) if "warning" in l] == [
        "exitpolicy: warning: SLURM_EXIT_MAIN_RANK has no effect without --exit-policy (or SLURM_EXIT_POLICY)"], err


# --- the direct path: slurmstepd straight to srun (pmix=never, no node daemon) ------

@pytest.mark.parametrize("policy, code", [("main-rank", 0), ("lowest-rank", 3), ("max", 139), ("all-success", 1)])
def test_direct_path_without_node_daemons(cluster, workdir, plugstack, policy, code):
    plugstack.enable("pmix=never", "grace_ms=3000")
    script = 'case "$SLURM_PROCID" in 3) exit 3;; 6) kill -SEGV $$;; esac; exit 0'
    path = workdir / f"direct-{policy}.json"
    rc, out, err = srun(cluster, workdir, "-N4", "-n8", f"--exit-policy={policy}", f"--exit-report-json={path}",
                        "sh", "-c", script)
    assert rc == code, err
    doc = json.loads(path.read_text())
    validate_report(doc)
    assert doc["exit_code"] == code and doc["counts"]["tasks"] == 8 and doc["counts"]["lost"] == 0
    assert [t["node"] for t in doc["tasks"]] == [f"node{r // 2 + 1}" for r in range(8)]


# --- srun --async (Slurm 26.05): the step manager launches the step, srun waits for none of it ---

def test_async_steps_refuse_a_policy_asked_for_and_run_without_one_from_the_environment(new_cluster, exitpolicy_so,
                                                                                       workdir):
    """srun --async returns once slurmctld has the step: no task's end, and
    no code but 0, ever reaches it. A policy asked for on srun's command
    line is refused before anything is submitted; one from the environment
    (a batch script's, for its every step) lets the step run as Slurm runs
    it, with one line that says so; a program's own --async argument is
    not srun's."""
    c = new_cluster(1, slurm_conf_extra="PrologFlags=contain\nSlurmctldParameters=enable_stepmgr")
    proc = c.up()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rc, out, err = c.exec("srun", "--help", cwd=workdir)
    if "--async" not in out + err:
        pytest.skip("this Slurm has no srun --async (26.05 and later)")
    Plugstack(c, exitpolicy_so).enable("grace_ms=3000")
    ran = workdir / f"async-ran-{time.time_ns()}"
    script = (
        f"srun --async --exit-policy=main-rank -N1 -n1 touch {ran}; echo asked=$?; "
        f"SLURM_EXIT_POLICY=main-rank srun --async -N1 -n1 sh -c 'touch {ran}; exit 3'; echo env=$?; "
        "srun --exit-policy=main-rank -N1 -n1 sh -c 'exit 4' --async; echo program=$?")
    rc, out, err = c.exec("salloc", "-N1", "--stepmgr", "sh", "-c", script, cwd=workdir, timeout=90)
    assert rc == 0, out + err
    assert "asked=1" in out, out + err
    refusals = [l for l in err.splitlines() if "do not apply to srun --async" in l]
    assert len(refusals) == 1 and "sacct" in refusals[0], err
    assert out.count("Submitted step") == 1, out + err  # the refused one was never submitted
    assert "env=0" in out, out + err
    assert [l for l in report_lines(err) if "warning" in l] == [
        "exitpolicy: warning: SLURM_EXIT_* variables are ignored for this step: srun --async returns before the "
        "step runs, so no task's end reaches it; its exit code is in sacct (-o ExitCode,DerivedExitCode)"], err
    assert "program=4" in out, out + err  # the policy applied: sh's $0 was "--async"
    deadline = time.time() + 30
    while not ran.exists() and time.time() < deadline:
        time.sleep(0.1)
    assert ran.exists(), "the async step from the environment's policy never ran"
