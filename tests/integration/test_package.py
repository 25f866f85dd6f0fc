# SPDX-License-Identifier: Apache-2.0
"""The Debian package end to end, as a site installs it: built with
contrib/deb, checked by lintian, installed on this machine with apt-get,
enabled on the local cluster by the plugstack.conf.d file it installs (the
cluster includes it as Debian's /etc/slurm/plugstack.conf does), and a policy
step and a PMIx step run on the installed files only: the plugin every srun
and slurmstepd maps is the installed one, and so is every node daemon that
runs. Then it is removed (its conffile stays, and Slurm goes on without the
plugin) and purged (nothing of it stays).

Installs and purges the package "exitpolicy" on this machine (one left by an
interrupted run is purged first). The package is built in
$EXITPOLICY_BUILD_DIR-deb (build-deb beside build/ by default); ep_hello
comes from the build tree's tests/clients.
"""

import os
import pathlib
import re
import shutil
import subprocess
import time

import pytest

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("EXITPOLICY_BUILD_DIR") or REPO / "build")
PACKAGE = "exitpolicy"
NOBODY = 65534
APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    """Nothing from the caller's environment may choose a policy for us."""
    for name in ("SLURM_EXIT_POLICY", "SLURM_EXIT_MAIN_RANK", "SLURM_EXIT_REPORT",
                 "SLURM_EXIT_REPORT_JSON", "SLURM_EXIT_RECOVERABLE", "EXITPOLICY_DEBUG"):
        monkeypatch.delenv(name, raising=False)


def run(*argv, timeout=300, env=None):
    """Runs a command on this machine; returns the CompletedProcess (text)."""
    return subprocess.run([str(a) for a in argv], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout, env=env)


def status(package):
    """dpkg's state of package: "ii" installed, "rc" removed with its
    conffiles kept, None when dpkg knows nothing of it."""
    proc = run("dpkg-query", "-W", "-f=${db:Status-Abbrev}", package)
    state = proc.stdout.strip() if proc.returncode == 0 else ""
    return None if state in ("", "un") else state


def purge():
    if status(PACKAGE):
        proc = run("dpkg", "--purge", PACKAGE, env=APT_ENV)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def owner(path):
    """The packages that hold path, as dpkg-query --search names them, or ""."""
    proc = run("dpkg-query", "--search", path)
    return proc.stdout.split(":", 1)[0] if proc.returncode == 0 else ""


def version(package):
    proc = run("dpkg-query", "-W", "-f=${Version}", package)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def srun(cluster, workdir, *args, user=None, timeout=120):
    return cluster.exec("srun", *args, user=user, cwd=workdir, timeout=timeout)


def report_lines(err):
    return [l for l in err.splitlines() if l.startswith("exitpolicy: ")]


