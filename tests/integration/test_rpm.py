# SPDX-License-Identifier: Apache-2.0
"""The RPM for a site's own Slurm, end to end: contrib/rpm/build runs
rpmbuild on contrib/rpm/exitpolicy.spec against the Slurm the cluster runs
(EXITPOLICY_SLURM_PREFIX, a release built from source by contrib/slurm/build),
the package is checked (its requirements name that Slurm's release, its files
follow slurm.spec's layout), unpacked with rpm2cpio, and a policy step and a
PMIx step run on the local cluster from the unpacked files only: the plugin
every srun and slurmstepd maps is the unpacked one, and so is every node
daemon that runs.

The RPM is built in $EXITPOLICY_BUILD_DIR-rpm; ep_hello comes from the build
tree's tests/clients. ctest runs this file only for a tree built against a
Slurm in a prefix (-DSLURM_ROOT).
"""

import os
import pathlib
import re
import subprocess
import tempfile

import pytest

from test_package import steps_run_from

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("EXITPOLICY_BUILD_DIR") or REPO / "build")
PREFIX = os.environ.get("EXITPOLICY_SLURM_PREFIX")
NOBODY = 65534


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    """Nothing from the caller's environment may choose a policy for us."""
    for name in ("SLURM_EXIT_POLICY", "SLURM_EXIT_MAIN_RANK", "SLURM_EXIT_REPORT",
                 "SLURM_EXIT_REPORT_JSON", "SLURM_EXIT_RECOVERABLE", "EXITPOLICY_DEBUG"):
        monkeypatch.delenv(name, raising=False)


def run(*argv, timeout=300):
    return subprocess.run([str(a) for a in argv], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout)


def query(rpm, *args):
    proc = run("rpm", "-qp", *args, rpm)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def slurm_release():
    """The cluster's Slurm release, as its slurmd says it: (26, 5)."""
    proc = run(pathlib.Path(PREFIX) / "sbin" / "slurmd", "-V")
    m = re.match(r"slurm (\d+)\.(\d+)\.", proc.stdout)
    assert m, proc.stdout + proc.stderr
    return int(m.group(1)), int(m.group(2))


@pytest.fixture(scope="module")
def rpm():
    """The binary RPM built by contrib/rpm/build against the cluster's Slurm."""
    if not PREFIX:
        pytest.fail("EXITPOLICY_SLURM_PREFIX is not set: the RPM is built against a Slurm in a prefix "
                    "(configure with -DSLURM_ROOT=DIR)", pytrace=False)
    proc = run("bash", REPO / "contrib" / "rpm" / "build", "--slurm-root", PREFIX, f"{BUILD}-rpm",
               timeout=1800)
    assert proc.returncode == 0, f"contrib/rpm/build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    path = pathlib.Path(proc.stdout.strip().splitlines()[-1])
    assert path.is_file() and path.suffix == ".rpm", proc.stdout[-2000:]
    return path


def test_the_rpm_requires_the_slurm_release_it_was_built_for(rpm):
    major, minor = slurm_release()
    requires = query(rpm, "--requires")
    assert f"slurm >= {major}.{minor:02d}" in requires, requires
    assert f"slurm < {major}.{minor + 1:02d}" in requires, requires
    # The libraries it links, found by rpmbuild's own dependency generator.
    for library in ("libpmix.so", "libevent_core-2.1.so", "libevent_pthreads-2.1.so", "libhwloc.so",
                    "libcrypto.so"):
        assert any(r.startswith(library) for r in requires), f"no {library}: {requires}"


