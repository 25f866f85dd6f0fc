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
  every task, so that its teardown ends them all;
- another user who plants directories named as dead steps' of the node
  and traces every rm of their own: root never runs one for them (it did,
  as the planter, and waited on the traced rm past every bound);
- another user who floods a step's PMIx port with connections before its
  clients start: they are still served (the gate held the flood and shut
  the step's own clients out);
- a daemon its user made hostile, which answers slurmstepd's Stop with a
  flood of acks: root reads what the node's tasks need and a bounded rest
  (it read everything until its bound, and srun lost the outcome);
- another user who forges lines of /proc/net/unix (sockets whose paths
  hold a newline, then a line naming the inode of the step's own socket
  in a directory of theirs) as a step starts: its clients get the node's
  topology, never the attacker's XML (they got it);
- another user who plants FIFOs under the names of future steps' daemon
  logs in a shared log_dir: each daemon refuses its FIFO at once and
  serves (it waited in open() for ever, and the step's clients with it);
- another user who plants a FIFO, a link to a file of theirs and a file
  of theirs under a user's JSON report path in a shared directory:
  refused with a warning, nothing written, srun ends at once (srun waited
  on the FIFO for ever, and wrote the report through the link and into
  their file).
"""

import json
import os
import pathlib
import shutil
import stat
import subprocess
import tempfile
import time

import pytest

from conftest import Plugstack
from test_pmix import client, hwloc_xml, srun

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
                           "srun", "--mpi=none", "-N1", "-wnode1", "-n2", "--exit-policy=first-failure", str(script),
                           cwd=workdir)
    try:
        env = pmix_environment_of("ep_abort", 0)
        env["PMIX_RANK"] = "1"
        shim = pathlib.Path(client("ep_claim_uid.so"))
        # The intruder: uid 4242 on node1, the victim's PMIx environment as
        # rank 1, claiming uid/gid 65534.
        rc, out, err = cluster.exec(
            "env", "-i", "PATH=/usr/bin:/bin", f"LD_PRELOAD={shim}", f"EP_CLAIM_UID={cluster.NOBODY}",
            f"EP_CLAIM_GID={cluster.NOBODY}", *[f"{k}={v}" for k, v in env.items()],
            client("ep_abort"), "--status", "42", "--rank", "1", "--timeout", "5",
            user=INTRUDER, cwd=workdir, timeout=30, on="node1")
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


# The planter's part (uid 4242): directories named as a step's of node1,
# each full of files so that an rm of one takes a while, their times an
# hour back (as a crashed node's would be).
PLANT = r"""
import os, sys, time
made = []
for i in range(int(sys.argv[2])):
    d = os.path.join(sys.argv[1], f"exitpolicy.{900000 + i}.0.node1.plant{i}")
    os.mkdir(d, 0o700)
    for f in range(2000):
        open(os.path.join(d, f"f{f}"), "w").close()
    then = time.time() - 3600
    os.utime(d, (then, then))
    made.append(d)
print("\n".join(made))
"""

# The tracer (uid 4242): seizes (ptrace) every rm of its own uid that
# starts, and holds it, stopped, until it is itself ended.
TRACE = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4206, 0x4207
held = set()
until = time.monotonic() + float(sys.argv[1])
print("tracing", flush=True)
while time.monotonic() < until:
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in held:
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "rm":
                    continue
            if os.stat(f"/proc/{pid}").st_uid != os.getuid():
                continue
        except OSError:
            continue
        p = ctypes.c_long(int(pid))
        if libc.ptrace(PTRACE_SEIZE, p, None, None) == 0 and libc.ptrace(PTRACE_INTERRUPT, p, None, None) == 0:
            held.add(int(pid))
            print(f"seized rm {pid}", flush=True)
    time.sleep(0.002)
"""


def test_directories_another_user_plants_are_never_removed_by_root_nor_hold_it(cluster, plugstack, workdir):
    plugstack.enable("grace_ms=3000")
    planted_count = 12
    plant = workdir / "plant.py"
    plant.write_text(PLANT)
    trace = workdir / "trace.py"
    trace.write_text(TRACE)
    rc, out, err = cluster.exec("/usr/bin/python3", str(plant), "/tmp", str(planted_count), user=INTRUDER, cwd=workdir)
    assert rc == 0, f"planting failed:\n{out}\n{err}"
    planted = [pathlib.Path(p) for p in out.split()]
    assert len(planted) == planted_count, out
    tracer = cluster.popen("setpriv", f"--reuid={INTRUDER}", f"--regid={INTRUDER}", "--clear-groups",
                           "/usr/bin/python3", str(trace), "120", cwd=workdir)
    try:
        assert tracer.stdout.readline().strip() == "tracing", tracer.stderr.read()
        # Another user's step on the node: its slurmstepd (root) sweeps
        # the node's stale step directories as it starts the step.
        rc, out, err = cluster.exec("setpriv", f"--reuid={cluster.NOBODY}", f"--regid={cluster.NOBODY}",
                                    "--clear-groups", "srun", "--mpi=none", "-N1", "-wnode1", "-n1",
                                    "--exit-policy=main-rank", "sh", "-c", "exit 4", cwd=workdir, timeout=90)
        assert rc == 4, f"srun {rc}:\n{out}\n{err}"
    finally:
        tracer.kill()
        traced, _ = tracer.communicate()
        kept = {p: p.is_dir() and len(os.listdir(p)) for p in planted}
        for p in planted:
            shutil.rmtree(p, ignore_errors=True)
    # Root never made the planter run an rm for it (there was nothing to
    # trace), and every planted directory is whole.
    assert "seized rm" not in traced, traced
    assert all(n == 2000 for n in kept.values()), kept


# The intruder's flood (uid 4242): as many connections to the step's PMIx
# port as the gate could hold and more, before the daemon wakes; then it
# lets the step's own clients start, and keeps its connections open.
FLOOD = r"""
import errno, os, pathlib, re, resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
uri_file, go_file, count = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3])
until = time.monotonic() + 30
while not uri_file.exists() and time.monotonic() < until:
    time.sleep(0.05)
port = int(re.search(r"tcp4://127\.0\.0\.1:(\d+)", uri_file.read_text()).group(1))
conns = []
for _ in range(count):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    except OSError as e:
        print(f"connect: {e}", flush=True)
        break
    conns.append(s)
print(f"opened {len(conns)}", flush=True)
time.sleep(1)
go_file.touch()
time.sleep(float(sys.argv[4]))
"""


def test_another_users_flood_of_connections_never_keeps_the_steps_clients_out(cluster, plugstack, workdir,
                                                                              daemon_logs):
    plugstack.enable("grace_ms=3000", f"log_dir={daemon_logs}", "debug=1")
    flood = workdir / "flood.py"
    flood.write_text(FLOOD)
    uri, go = workdir / "victim.uri", workdir / "victim.go"
    for f in (uri, go):
        f.unlink(missing_ok=True)
    # The victim's step: rank 0 says where its PMIx server is (what the
    # intruder could have read in /proc/net/tcp), and both ranks start
    # their PMIx clients once the intruder has flooded the port.
    script = workdir / "victim_flooded.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$SLURM_PROCID" = 0 ]; then echo "$PMIX_SERVER_URI41" > {uri}.tmp && mv {uri}.tmp {uri}; fi\n'
        f"i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done\n"
        f'exec {client("ep_hello")} --timeout 20\n'
    )
    script.chmod(0o755)
    intruder = cluster.popen("setpriv", f"--reuid={INTRUDER}", f"--regid={INTRUDER}", "--clear-groups",
                             "/usr/bin/python3", str(flood), str(uri), str(go), "4500", "40", cwd=workdir,
                             on="node1")
    try:
        rc, out, err = cluster.exec("setpriv", f"--reuid={cluster.NOBODY}", f"--regid={cluster.NOBODY}",
                                    "--clear-groups", "srun", "--mpi=none", "-N1", "-wnode1", "-n2",
                                    "--exit-policy=all-success", str(script), cwd=workdir, timeout=90)
    finally:
        intruder.kill()
        flooded, flood_err = intruder.communicate()
    assert "opened 4500" in flooded, f"{flooded}\n{flood_err}"
    assert rc == 0, f"srun {rc}:\n{out}\n{err}"
    assert sorted(l.split()[1] for l in out.splitlines() if l.startswith("hello ")) == ["rank=0", "rank=1"], out
    log = "".join(p.read_text() for p in daemon_logs.glob("exitpolicy-pmixd.*.log"))
    assert f"refused a PMIx connection from uid {INTRUDER}" in log, log


