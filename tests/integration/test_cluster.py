# SPDX-License-Identifier: Apache-2.0
"""The local cluster itself (contrib/slurm/cluster) against real Slurm 22.05.

These pin down what every other integration test relies on: four distinct
nodes, srun's native exit codes passing through `cluster exec` unchanged,
ordinary users, per-step SPANK plugstack drop-ins, and a teardown that leaves
no process behind.
"""

import collections
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import CLUSTER_NET

pytestmark = pytest.mark.integration


def test_status_reports_healthy(cluster):
    proc = cluster.script("status")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "healthy: 4 node(s)" in proc.stdout
    for k in range(1, 5):
        assert f"node{k}/slurmd     running" in proc.stdout


def test_up_again_is_a_no_op(cluster):
    pid_file = cluster.dir / "run" / "slurmctld.pid"
    before = pid_file.read_text()
    proc = cluster.script("up", "4")
    assert proc.returncode == 0, proc.stderr
    assert "already up" in proc.stdout
    assert pid_file.read_text() == before


def test_tasks_spread_over_four_nodes(cluster, workdir):
    rc, out, err = cluster.exec("srun", "-N4", "-n8", "hostname", cwd=workdir)
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 8
    counts = collections.Counter(lines)
    assert set(counts) == {"node1", "node2", "node3", "node4"}
    assert all(n == 2 for n in counts.values()), counts  # CPUs=2 per node


def test_rank_placement_is_block(cluster, workdir):
    rc, out, err = cluster.exec(
        "srun", "-N4", "-n8", "sh", "-c", 'echo "$SLURM_PROCID $SLURMD_NODENAME"',
        cwd=workdir,
    )
    assert rc == 0, err
    placement = dict(line.split() for line in out.splitlines())
    assert placement == {str(r): f"node{r // 2 + 1}" for r in range(8)}


# Slurm 22.05.8's own srun exit codes, measured: a code is passed through; a
# task killed by signal N gives 128+N.
@pytest.mark.parametrize(
    "script, expected",
    [
        ("exit 0", 0),
        ("exit 3", 3),
        ("kill -SEGV $$", 139),
        ("kill -KILL $$", 137),
        ("kill -ABRT $$", 134),
    ],
)
def test_srun_exit_code_passes_through(cluster, workdir, script, expected):
    rc, _, err = cluster.exec("srun", "-N1", "-n1", "sh", "-c", script, cwd=workdir)
    assert rc == expected, err


def test_native_rule_highest_code(cluster, workdir):
    # ranks exit 0, 2, 4, 6: srun gives the highest code
    rc, _, err = cluster.exec(
        "srun", "-N4", "-n4", "sh", "-c", "exit $((SLURM_PROCID * 2))", cwd=workdir
    )
    assert rc == 6, err


def test_native_rule_signal_beats_code(cluster, workdir):
    # rank 3 exits 7, rank 1 segfaults: any signal beats any code
    rc, _, err = cluster.exec(
        "srun", "-N4", "-n4", "sh", "-c",
        '[ "$SLURM_PROCID" = 3 ] && exit 7; [ "$SLURM_PROCID" = 1 ] && kill -SEGV $$; exit 0',
        cwd=workdir,
    )
    assert rc == 139, err


def test_exec_passes_stdin_stdout_and_status(cluster, workdir):
    rc, out, _ = cluster.exec("sh", "-c", "cat; exit 7", input="abc\n", cwd=workdir)
    assert (rc, out) == (7, "abc\n")
    rc, out, _ = cluster.exec("srun", "-N1", "-n1", "cat", input="through srun\n", cwd=workdir)
    assert (rc, out) == (0, "through srun\n")


def test_exec_signal_death_is_the_commands_own(cluster, workdir):
    rc, _, _ = cluster.exec("sh", "-c", "kill -SEGV $$", cwd=workdir)
    assert rc == -signal.SIGSEGV


def test_exec_runs_inside_the_private_network(cluster, workdir):
    rc, out, err = cluster.exec("sh", "-c", "hostname; cat /proc/net/dev", cwd=workdir)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "login"
    interfaces = {line.split(":")[0].strip() for line in lines[3:]}
    if CLUSTER_NET == "nodes":  # the bridge and each node's end of its link
        assert interfaces == {"lo", "epbr0", *(f"epv{k}" for k in range(1, cluster.nodes + 1))}, out
    else:
        assert interfaces == {"lo"}, out


def test_on_runs_a_command_on_that_node(cluster, workdir):
    rc, out, err = cluster.exec("sh", "-c", "hostname; cat /proc/net/dev", cwd=workdir, on="node2")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "node2"
    interfaces = {line.split(":")[0].strip() for line in lines[3:]}
    assert interfaces == ({"lo", "eth0"} if CLUSTER_NET == "nodes" else {"lo"}), out
    rc, _, err = cluster.exec("true", cwd=workdir, on="node9")
    assert rc != 0 and "NODE must be one of node1..node4" in err, err


def test_each_node_has_its_own_address_when_asked(cluster, workdir):
    """EXITPOLICY_CLUSTER_NET=nodes: every node answers from its own
    address, as real nodes do (Open MPI 6's TCP pairs no two nodes whose
    only interface is one shared loopback)."""
    rc, out, err = cluster.exec("srun", "-N4", "-n4", "sh", "-c", 'echo "$(hostname) $(hostname -I)"', cwd=workdir)
    assert rc == 0, err
    addresses = {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines()}
    assert sorted(addresses) == ["node1", "node2", "node3", "node4"], out
    if CLUSTER_NET == "nodes":
        assert addresses == {f"node{k}": f"10.253.0.{k}" for k in range(1, 5)}, out
    else:  # loopback only: the same (no) address everywhere
        assert len(set(addresses.values())) == 1, out