@pytest.fixture(scope="module")
def deb():
    """The package, built by contrib/deb: its path."""
    for tool in ("dpkg", "dpkg-deb", "apt-get"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not found: the package test needs Debian's package tools")
    proc = run("bash", REPO / "contrib" / "deb", f"{BUILD}-deb", timeout=1800)
    assert proc.returncode == 0, f"contrib/deb failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    path = pathlib.Path(proc.stdout.strip().splitlines()[-1])
    assert path.is_file() and path.suffix == ".deb", proc.stdout[-2000:]
    return path


def field(deb, name):
    proc = run("dpkg-deb", "--field", deb, name)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# What a site's machine must never get from building the package: a Slurm or
# munge daemon, whose service Debian starts at once, or an MPI.
NOT_ON_A_BUILD_HOST = {"slurmd", "slurmctld", "slurmdbd", "munge", "openmpi-bin", "mpich", "slurm-client"}


@pytest.mark.parametrize("script,mode,tool", [("contrib/deb", "package", "dpkg-dev"),
                                              ("contrib/rpm/build", "rpm", "rpm")])
def test_building_the_package_installs_no_daemon_and_starts_no_service(script, mode, tool):
    """contrib/deb (contrib/rpm/build) installs what `install-deps package`
    (`rpm`) lists, and nothing those packages depend on, however deep, is a
    daemon of Slurm or munge (as this machine's apt sees Debian's archive)."""
    build_script = (REPO / script).read_text()
    assert re.search(rf'^\s*bash "\$src/contrib/install-deps" {mode}( >&2)?$', build_script, re.M), build_script
    assert len(re.findall(r"contrib/install-deps\"", build_script)) == 1, build_script
    listed = run("bash", REPO / "contrib/install-deps", "--list", mode)
    assert listed.returncode == 0, listed.stderr
    packages = listed.stdout.split()
    assert "libslurm-dev" in packages and tool in packages, packages
    assert not NOT_ON_A_BUILD_HOST & set(packages), packages
    if run("apt-cache", "show", "cmake").returncode != 0:
        pytest.skip("this machine's apt has no package lists (a root file system made without them): "
                    "the dependency closure cannot be read")
    closure = run("apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                  "--no-breaks", "--no-replaces", "--no-enhances", *packages)
    assert closure.returncode == 0, closure.stderr
    pulled = {line.strip() for line in closure.stdout.splitlines() if not line.startswith(" ")}
    assert len(pulled) > len(packages), closure.stdout[:2000]  # the closure was read
    assert not NOT_ON_A_BUILD_HOST & pulled, sorted(NOT_ON_A_BUILD_HOST & pulled)


def test_lintian_finds_no_error_or_warning(deb):
    proc = run("lintian", "--fail-on", "error,warning", deb, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_package_depends_on_the_slurm_release_it_was_built_for(deb):
    depends = field(deb, "Depends")
    # Debian's Slurm package that holds Slurm's plugin directory and
    # /etc/slurm/plugstack.conf (which includes plugstack.conf.d), within
    # the release of the Slurm installed here: 22.05.8-4 is >= 22.05, << 22.06.
    slurm = owner("/etc/slurm/plugstack.conf")
    major, minor = (int(n) for n in re.match(r"(\d+)\.(\d+)\.", version(slurm)).groups())
    assert f"{slurm} (>= {major}.{minor:02d}), {slurm} (<< {major}.{minor + 1:02d})" in depends, depends
    for library in ("libpmix", "libevent", "libhwloc", "libssl"):
        assert re.search(rf"(^|, ){library}[^,]* \(>= ", depends), f"no {library}: {depends}"


def daemon_and_plugin_paths(cluster, srun_proc):
    """While srun_proc runs, every exitpolicy-pmixd of the cluster (its file,
    and the node each serves) and every exitpolicy.so mapped by the cluster's
    processes (srun, slurmstepd). Returns (daemon files, node names, plugin
    files)."""
    daemons, nodes, plugins = set(), set(), set()
    while srun_proc.poll() is None:
        for pid in cluster.pids():
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                with open(f"/proc/{pid}/maps") as f:
                    maps = f.read()
            except OSError:
                continue  # gone meanwhile
            if os.path.basename(exe).startswith("exitpolicy-pmixd"):
                daemons.add(exe)
                if b"--hostname" in argv[:-1]:
                    nodes.add(argv[argv.index(b"--hostname") + 1].decode())
            plugins.update(line.split(None, 5)[5] for line in maps.splitlines()
                           if line.endswith("exitpolicy.so") and len(line.split(None, 5)) == 6)
        time.sleep(0.05)
    return daemons, nodes, plugins


def steps_run_from(cluster, workdir, ep_hello, plugin, daemon):
    """A policy step (root and an ordinary user) and a PMIx step run, and
    every exitpolicy.so mapped is plugin, every node daemon is daemon."""
    # A policy step, as root and as an ordinary user: rank 3 fails,
    # main-rank gives rank 0's 0 where Slurm would give 3.
    for user in (None, NOBODY):
        rc, out, err = srun(cluster, workdir, "-N2", "-n4", "--exit-policy=main-rank", "sh", "-c",
                            '[ "$SLURM_PROCID" = 3 ] && exit 3; exit 0', user=user)
        assert rc == 0, err
        lines = report_lines(err)
        # Slurm places the step on any two of the four nodes.
        assert re.fullmatch(r"exitpolicy: exit code 0 under policy main-rank: main rank 0 on node[1-4] "
                            r"exited with code 0", lines[0]), err
        assert lines[1] == "exitpolicy: Slurm's native exit code would be 3", err

    # A PMIx step: the job info on every node, from the installed daemons.
    rc, out, err = srun(cluster, workdir, "--mpi=none", "-N4", "-n8", ep_hello)
    assert rc == 0, out + err
    assert len([l for l in out.splitlines() if l.startswith("hello ")]) == 8, out + err

    # Which files ran: every exitpolicy.so mapped and every node daemon.
    # A PMIx client first: the daemons run once a task uses PMIx.
    step = cluster.popen("srun", "--mpi=none", "-N4", "-n4", "sh", "-c", f"{ep_hello} >/dev/null; sleep 3", cwd=workdir)
    try:
        daemons, nodes, plugins = daemon_and_plugin_paths(cluster, step)
    finally:
        out, err = step.communicate(timeout=120)
    assert step.returncode == 0, out + err
    assert nodes == {"node1", "node2", "node3", "node4"}, (nodes, daemons)
    assert daemons == {daemon}, daemons
    assert plugins == {plugin}, plugins



def test_installed_package_runs_steps_and_leaves_nothing_when_purged(deb, cluster, workdir, plugstack):
    ep_hello = BUILD / "tests" / "clients" / "ep_hello"
    if not ep_hello.is_file():
        pytest.fail(f"{ep_hello} is missing: build the project first", pytrace=False)
    purge()  # an interrupted run's
    conffile_dir = pathlib.Path("/etc/slurm/plugstack.conf.d")
    if (conffile_dir / "exitpolicy.conf").exists():
        pytest.fail(f"{conffile_dir / 'exitpolicy.conf'} exists and is no package's: move it away first",
                    pytrace=False)
    try:
        # --- installed ---------------------------------------------------------
        proc = run("apt-get", "install", "-y", "--no-install-recommends", deb.resolve(), env=APT_ENV)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert status(PACKAGE) == "ii"
        files = run("dpkg", "--listfiles", PACKAGE).stdout.split()
        conffiles = [l.split()[0] for l in
                     run("dpkg-query", "-W", "-f=${Conffiles}\n", PACKAGE).stdout.splitlines() if l.strip()]
        assert conffiles == [str(conffile_dir / "exitpolicy.conf")], conffiles
        conffile = pathlib.Path(conffiles[0])
        plugin = next(f for f in files if f.endswith("/exitpolicy.so"))
        daemon = next(f for f in files if f.endswith("/exitpolicy-pmixd"))
        # Slurm's own plugin directory, and a libexec directory of the system.
        assert (pathlib.Path(plugin).parent / "libslurmfull.so").exists(), plugin
        assert re.fullmatch(r"/usr/lib[^/]*(/[^/]+)*/exitpolicy-pmixd", daemon) and "libexec" in daemon, daemon
        assert str(pathlib.Path(daemon).with_name("exitpolicy-detach")) in files, files  # the plugin looks beside it
        for page in ("man1/exitpolicy.1.gz", "man8/exitpolicy.8.gz", "man8/exitpolicy-detach.8.gz"):
            assert f"/usr/share/man/{page}" in files, files
        assert f"optional {plugin}" in conffile.read_text().splitlines()

        # The cluster reads the installed file, as Debian's plugstack.conf does.
        plugstack.include(conffile)

        steps_run_from(cluster, workdir, ep_hello, plugin, daemon)

        # --- removed: the conffile stays, Slurm goes on without the plugin ------
        proc = run("dpkg", "--remove", PACKAGE, env=APT_ENV)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert status(PACKAGE) == "rc"
        assert conffile.is_file()
        assert [f for f in files if os.path.lexists(f) and not os.path.isdir(f)] == [str(conffile)]
        rc, out, err = srun(cluster, workdir, "-N2", "-n2", "true")
        assert (rc, report_lines(err)) == (0, []), err
        rc, out, err = srun(cluster, workdir, "--mpi=none", "-N2", "-n2", "true")
        assert (rc, report_lines(err)) == (0, []), err
        rc, out, err = srun(cluster, workdir, "--exit-policy=main-rank", "-N1", "-n1", "true")
        assert rc != 0, "srun took --exit-policy without the plugin"

        # --- purged: nothing of the package stays -------------------------------
        proc = run("dpkg", "--purge", PACKAGE, env=APT_ENV)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert status(PACKAGE) is None
        left = [f for f in files if f not in ("/", "/.") and os.path.lexists(f)
                and (os.path.islink(f) or not os.path.isdir(f) or not owner(f))]
        assert left == [], left
        # What the plugin kept on the nodes (root's records of the step
        # directories it made) goes with the package.
        assert not os.path.lexists("/var/lib/exitpolicy"), os.listdir("/var/lib/exitpolicy")
        rc, out, err = srun(cluster, workdir, "-N2", "-n2", "true")
        assert rc == 0, err
    finally:
        purge()