@pytest.fixture
def hostile_daemon(exitpolicy_so):
    """A root-owned directory with ep_flood_daemon in exitpolicy-pmixd's
    place, beside this build's real exitpolicy-detach (its standby)."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="exitpolicy-hostile-", dir="/tmp"))
    os.chmod(d, 0o755)
    shutil.copy(client("ep_flood_daemon"), d / "exitpolicy-pmixd")
    shutil.copy(exitpolicy_so.parent.parent / "pmix_server" / "exitpolicy-detach", d / "exitpolicy-detach")
    yield d / "exitpolicy-pmixd"
    shutil.rmtree(d, ignore_errors=True)


def test_a_daemon_that_floods_root_with_acks_is_read_no_further_than_its_tasks_need(cluster, plugstack, workdir,
                                                                                   daemon_logs, hostile_daemon):
    plugstack.enable("grace_ms=3000", f"log_dir={daemon_logs}", f"daemon={hostile_daemon}")
    # The task wakes its daemon (it connects to its PMIx port), waits for
    # it to have said ready (a daemon still starting at the step's end is
    # hung up on, never asked to stop), and exits 5: slurmstepd hands the
    # daemon that outcome, then asks it to stop, and the daemon floods it.
    script = workdir / "wake_and_exit.sh"
    script.write_text(
        "#!/bin/bash\n"
        'port=${PMIX_SERVER_URI41##*:}\n'
        'exec 3<>/dev/tcp/127.0.0.1/$port || exit 9\n'
        f"for _ in $(seq 600); do compgen -G '{daemon_logs}/ep_flood_daemon.*.ready' >/dev/null && exit 5; sleep 0.1; done\n"
        "exit 8\n"
    )
    script.chmod(0o755)
    started = time.monotonic()
    rc, out, err = cluster.exec("setpriv", f"--reuid={cluster.NOBODY}", f"--regid={cluster.NOBODY}",
                                "--clear-groups", "srun", "--mpi=none", "-N1", "-wnode1", "-n1", "--exit-policy=main-rank",
                                str(script), cwd=workdir, timeout=90)
    took = time.monotonic() - started
    # The daemon's last report is written once slurmstepd closed the link,
    # which may be after srun has returned, or never: the step's end may
    # kill it first, and then its last report is one of those it wrote as
    # it flooded (ended=running), at most a MiB short.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reports = [p.read_text() for p in daemon_logs.glob("ep_flood_daemon.*.report")]
        if reports and "ended=running" not in reports[0]:
            break
        time.sleep(0.2)
    left = {p.name: p.read_text(errors="replace")[-2000:] for p in daemon_logs.iterdir() if p.is_file()}
    assert len(reports) == 1, f"the daemon wrote no report: {reports}\n{err}\nin the log directory: {left}"
    assert reports[0].startswith("flooded "), f"slurmstepd never asked the daemon to stop: {reports[0]}\n{err}"
    print(f"flood: {reports[0].strip()}; srun took {took:.1f} s")
    assert rc == 5, f"srun {rc}:\n{out}\n{err}"
    fields = dict(kv.split("=") for kv in reports[0].split()[1:])
    # Root read the Stop's ack and the frames one task's acks need, then
    # at most 1 MiB more, and closed: what the socket buffers hold aside,
    # it took a few MiB at most (before: everything for 3 s, 426 MiB a
    # second).
    assert fields["ended"] in ("closed", "running"), reports[0]  # never a flood root read for 20 s
    assert int(fields["bytes"]) < 8 << 20, reports[0]


# The intruder (uid 4242) plants a FIFO under the name of each future
# step's daemon log, for the next job ids, on both nodes.
PLANT_FIFOS = r"""
import os, sys
logs, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for job in range(first, first + count):
    for node in ("node1", "node2"):
        path = f"{logs}/exitpolicy-pmixd.{job}.0 {node}.log"
        os.mkfifo(path)
        os.chmod(path, 0o666)  # past the umask: the step's user may open it