def test_ordinary_user(cluster, workdir):
    rc, out, err = cluster.exec("srun", "-N2", "-n2", "true", user=cluster.NOBODY, cwd=workdir)
    assert rc == 0, err
    rc, out, err = cluster.exec(
        "srun", "-N2", "-n2", "sh", "-c", 'echo "$(id -u) $SLURMD_NODENAME"',
        user=cluster.NOBODY, cwd=workdir,
    )
    assert rc == 0, err
    lines = sorted(out.splitlines())
    # Two distinct nodes of the four (Slurm picks the idle ones).
    assert len(lines) == 2 and lines[0] != lines[1], out
    assert all(l in {f"{cluster.NOBODY} node{k}" for k in range(1, 5)} for l in lines), out


def test_ordinary_user_exit_code(cluster, workdir):
    rc, _, err = cluster.exec(
        "srun", "-N1", "-n1", "sh", "-c", "kill -SEGV $$", user=cluster.NOBODY, cwd=workdir
    )
    assert rc == 139, err


def test_plugstack_drop_in_is_read_per_step(cluster, workdir):
    """A SPANK plugin dropped into etc/plugstack.d takes effect for the next
    step, in srun and in slurmstepd on every node, without a restart."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the probe plugin")
    src = workdir / "probe.c"
    src.write_text(
        "#include <slurm/spank.h>\n"
        "SPANK_PLUGIN(exitpolicy_probe, 1);\n"
        "int slurm_spank_task_init(spank_t sp, int ac, char **av)\n"
        "{ return spank_setenv(sp, \"EXITPOLICY_PROBE\", ac > 0 ? av[0] : \"x\", 1); }\n"
    )
    plugin = workdir / "probe.so"
    subprocess.run([cc, "-shared", "-fPIC", f"-I{cluster.slurm_include_dir()}", "-o", str(plugin), str(src)],
                   check=True)
    drop_in = cluster.dir / "etc" / "plugstack.d" / "probe.conf"
    show = ["srun", "-N4", "-n4", "sh", "-c", 'echo "${EXITPOLICY_PROBE:-none}"']
    try:
        drop_in.write_text(f"required {plugin} hello\n")
        rc, out, err = cluster.exec(*show, cwd=workdir)
        assert rc == 0, err
        assert out.splitlines() == ["hello"] * 4
    finally:
        drop_in.unlink()
    rc, out, err = cluster.exec(*show, cwd=workdir)
    assert rc == 0, err
    assert out.splitlines() == ["none"] * 4


def test_non_root_is_refused(cluster):
    proc = subprocess.run(
        ["setpriv", f"--reuid={cluster.NOBODY}", f"--regid={cluster.NOBODY}",
         "--clear-groups", str(cluster.SCRIPT), "status"],
        env=cluster.env(), capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode != 0
    assert "must be run as root" in proc.stderr


def _alive(pid, start_time):
    """The process that had this pid and start time still exists (not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and fields[19] == start_time


def _start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def test_down_leaves_nothing(cluster, new_cluster, workdir):
    """A second cluster, busy with a running job and a stray client, is torn
    down completely; the session's cluster is not disturbed."""
    other = new_cluster(2)
    proc = other.up()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    inode = other.ns_inode()
    assert inode is not None and inode != cluster.ns_inode()
    inodes = other.inodes()
    assert inode in inodes and not inodes & cluster.inodes()

    job = subprocess.Popen(
        [str(cluster.SCRIPT), "exec", "srun", "-N2", "-n4", "sleep", "300"],
        env=other.env(), cwd=workdir,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    stray = subprocess.Popen(
        [str(cluster.SCRIPT), "exec", "sleep", "300"],
        env=other.env(), cwd=workdir,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        # wait until all 4 tasks and the stray sleep run inside the namespace
        deadline = time.monotonic() + 30
        while True:
            pids = cluster.ns_pids(inodes)
            sleeps = [p for p in pids if _comm(p) == "sleep"]
            if len(sleeps) >= 5:
                break
            assert time.monotonic() < deadline, f"job never started: {pids}"
            time.sleep(0.05)
        comms = collections.Counter(_comm(p) for p in pids)
        assert comms["slurmstepd"] >= 2 and comms["munged"] == 3, comms
        before = {p: _start_time(p) for p in pids}

        proc = other.down()
        assert proc.returncode == 0, proc.stdout + proc.stderr

        assert job.wait(timeout=10) != 0
        assert stray.wait(timeout=10) != 0
    finally:
        for p in (job, stray):
            if p.poll() is None:
                p.kill()
                p.wait()

    survivors = [p for p, t in before.items() if t is not None and _alive(p, t)]
    assert survivors == []
    assert cluster.ns_pids(inodes) == []
    assert not cluster.netns_mounted(other.dir)
    assert not (other.dir / "netns").exists()
    assert not list(other.dir.glob("nodes/node*/netns"))
    assert _processes_mentioning(str(other.dir) + "/") == []

    # idempotent, and the session's cluster is untouched
    assert other.down().returncode == 0
    assert cluster.script("status").returncode == 0
    rc, out, _ = cluster.exec("srun", "-N4", "-n4", "hostname", cwd=workdir)
    assert rc == 0 and len(out.splitlines()) == 4


def test_down_when_nothing_is_up(new_cluster):
    never = new_cluster(1)
    proc = never.down()
    assert proc.returncode == 0, proc.stderr
    rc, _, err = never.exec("true")
    assert rc == 125 and "no cluster is up" in err


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def _processes_mentioning(text):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            pass
    return found
