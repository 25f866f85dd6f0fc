# SPDX-License-Identifier: Apache-2.0
"""Fixtures for integration tests against a real local Slurm cluster.

The cluster is contrib/slurm/cluster: real munged, slurmctld and one slurmd per
node (node1..node4) inside a private network namespace. The session fixture
`cluster` brings it up once and always brings it down again: in its own
teardown (also when tests fail or are interrupted with Ctrl-C), from an atexit
hook, and from SIGTERM/SIGHUP handlers, so that no test run leaves daemons
behind. `cluster down` is idempotent, so running it more than once is safe.

Run with Debian's interpreter (it has pytest and nothing else on PATH
matters): /usr/bin/python3 -m pytest tests/integration

Environment:
  EXITPOLICY_CLUSTER_DIR  use this state directory instead of a fresh
                          temporary one (it is still brought down at the end).
"""

import atexit
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "contrib" / "slurm" / "cluster"
NODES = 4
# How the local cluster's nodes are networked (contrib/slurm/cluster):
# "nodes", each in a network namespace of its own at 10.253.0.K, or
# "shared", every node on the one loopback. Open MPI's TCP goes over what
# joins them.
CLUSTER_NET = os.environ.get("EXITPOLICY_CLUSTER_NET", "nodes")
MPI_NETWORK = "10.253.0.0/24" if CLUSTER_NET == "nodes" else "lo"
NOBODY = 65534
# Root's record of the step directories it made (spank_plugin/step_dir.hpp).
STEP_DIR_REGISTRY = "/var/lib/exitpolicy/step-dirs"

# Every cluster that may be up, so that the fallbacks can bring it down.
_live = {}