def test_the_rpm_follows_slurm_specs_layout(rpm):
    files = query(rpm, "--list")
    plugin = next(f for f in files if f.endswith("/exitpolicy.so"))
    # Slurm's own plugin directory: the one holding its libslurmfull.so.
    assert (pathlib.Path(plugin).parent / "libslurmfull.so").exists(), plugin
    assert pathlib.Path(plugin).is_relative_to(PREFIX), plugin
    assert "/usr/libexec/exitpolicy-pmixd" in files, files
    assert "/usr/libexec/exitpolicy-detach" in files, files
    for page in ("man1/exitpolicy.1.gz", "man8/exitpolicy.8.gz", "man8/exitpolicy-pmixd.8.gz",
                 "man8/exitpolicy-detach.8.gz"):
        assert f"/usr/share/man/{page}" in files, files
    assert "/usr/share/doc/exitpolicy/README.md" in files, files
    # Nothing of the Debian package's own.
    assert not [f for f in files if "lintian" in f or f.endswith("/changelog.gz")], files
    # The plugstack.conf.d file beside Slurm's configuration, the site's to edit.
    assert query(rpm, "--configfiles") == ["/etc/slurm/plugstack.conf.d/exitpolicy.conf"]
    assert query(rpm, "--queryformat", "%{VERSION}\n") == [
        re.search(r"project\(exitpolicy VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)]


def test_rpmlint_says_nothing_its_config_does_not_explain(rpm):
    """rpmlint on the spec and the RPM: every finding left is one that
    contrib/rpm/rpmlint.toml gives a reason for."""
    proc = run("rpmlint", "-c", REPO / "contrib" / "rpm" / "rpmlint.toml",
               REPO / "contrib" / "rpm" / "exitpolicy.spec", rpm)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert re.search(r"1 packages and 1 specfiles checked; 0 errors, 0 warnings", summary), \
        proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def spec_query(what, *defines):
    argv = ["rpmspec", "-q", what, "--define", f"slurm_root {PREFIX}"]
    for d in defines:
        argv += ["--define", d]
    proc = run(*argv, REPO / "contrib" / "rpm" / "exitpolicy.spec")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_a_slurm_installed_without_rpms_is_required_by_no_rpm():
    """--slurm-package "" (a Slurm in a prefix, not from RPMs): the spec then
    asks for no slurm-devel to build and the RPM for no Slurm RPM; by default
    both name Slurm's own RPMs."""
    if not PREFIX:
        pytest.fail("EXITPOLICY_SLURM_PREFIX is not set", pytrace=False)
    major, minor = slurm_release()
    assert "slurm-devel" in spec_query("--buildrequires")
    assert f"slurm >= {major}.{minor:02d}" in spec_query("--requires")
    assert not [r for r in spec_query("--buildrequires", "slurm_package %{nil}") if r.startswith("slurm")]
    assert not [r for r in spec_query("--requires", "slurm_package %{nil}") if r.startswith("slurm")]
    assert "slurm-site-devel" in spec_query("--buildrequires", "slurm_package slurm-site")


@pytest.mark.parametrize("argv,says", [
    (["--slurm-package", "slurm; rm -rf /"], "is no RPM name"),
    (["--slurm-package"], "needs the name of Slurm's RPM"),
    (["--slurm-root", "/nonexistent/slurm"], "no such directory"),
    (["--slurm-root", "/tmp"], "no /tmp/include/slurm/spank.h"),
    (["--slurmroot", "/usr"], "unknown option --slurmroot"),
    (["out1", "out2"], "one output directory at most"),
])
def test_the_rpm_build_refuses_what_it_cannot_use_and_says_why(argv, says):
    """Bad arguments stop contrib/rpm/build before it installs or builds
    anything, with what to do."""
    proc = run("bash", REPO / "contrib" / "rpm" / "build", *argv, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert says in proc.stderr, proc.stderr
    assert "usage:" in proc.stderr or "spank.h" in proc.stderr, proc.stderr
    assert "install-deps" not in proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def unpacked(rpm):
    """The RPM's files under a fresh directory, as rpm2cpio | cpio unpack them."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="exitpolicy-rpm-", dir="/tmp"))
    try:
        cpio = subprocess.run(f"rpm2cpio '{rpm}' | cpio -idm --quiet", shell=True, cwd=root,
                              capture_output=True, text=True, timeout=120)
        assert cpio.returncode == 0, cpio.stderr
        # Reachable by the ordinary user whose steps load the plugin too.
        for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
            d.chmod(0o755)
        yield root
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_unpacked_rpm_runs_steps(rpm, unpacked, cluster, workdir, plugstack):
    ep_hello = BUILD / "tests" / "clients" / "ep_hello"
    if not ep_hello.is_file():
        pytest.fail(f"{ep_hello} is missing: build the project first", pytrace=False)
    files = query(rpm, "--list")
    plugin = str(unpacked) + next(f for f in files if f.endswith("/exitpolicy.so"))
    daemon = str(unpacked / "usr" / "libexec" / "exitpolicy-pmixd")
    conffile = unpacked / "etc" / "slurm" / "plugstack.conf.d" / "exitpolicy.conf"
    installed_plugin = next(f for f in files if f.endswith("/exitpolicy.so"))
    assert f"optional {installed_plugin}" in conffile.read_text().splitlines()

    # The line the RPM installs, with the unpacked files' paths.
    plugstack.line(f"optional {plugin} daemon={daemon}")

    steps_run_from(cluster, workdir, ep_hello, plugin, daemon)