print(count * 2)
"""


def next_job_id(cluster):
    """The id the cluster's next job gets: one more than a job's run now."""
    rc, out, err = cluster.exec("srun", "-N1", "-n1", "sh", "-c", "echo $SLURM_JOB_ID")
    assert rc == 0 and out.strip().isdigit(), f"srun {rc}:\n{out}\n{err}"
    return int(out) + 1


def test_a_fifo_another_user_plants_as_a_steps_log_never_holds_its_daemon(cluster, plugstack, workdir, daemon_logs):
    logs = daemon_logs
    plugstack.enable("grace_ms=3000", f"log_dir={logs}")
    plant = workdir / "plant_fifos.py"
    plant.write_text(PLANT_FIFOS)
    rc, out, err = cluster.exec("/usr/bin/python3", str(plant), str(logs), str(next_job_id(cluster)), "400",
                                user=INTRUDER,
                                cwd=workdir)
    assert rc == 0 and out.strip() == "800", f"planting failed:\n{out}\n{err}"
    # User 65534's PMIx step over both nodes: each node's daemon opens
    # its log as it starts.
    t0 = time.monotonic()
    try:
        rc, out, err = cluster.exec("setpriv", f"--reuid={cluster.NOBODY}", f"--regid={cluster.NOBODY}",
                                    "--clear-groups", "srun", "--mpi=none", "-N2", "-n4", "--exit-policy=all-success",
                                    client("ep_fence"), "--timeout", "20", cwd=workdir, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the step still ran after 60 s: its daemons wait on the planted FIFOs", pytrace=False)
    took = time.monotonic() - t0
    assert rc == 0, f"srun {rc} after {took:.1f} s:\n{out}\n{err}"
    planted = [p for p in logs.iterdir() if p.name.startswith("exitpolicy-pmixd.")]
    assert len(planted) == 800 and all(stat.S_ISFIFO(p.lstat().st_mode) for p in planted), \
        sorted(p.name for p in planted if not stat.S_ISFIFO(p.lstat().st_mode))


# The intruder's plants under the victim's report paths: a FIFO, a link
# to a file of theirs, a file of theirs that anyone may write.
PLANT_REPORTS = r"""
import os, sys
d = sys.argv[1]
os.mkfifo(f"{d}/fifo.json")
os.chmod(f"{d}/fifo.json", 0o666)
for name in ("theirs", "planted.json"):
    with open(f"{d}/{name}", "w"):
        pass
    os.chmod(f"{d}/{name}", 0o666)