class Cluster:
    """One cluster state directory driven through the cluster script.

    Tests reach the module's constants and /proc helpers through it too
    (cluster.SCRIPT, cluster.ns_pids(...)), so they never import conftest.
    """

    SCRIPT = SCRIPT
    NOBODY = NOBODY
    # The Slurm the cluster runs: Debian's (None), or the one installed in
    # this prefix (contrib/slurm/build; ctest sets it for a tree built with
    # -DSLURM_ROOT).
    SLURM_PREFIX = os.environ.get("EXITPOLICY_SLURM_PREFIX") or None

    @classmethod
    def slurm_release(cls):
        """(major, minor) of the Slurm the cluster runs, as its slurmd says."""
        slurmd = pathlib.Path(cls.SLURM_PREFIX) / "sbin" / "slurmd" if cls.SLURM_PREFIX else "slurmd"
        out = subprocess.run([str(slurmd), "-V"], capture_output=True, text=True,
                             env={**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}).stdout
        m = re.match(r"slurm(?:-wlm)? (\d+)\.(\d+)\.", out)
        assert m, f"slurmd -V said {out!r}"
        return int(m.group(1)), int(m.group(2))

    @classmethod
    def slurm_include_dir(cls):
        """The directory of the cluster's slurm/spank.h."""
        return pathlib.Path(cls.SLURM_PREFIX or "/usr") / "include"

    @classmethod
    def job_path_prefix(cls):
        """What a job script puts first in its PATH to find the cluster's own
        srun (a site's login environment does so for a Slurm in a prefix;
        --export=NONE leaves a job only that), or "" for Debian's."""
        return f"PATH={cls.SLURM_PREFIX}/bin:$PATH; export PATH\n" if cls.SLURM_PREFIX else ""

    def __init__(self, directory, nodes=NODES, owned=False, slurm_conf_extra=None, daemon_env=None, cgroup=None,
                 cgroup_conf_extra=None, accounting=None):
        self.dir = pathlib.Path(directory)
        self.nodes = nodes
        self.owned = owned  # we created the directory and may delete it
        self.slurm_conf_extra = slurm_conf_extra  # lines appended to slurm.conf
        self.daemon_env = daemon_env or {}  # in slurmd's environment, so in slurmstepd's
        # The cgroup setup (contrib/slurm/cluster's EXITPOLICY_CLUSTER_CGROUP:
        # none, v1, v2); None: the one the environment names, else none.
        self.cgroup = cgroup
        self.cgroup_conf_extra = cgroup_conf_extra  # lines appended to cgroup.conf
        # "slurmdbd": slurmdbd on a MariaDB of the cluster's own
        # (EXITPOLICY_CLUSTER_ACCOUNTING); None: no accounting.
        self.accounting = accounting

    def env(self):
        env = {**os.environ, **self.daemon_env, "EXITPOLICY_CLUSTER_DIR": str(self.dir)}
        if self.slurm_conf_extra:
            env["EXITPOLICY_CLUSTER_SLURM_CONF_EXTRA"] = self.slurm_conf_extra
        if self.cgroup:
            env["EXITPOLICY_CLUSTER_CGROUP"] = self.cgroup
        if self.cgroup_conf_extra:
            env["EXITPOLICY_CLUSTER_CGROUP_CONF_EXTRA"] = self.cgroup_conf_extra
        env["EXITPOLICY_CLUSTER_ACCOUNTING"] = self.accounting or "none"
        return env

    def script(self, *args, timeout=120):
        """Run `cluster ARGS...`; returns the CompletedProcess (text)."""
        return subprocess.run(
            [str(SCRIPT), *args],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def up(self):
        _live[str(self.dir)] = self
        self._step_dirs_before = set(self._step_dirs())
        return self.script("up", str(self.nodes))

    def down(self):
        proc = self.script("down")
        if proc.returncode == 0:
            _live.pop(str(self.dir), None)
            self._remove_left_step_dirs()
        return proc

    def _step_dirs(self):
        """The step directories of this cluster's node names in /tmp."""
        names = {f"node{i}" for i in range(1, self.nodes + 1)}
        return [p for p in pathlib.Path("/tmp").glob("exitpolicy.*.*.node*.*")
                if p.name.split(".")[3] in names]

    def _remove_left_step_dirs(self):
        """What a step of this cluster left in the machine's /tmp (a node
        the test crashed, a slurmstepd it killed: nothing is left there to
        remove it, and no later step comes to sweep it), with root's record
        of it (spank_plugin/step_dir.cpp)."""
        before = getattr(self, "_step_dirs_before", None)
        if before is None:
            return  # not brought up here: none of what is there is known to be its
        for p in self._step_dirs():
            if p not in before:
                shutil.rmtree(p, ignore_errors=True)
                pathlib.Path(STEP_DIR_REGISTRY, p.name).unlink(missing_ok=True)

    def crash(self, node):
        """Kill every process of `node` at once, as if the machine died."""
        return self.script("crash", node)

    @staticmethod
    def _where(on):
        """The cluster script's words for running on node `on` (node1...),
        or as a client (login) when it is None."""
        return ["on", on] if on else ["exec"]

    def popen(self, *cmd, cwd=None, env=None, on=None):
        """Start CMD inside the cluster (on node `on`: in that node's
        network namespace, as host `on`); returns the Popen (text pipes)."""
        return subprocess.Popen(
            [str(SCRIPT), *self._where(on), *[str(c) for c in cmd]],
            env={**self.env(), **(env or {})},
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def exec(self, *cmd, user=None, cwd=None, input=None, timeout=60, env=None, on=None):
        """Run CMD inside the cluster; returns (rc, stdout, stderr).

        user: run as this uid (and gid) with no supplementary groups.
        on: run it on this node (node1...), as another process of the node.
        A command killed by signal N gives rc == -N (the exec'd process is
        the command itself).
        """
        argv = [str(SCRIPT), *self._where(on)]
        if user is not None:
            argv += ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
        argv += [str(c) for c in cmd]
        proc = subprocess.run(
            argv,
            env={**self.env(), **(env or {})},
            cwd=cwd,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return proc.returncode, proc.stdout, proc.stderr

    def cgroup_setup(self):
        """The cgroup setup the cluster runs (none, v1, v2), as `up`
        recorded it."""
        try:
            return (self.dir / "run" / "cgroup").read_text().strip() or "none"
        except OSError:
            return "none"

    def ns_inode(self):
        """Inode of the cluster's network namespace, or None if not mounted."""
        try:
            st = os.stat(self.dir / "netns")
        except OSError:
            return None
        return st.st_ino if netns_mounted(self.dir) else None

    def mpi_plugins(self):
        """Slurm's own MPI plugins on this cluster (`srun --mpi=list`):
        Debian forky's Slurm 26.05 has pmi2 and no pmix, built as it is for
        the OpenPMIx 7 it cannot take."""
        if not hasattr(self, "_mpi_plugins"):
            rc, out, err = self.exec("srun", "--mpi=list")
            self._mpi_plugins = {name for name in ("pmix", "pmi2", "cray_shasta") if name in out + err}
        return self._mpi_plugins

    def skip_without_slurms_pmix(self):
        if "pmix" not in self.mpi_plugins():
            pytest.skip("this Slurm has no mpi/pmix plugin (Debian forky's: none is built for OpenPMIx 7)")

    def inodes(self):
        """The inodes of the cluster's network namespaces: its own and, with
        EXITPOLICY_CLUSTER_NET=nodes, each node's."""
        inodes = set()
        for path in [self.dir / "netns", *self.dir.glob("nodes/node*/netns")]:
            if mounted(path):
                inodes.add(os.stat(path).st_ino)
        return inodes

    def pids(self):
        """Pids of every live process of the cluster: in its network
        namespace, or in one of its nodes'."""
        return ns_pids(self.inodes())

    @staticmethod
    def netns_mounted(directory):
        return netns_mounted(directory)

    @staticmethod
    def ns_pids(inode):
        return ns_pids(inode)


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


def netns_mounted(directory):
    return mounted(pathlib.Path(directory) / "netns")


def ns_pids(inode):
    """Pids of live processes whose network namespace has this inode (or
    one of these inodes)."""
    inodes = inode if isinstance(inode, (set, frozenset)) else {inode}
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                pids.append(int(entry))
        except OSError:
            pass  # gone, a zombie, or not ours to look at
    return pids


def _down_all():
    for c in list(_live.values()):
        try:
            c.down()
        except Exception:  # best effort: this runs at exit or in a handler
            pass


def _install_fallbacks():
    atexit.register(_down_all)

    def handler(signum, frame):
        _down_all()
        signal.signal(signum, previous.get(signum) or signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.getsignal(sig)
        signal.signal(sig, handler)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "integration: needs root and a real local Slurm cluster"
    )
    config.addinivalue_line(
        "markers", "own_code: walks a matrix or hunts a race in the project's own code alone, the same on "
                   "every release: run on the first release tests/run.sh tests, not on those beside it"
    )


def pytest_collection_modifyitems(config, items):
    """On a release tested beside the first (tests/run.sh sets
    EXITPOLICY_BESIDE_FIRST_RELEASE=1: SchedMD's Slurm, the other Debian
    releases), the tests marked own_code are skipped: what a release
    changes (Slurm, OpenPMIx, the MPIs, the compiler) every other test
    meets there."""
    if os.environ.get("EXITPOLICY_BESIDE_FIRST_RELEASE") != "1":
        return
    skip = pytest.mark.skip(reason="the project's own code alone: tested on the first release (tests/run.sh)")
    for item in items:
        if "own_code" in item.keywords:
            item.add_marker(skip)


def _skip_reason():
    if os.geteuid() != 0:
        return "integration tests need root (they run a real Slurm cluster)"
    prefix = Cluster.SLURM_PREFIX
    for tool in ("slurmctld", "slurmd", "srun"):
        if prefix and not shutil.which(tool, path=f"{prefix}/sbin:{prefix}/bin"):
            # Asked for a Slurm that is not there: a failure, not a skip.
            pytest.fail(f"no {tool} in EXITPOLICY_SLURM_PREFIX={prefix} (contrib/slurm/build makes one)",
                        pytrace=False)
    for tool in ("slurmctld", "slurmd", "srun", "munged", "nsenter", "unshare"):
        if prefix and tool in ("slurmctld", "slurmd", "srun"):
            continue
        if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
            return f"{tool} not installed (apt-get install slurmctld slurmd slurm-client munge)"
    return None


@pytest.fixture(scope="session")
def cluster(request):
    """A healthy 4-node cluster for the whole session; always torn down."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    preset = os.environ.get("EXITPOLICY_CLUSTER_DIR")
    if preset:
        c = Cluster(preset, owned=False)
    else:
        d = tempfile.mkdtemp(prefix="exitpolicy-cluster-", dir="/tmp")
        os.chmod(d, 0o755)  # clients running as another user must reach it
        c = Cluster(d, owned=True)
    _install_fallbacks()
    try:
        t0 = time.monotonic()
        proc = c.up()
        assert proc.returncode == 0, (
            f"cluster up {c.nodes} failed (rc {proc.returncode}):\n"
            f"{proc.stdout}\n{proc.stderr}"
        )
        c.up_seconds = time.monotonic() - t0
        yield c
    finally:
        proc = c.down()
        if proc.returncode != 0:
            print(f"cluster down failed:\n{proc.stdout}\n{proc.stderr}")
        elif c.owned and request.session.testsfailed == 0:
            shutil.rmtree(c.dir, ignore_errors=True)
        elif c.owned:
            print(f"cluster state and logs kept in {c.dir}")


@pytest.fixture
def new_cluster():
    """Factory for extra clusters in fresh directories, each torn down."""
    made = []

    def make(nodes, slurm_conf_extra=None, daemon_env=None):
        d = tempfile.mkdtemp(prefix="exitpolicy-cluster-", dir="/tmp")
        os.chmod(d, 0o755)
        c = Cluster(d, nodes=nodes, owned=True, slurm_conf_extra=slurm_conf_extra, daemon_env=daemon_env)
        made.append(c)
        return c

    yield make
    for c in made:
        c.down()
        shutil.rmtree(c.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def workdir():
    """A world-writable, sticky working directory (like /tmp) for job steps,
    so that tasks run by an ordinary user can use it and any core files land
    there and not in the repository."""
    d = tempfile.mkdtemp(prefix="exitpolicy-work-", dir="/tmp")
    os.chmod(d, 0o1777)
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


# --- exitpolicy.so on the cluster -------------------------------------------


@pytest.fixture(scope="session")
def exitpolicy_so():
    """The built SPANK plugin: $EXITPOLICY_BUILD_DIR/spank_plugin/exitpolicy.so
    (ctest sets EXITPOLICY_BUILD_DIR; default: build/ under the repository)."""
    build = pathlib.Path(os.environ.get("EXITPOLICY_BUILD_DIR") or REPO / "build")
    so = build / "spank_plugin" / "exitpolicy.so"
    if not so.is_file():
        pytest.fail(
            f"{so} is missing: build it first (cmake -S {REPO} -B {build} && cmake --build {build})",
            pytrace=False,
        )
    return so


class Plugstack:
    """The cluster's plugstack.d drop-in that loads exitpolicy.so.

    Slurm reads the plugin stack for every step (srun and slurmstepd), so a
    change takes effect with the next srun. The file is replaced atomically so
    that a step never reads half of it.
    """

    def __init__(self, cluster, so):
        self.so = pathlib.Path(so)
        self.daemon = self.so.parent.parent / "pmix_server" / "exitpolicy-pmixd"
        self.file = cluster.dir / "etc" / "plugstack.d" / "exitpolicy.conf"

    def enable(self, *args, control="required"):
        """Load the plugin with these plugstack arguments ("key=value"), and
        this build's daemon unless they name one: a plugin knows no build
        tree's daemon by default (EXITPOLICY_BUILD_TREE_DAEMON)."""
        if not any(a.startswith("daemon=") for a in args):
            args = (*args, f"daemon={self.daemon}")
        return self._write(" ".join([control, str(self.so), *args]) + "\n")

    def line(self, text):
        """Load a plugin of another file, as this plugstack line says."""
        return self._write(text + "\n")

    def include(self, pattern):
        """Read the plugin stack of other files instead, as Debian's
        /etc/slurm/plugstack.conf includes /etc/slurm/plugstack.conf.d/*.conf."""
        return self._write(f"include {pattern}\n")

    def _write(self, line):
        tmp = self.file.with_name(self.file.name + ".tmp")  # not *.conf
        tmp.write_text(line)
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.file)
        return line

    def disable(self):
        try:
            self.file.unlink()
        except FileNotFoundError:
            pass


@pytest.fixture
def crashable(new_cluster, exitpolicy_so):
    """Factory: crashable(nodes) is a fresh cluster whose nodes may be crashed
    (cluster.crash), with exitpolicy.so serving PMIx (fanout=2); slurmctld
    declares a silent node down after 10 s. Not less: on the loaded machine
    of the full run (every release's leg at once, MPI ranks spinning in a
    collective), 5 s with MessageTimeout=3 once had slurmctld declare every
    node of the step down, not only the crashed one. Torn down after the
    test."""

    def make(nodes=NODES):
        c = new_cluster(nodes, slurm_conf_extra="SlurmdTimeout=10\nMessageTimeout=5")
        proc = c.up()
        assert proc.returncode == 0, f"cluster up failed:\n{proc.stdout}\n{proc.stderr}"
        Plugstack(c, exitpolicy_so).enable("fanout=2", "grace_ms=3000")
        return c

    return make


@pytest.fixture
def plugstack(cluster, exitpolicy_so):
    """Enables exitpolicy.so on the session cluster with the arguments a test
    chooses (plugstack.enable("grace_ms=3000", ...)); always removed after the
    test, so the next test starts from a cluster without the plugin."""
    p = Plugstack(cluster, exitpolicy_so)
    p.disable()
    yield p
    p.disable()


@pytest.fixture
def exitpolicy(plugstack):
    """exitpolicy.so enabled with default arguments (grace_ms=3000)."""
    plugstack.enable("grace_ms=3000")
    return plugstack
