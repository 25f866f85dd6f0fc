# SPDX-License-Identifier: Apache-2.0
"""A short soak on the real 4-node cluster: bench/soak_bench.py with 12
steps in a row (two of each of its six kinds: success, a non-main rank's
exit 3, a segfault, a PMIx fence, an Open MPI ring, an MPI_Abort) and one
wave of 4 at once, then its MPI steps beside Slurm's mpi/pmix. Every code
must be right and exitpolicy must leave nothing behind: no daemon, no test
program, nothing new in /tmp or /dev/shm.

`bash bench/run.sh soak` is the long run (150 steps, 3 waves) with the
figures.
"""

import json
import os
import pathlib
import subprocess

import pytest

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
SOURCE = pathlib.Path(os.environ.get("EXITPOLICY_SOURCE_DIR") or REPO)
BUILD = pathlib.Path(os.environ.get("EXITPOLICY_BUILD_DIR") or REPO / "build")
STEPS, WAVES = 12, 1
TIMEOUT = 900


def test_steps_that_end_every_way_leave_nothing_behind(cluster, workdir, plugstack):
    clients = BUILD / "tests" / "clients"
    for name in ("ep_fence", "ep_mpi_ring", "ep_mpi_fail"):
        if not (clients / name).is_file():
            pytest.fail(f"{clients / name} is missing: build the project first", pytrace=False)
    # The script writes the plugstack line itself and leaves it enabled;
    # the plugstack fixture removes it after the test, as the next test expects.
    proc = cluster.popen("/usr/bin/python3", SOURCE / "bench" / "soak_bench.py", plugstack.so, clients,
                         plugstack.file.parent, STEPS, WAVES, cwd=workdir)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"soak_bench.py still running after {TIMEOUT} s\n--- stdout\n{out}--- stderr\n{err}")
    output = f"soak_bench.py exited with {proc.returncode}\n--- stdout\n{out}--- stderr\n{err}"
    found = [line for line in out.splitlines() if line.startswith("soak-json ")]
    assert len(found) == 1, output
    figures = json.loads(found[0].split(" ", 1)[1])
    assert proc.returncode == 0, output
    assert figures["wrong_codes"] == 0, output
    assert figures["left_ours"] == [], output
    assert figures["steps"] == STEPS + 4 * WAVES, output