os.symlink(f"{d}/theirs", f"{d}/link.json")
"""


def test_what_another_user_plants_as_a_report_path_neither_takes_nor_holds_it(cluster, plugstack, workdir):
    plugstack.enable("grace_ms=3000")
    plant = workdir / "plant_reports.py"
    plant.write_text(PLANT_REPORTS)
    rc, out, err = cluster.exec("/usr/bin/python3", str(plant), str(workdir), user=INTRUDER, cwd=workdir)
    assert rc == 0, f"planting failed:\n{out}\n{err}"
    for name, why in (("fifo.json", "FIFO"), ("link.json", "symbolic link"), ("planted.json", f"uid {INTRUDER}")):
        path = workdir / name
        try:
            rc, out, err = cluster.exec("setpriv", f"--reuid={cluster.NOBODY}", f"--regid={cluster.NOBODY}",
                                        "--clear-groups", "srun", "-N1", "-n2", "--exit-policy=main-rank",
                                        f"--exit-report-json={path}", "sh", "-c", "exit 3", cwd=workdir, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"srun still ran after 60 s: it waits on the planted {name}", pytrace=False)
        assert rc == 3, f"{name}: srun {rc}:\n{out}\n{err}"
        assert f"the JSON report is not written to {path}: it" in err and why in err, f"{name}:\n{err}"
    # Nothing reached the intruder's files.
    assert (workdir / "theirs").read_text() == "" and (workdir / "planted.json").read_text() == ""
    assert stat.S_ISFIFO((workdir / "fifo.json").lstat().st_mode)
    # The user's own path still gets the report.
    rc, out, err = cluster.exec("setpriv", f"--reuid={cluster.NOBODY}", f"--regid={cluster.NOBODY}",
                                "--clear-groups", "srun", "-N1", "-n2", "--exit-policy=main-rank",
                                f"--exit-report-json={workdir}/mine.json", "sh", "-c", "exit 3", cwd=workdir,
                                timeout=60)
    assert rc == 3 and "not written" not in err, err
    assert json.loads((workdir / "mine.json").read_text())["exit_code"] == 3


# The intruder (uid 4242): waits for node1's step socket of job JOB in
# /proc/net/unix, then binds sockets whose paths forge lines naming that
# socket's inode in a directory of theirs, which holds their XML.
FORGE = r"""
import os, socket, sys, time
d, job, count, timeout, xml = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
theirs = f"{d}/e"
os.makedirs(theirs)
with open(f"{theirs}/hwloc_topo_whole.xml", "w") as f, open(xml) as src:
    f.write(src.read())
