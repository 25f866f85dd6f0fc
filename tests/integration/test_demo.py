# SPDX-License-Identifier: Apache-2.0
"""The README's demo command, `bash contrib/demo`, run as written: it
builds its own tree, brings up its own 4-node cluster, runs its steps and
tears the cluster down. What it shows must be what the README says.

It builds a second tree (about 30 s through ccache, 3-4 min cold), so it
runs only when EXITPOLICY_RUN_DEMO=1: tests/run.sh sets it on this
machine's release, not in the other releases' root file systems, where
the demo's Debian 12 instructions do not apply.
"""

import os
import pathlib
import re
import shutil
import subprocess

import pytest

from test_exit_policy import readme_quick_start

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]


def demo_steps(output):
    """[(srun's arguments as shown, the lines it printed, its code)] from
    the demo's output: each step is a `$ srun ...` line, what srun printed,
    and `=> srun exited with N`."""
    steps = []
    for line in output.splitlines():
        if line.startswith("$ srun "):
            steps.append([line[2:], [], None])
        elif steps and steps[-1][2] is None:
            done = re.match(r"=> srun exited with (\d+)", line)
            if done:
                steps[-1][2] = int(done.group(1))
            else:
                steps[-1][1].append(line)
    return [tuple(s) for s in steps]


def plugin_lines(lines):
    return [l for l in lines if l.startswith("exitpolicy:")]


@pytest.mark.skipif(os.environ.get("EXITPOLICY_RUN_DEMO") != "1",
                    reason="builds a second tree: tests/run.sh runs it once (EXITPOLICY_RUN_DEMO=1)")
def test_the_readmes_demo_runs_and_shows_what_the_readme_says(tmp_path):
    build = os.environ.get("EXITPOLICY_BUILD_DIR", str(REPO / "build")) + "-demo"
    cluster_dir = "/tmp/exitpolicy-test-demo-cluster"
    env = dict(os.environ, EXITPOLICY_BUILD_DIR=build, EXITPOLICY_CLUSTER_DIR=cluster_dir)
    env.pop("EXITPOLICY_SLURM_PREFIX", None)  # the demo's default: Debian's Slurm
    if shutil.which("ccache") and env.get("CCACHE_DIR"):
        env.setdefault("CMAKE_C_COMPILER_LAUNCHER", "ccache")
        env.setdefault("CMAKE_CXX_COMPILER_LAUNCHER", "ccache")
    run = subprocess.run(["bash", str(REPO / "contrib" / "demo")], env=env, cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    output = run.stdout
    assert run.returncode == 0, output[-4000:]
    steps = demo_steps(output)
    codes = [code for _, _, code in steps]
    # The quick start (Slurm's rule, then main-rank), main-rank-check, the
    # PMIx clients' event, Open MPI's segfault, the rank the OOM killer
    # ends (where this machine has cgroup/v1), a bad policy name.
    oom = "(No cgroup/v1 memory hierarchy here" not in output
    assert len(steps) == 6 + oom, output
    assert codes[:3] == [143, 139, 1], output
    assert codes[4:] == [139, *([137] if oom else []), 255], output
    if oom:
        # Its node is whichever two Slurm picked (the step before may still
        # be leaving the first ones).
        assert any(re.search(r"rank 1 on node\d+, killed by the OOM killer \(SIGKILL\), memory limit 50M", l)
                   for l in plugin_lines(steps[5][1])), steps[5]
        # What sacct says of it: the step the OOM killer hit, and the
        # job's code, which is Slurm's srun's.
        sacct = output[output.index("$ sacct --name=demo-oom"):]
        assert re.search(r"^\d+\.0 +demo-oom +OUT_OF_ME\+ +0:125 ", sacct, re.M), sacct

    # The README's quick start is the demo's first two steps: the same
    # codes and the same report, line for line.
    readme = readme_quick_start()
    assert [code for _, _, code in readme] == codes[:2], readme
    for (_, printed, _), (command, lines, _) in zip(readme, steps[:2]):
        assert plugin_lines(lines) == plugin_lines(printed), f"{command}:\n" + "\n".join(lines)

    # Every survivor of the PMIx step heard of rank 4's end.
    events = [l for l in steps[3][1] if l.startswith("event ")]
    assert len(events) == 7, steps[3]
    assert all("affected=" in l and ":4 " in l for l in events), events
    assert any("invalid exit policy 'rank-zero'" in l for l in steps[-1][1]), steps[-1]

    # Nothing of the demo's cluster is left running.
    assert "cluster: 4-node cluster up" in output, output
    left = subprocess.run(["pgrep", "-f", cluster_dir], stdout=subprocess.PIPE, text=True)
    assert left.stdout == "", left.stdout
