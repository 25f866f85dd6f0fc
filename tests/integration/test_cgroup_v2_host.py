# SPDX-License-Identifier: Apache-2.0
"""test_cgroups.py's cgroup/v2 setups on a host with cgroup v2 alone, every
controller there, as a site's cgroup v2 node has it: in a guest that
contrib/vm boots (this machine's file system, a Debian kernel), since this
machine's cgroups are a v1/v2 hybrid whose v2 has no memory controller.
There ConstrainRAMSpace constrains, the kernel's OOM killer ends a task in
its own cgroup, and the report must name that rank from its cgroup's
memory.events; on the hybrid host those tests skip.

It boots a guest, so it runs only where tests/run.sh asks
(EXITPOLICY_RUN_VM=1, this machine's release) and where contrib/vm can
boot one (contrib/vm check says why not).
"""

import os
import pathlib
import re
import subprocess
from xml.etree import ElementTree

import pytest

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
VM = REPO / "contrib" / "vm"

# The tests that skip where v2 constrains no memory: each must have run.
MEMORY_TESTS = [
    "test_the_rank_the_oom_killer_ends_is_named[v2-run-on]",
    "test_the_rank_the_oom_killer_ends_is_named[v2-srun-K]",
    "test_an_oom_killed_main_rank_gives_137_under_main_rank[v2-srun-K]",
    "test_an_oom_killed_main_rank_gives_137_under_main_rank[v2-KillOnBadExit]",
]


# What a host with cgroup v2 alone changes: memory constrained (the OOM
# tests), and a step's end with every controller there (the trivial step,
# never held; the daemon's cgroup and OOM score). The guest's CPU is
# emulated (this machine offers no usable KVM), some ten times slower: the
# rest of test_cgroups.py runs on the hybrid's v2 against SchedMD's Slurm.
SELECTED = "v2 and not signal and (oom or trivial)"


@pytest.mark.skipif(os.environ.get("EXITPOLICY_RUN_VM") != "1",
                    reason="boots a guest: tests/run.sh runs it on this machine's release (EXITPOLICY_RUN_VM=1)")
def test_cgroup_v2_setups_on_a_host_with_cgroup_v2_alone(tmp_path):
    check = subprocess.run(["bash", str(VM), "check"], capture_output=True, text=True)
    if check.returncode != 0:
        pytest.skip(check.stdout.strip())
    build = os.environ.get("EXITPOLICY_BUILD_DIR", str(REPO / "build"))
    names = ["EXITPOLICY_SOURCE_DIR", "EXITPOLICY_BUILD_DIR", "EXITPOLICY_SLURM_PREFIX",
             "EXITPOLICY_BESIDE_FIRST_RELEASE", "EXITPOLICY_CGROUP_UNKILLABLE"]
    # Its CPU is emulated, and shared with the releases tested beside it:
    # a longer UnkillableStepTimeout, the bounds of a step not held with it.
    env = dict(os.environ, EXITPOLICY_SOURCE_DIR=str(REPO), EXITPOLICY_BUILD_DIR=build,
               EXITPOLICY_CGROUP_UNKILLABLE="60")
    os.chmod(tmp_path, 0o755)
    junit = tmp_path / "junit.xml"
    args = ["bash", str(VM), "--share", str(tmp_path)]
    for name in names:
        args += ["--env", name]
    args += ["--", "/usr/bin/python3", "-m", "pytest", "-v", "-p", "no:cacheprovider", "-rs", "-k", SELECTED,
             f"--junitxml={junit}", str(REPO / "tests" / "integration" / "test_cgroups.py")]
    run = subprocess.run(args, env=env, cwd=build, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=2400)
    # The guest's console: the kernel's lines, then pytest's.
    output = "\n".join(l for l in run.stdout.splitlines() if not re.match(r"\[ *\d+\.\d+\] ", l))
    print(output)
    assert run.returncode == 0, f"contrib/vm {run.returncode}:\n{output}"
    # A guest whose v2 gave no memory controller would skip them: each ran.
    assert "controllers: cpuset cpu io memory" in output, output
    # Each test's outcome, from pytest's report the guest wrote here.
    outcomes = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name")] = kinds[0] if kinds else "passed"
    for name in MEMORY_TESTS + ["test_a_trivial_step_ends_as_without_the_plugin[v2]",
                                "test_the_daemon_scores_for_the_oom_killer_as_a_task[v2]"]:
        assert outcomes.get(name) == "passed", f"{name}: {outcomes.get(name, 'not run')} in the guest:\n{output}"
    assert "ConstrainRAMSpace=no" not in output, output