os.chmod(theirs, 0o755)
os.chmod(d, 0o755)  # the step's user's daemon reads it
want = f"/node1_{job}.0"
inode, until = None, time.monotonic() + timeout
while inode is None and time.monotonic() < until:
    with open("/proc/net/unix") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 8 and fields[7].endswith(want):
                inode = fields[6]
                break
if inode is None:
    print("no step socket", flush=True)
    sys.exit(1)
held = []
for i in range(count):
    prefix = f"{d}/z{i}\n0 0 0 0 0 0 {inode} "
    os.makedirs(prefix + theirs)
    s = socket.socket(socket.AF_UNIX)
    s.bind(prefix + theirs + f"/x_{job}.0")
    s.listen(1)
    held.append(s)
print(f"forged {count}", flush=True)
time.sleep(timeout)
"""


def test_another_user_forging_lines_of_proc_net_unix_cannot_choose_a_steps_topology(cluster, plugstack, workdir):
    plugstack.enable("grace_ms=3000")
    job = next_job_id(cluster)
    # slurmstepd waits 3 s between its step socket and exitpolicy's
    # init_post_opt (a plugin listed first): the intruder's window, every run.
    slow = cluster.dir / "etc" / "plugstack.d" / "00-slow.conf"
    slow.write_text(f"required {client('ep_slow_spank.so')} delay_ms=3000\n")
    theirs = pathlib.Path(tempfile.mkdtemp(prefix="ep-forge-", dir="/tmp"))
    os.chown(theirs, INTRUDER, INTRUDER)
    forge = workdir / "forge.py"
    forge.write_text(FORGE)
    xml = workdir / "theirs.xml"
    xml.write_text(hwloc_xml(7))  # 7 PUs: no node here has as many
    intruder = cluster.popen("setpriv", f"--reuid={INTRUDER}", f"--regid={INTRUDER}", "--clear-groups",
                             "/usr/bin/python3", str(forge), str(theirs), str(job), "200", "40", str(xml),
                             cwd=workdir, on="node1")  # /proc/net/unix is the node's network namespace's
    try:
        rc, out, err = cluster.exec("setpriv", f"--reuid={cluster.NOBODY}", f"--regid={cluster.NOBODY}",
                                    "--clear-groups", "srun", "--mpi=none", "-N1", "-wnode1", "-n2",
                                    client("ep_hello"), cwd=workdir, timeout=90)
        assert intruder.poll() is None, f"the intruder ended: {intruder.communicate()}"
    finally:
        slow.unlink(missing_ok=True)
        intruder.kill()
        forged, why = intruder.communicate()
        shutil.rmtree(theirs, ignore_errors=True)
    assert "forged 200" in forged, f"the intruder forged nothing: {forged}{why}\nsrun {rc}:\n{out}\n{err}"
    assert rc == 0, f"srun {rc}:\n{out}\n{err}"
    hello = [line for line in out.splitlines() if line.startswith("hello ")]
    assert len(hello) == 2, out + err
    assert all("topology_pus=7" not in line for line in hello), f"the clients got the intruder's XML:\n{out}"
