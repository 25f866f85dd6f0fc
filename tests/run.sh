#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/run.sh - the project's test command.
#
# On a Debian 12 machine, as root: installs what is missing (apt-get),
# configures and builds with warnings as errors, runs every CTest label
# (unit, pmix, integration; integration brings up a real local Slurm cluster
# and always tears it down), then builds again with ASan+UBSan and runs the
# unit tests there, and fuzzes the frame codec for 30 s (tests/fuzz/run.sh).
# Then it does it all again on the other supported Debian release (13 on a
# Debian 12 machine, 12 on a Debian 13 one) and on Debian's testing suite
# (forky: the Slurm, OpenPMIx, Open MPI, MPICH and GCC sites run next), each
# in a root file system made with Debian's mmdebstrap and kept between runs
# (contrib/rootfs), without the sanitizer build and the fuzzer, which run
# on this machine's release; on Debian 13 everything is built with Clang
# too, warnings as errors. Those releases run one after the other, beside
# this machine's, each in namespaces of its own (its /tmp, /run, processes
# and cluster), their output kept and printed when they end: two streams
# keep both cores of a small machine busy where one leaves them waiting on
# steps. On
# every release but this machine's (and against SchedMD's Slurm), the
# integration tests marked own_code are skipped (EXITPOLICY_BESIDE_FIRST_RELEASE=1,
# tests/integration/conftest.py): they walk a matrix or hunt a race in the
# project's own code, which is the same everywhere. Every build goes through ccache when it is
# installed (install-deps installs it), with its cache kept between runs in
# /var/cache/exitpolicy/ccache of each file system (EXITPOLICY_CCACHE_DIR
# names another; EXITPOLICY_CCACHE=0 builds without it).
# Between the two, the suite (without the sanitizer build, the fuzzer and the
# Debian package) runs once more on this machine against SchedMD's own Slurm:
# the newest release tarball in ../shared/upstream/ beside the source tree,
# built from source into a prefix by contrib/slurm/build (reused between runs),
# exitpolicy built against it (-DSLURM_ROOT) and the local cluster running it;
# the RPM (contrib/rpm) is built and run there. There, the PMIx service's
# suite (pmix.service) is left to Debian forky, whose Slurm is the same
# release: the rest runs, MPICH's PMI service with it.
# The cgroup setups sites run ride on two of these legs: the suite against
# SchedMD's Slurm runs its cluster on cgroup/v2 and Debian 13's on
# cgroup/v1 (proctrack/cgroup, task/cgroup,task/affinity; contrib/slurm/
# cluster's EXITPOLICY_CLUSTER_CGROUP); the others on none, as before.
# This machine's cgroups are a v1/v2 hybrid whose v2 has no controllers, so
# the cgroup/v2 setups run once more, against this machine's Slurm, in a
# guest with cgroup v2 alone (contrib/vm), where memory is constrained.
# Exits non-zero on any failure, and says on which release it failed.
#
#   bash tests/run.sh            everything
#   EXITPOLICY_SKIP_SANITIZE=1   skip the sanitizer build
#   EXITPOLICY_SKIP_FUZZ=1       skip the fuzzer
#   EXITPOLICY_SKIP_CLANG=1      skip the build with Clang (on Debian 13)
#   EXITPOLICY_SKIP_GCC15=1      skip the build with GCC 15 (on Debian forky)
#   EXITPOLICY_SKIP_VM=1         skip the cgroup/v2 setups on a guest with cgroup
#                                v2 alone (contrib/vm, this machine's release only)
#   EXITPOLICY_SKIP_DEMO=1       skip the README's demo (bash contrib/demo, run on
#                                this machine's release only, in a tree of its own)
#   EXITPOLICY_SKIP_OTHER_RELEASE=1  test this machine's Debian release only
#   EXITPOLICY_ROOTFS_RELEASES="trixie forky"  the Debian suites tested in root
#                                file systems (default: the other release, then forky)
#   EXITPOLICY_ROOTFS_SERIAL=1   test them one after the other, after this
#                                machine's release (default: all at once, beside it)
#   EXITPOLICY_SLURM_TARBALL=PATH    the Slurm release to test beside Debian's
#                                (default: the newest ../shared/upstream/slurm-*.tar.*)
#   EXITPOLICY_SKIP_UPSTREAM=1   skip the suite against a Slurm built from source
#   EXITPOLICY_ONLY_UPSTREAM=1   run only that (with EXITPOLICY_SLURM_TARBALL:
#                                the suite against any release's tarball)
#   EXITPOLICY_BUILD_DIR=DIR     build tree (default: build under the source)
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${EXITPOLICY_BUILD_DIR:-$src/build}
jobs=$(nproc)

step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

# Debian's major version here, and the other release tested beside it.
release=$(cut -d. -f1 /etc/debian_version 2>/dev/null || echo unknown)
case $release in
  12) other=trixie ;;
  13) other=bookworm ;;
  *) other= ;;
esac
# Debian's number of a suite, for messages.
suite_name() {
  case $1 in
    bookworm) echo "Debian 12" ;;
    trixie) echo "Debian 13" ;;
    forky) echo "Debian forky (testing)" ;;
    *) echo "Debian $1" ;;
  esac
}
where="Debian $release"
[ -n "${EXITPOLICY_IN_ROOTFS-}" ] && where+=" (root file system)"
case ${EXITPOLICY_CLUSTER_CGROUP:-none} in
  none) ;;
  *) where+=", the cluster on cgroup/$EXITPOLICY_CLUSTER_CGROUP" ;;
esac
# The releases tested in root file systems beside this one, one after the
# other: the pid of the job that runs them (in this script's process group,
# so that whoever stops the script stops it too), and the directory of
# their output and exit statuses.
legs_pid=
legs_dir=
# kill_tree PID: SIGKILL to PID and everything below it, each stopped
# first so that none starts another meanwhile. contrib/rootfs's unshare
# takes its PID namespace with it (--kill-child).
kill_tree() {
  local child
  kill -STOP "$1" 2>/dev/null || return 0
  for child in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    kill_tree "$child"
  done
  kill -KILL "$1" 2>/dev/null || true
}
on_exit() {
  local rc=$? suite
  "$src/contrib/slurm/cluster" down >/dev/null 2>&1 || true
  # Legs still running when this one ends have no one to report to.
  if [ -n "$legs_pid" ]; then
    kill_tree "$legs_pid"
    echo "tests/run.sh: stopped the releases tested beside this one (their output so far: $legs_dir)" >&2
  fi
  if [ $rc -ne 0 ]; then
    echo "tests/run.sh: FAILED on $where" >&2
  fi
  exit $rc
}

step "dependencies"
bash "$src/contrib/install-deps"

# Every tree builds through ccache, its cache kept between runs and shared
# by clones wherever they are (paths under the source tree are hashed
# relative to it).
launcher=(-DCMAKE_C_COMPILER_LAUNCHER= -DCMAKE_CXX_COMPILER_LAUNCHER=)
if [ "${EXITPOLICY_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  export CCACHE_DIR=${EXITPOLICY_CCACHE_DIR:-/var/cache/exitpolicy/ccache}
  export CCACHE_BASEDIR=$src CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-4G}
  mkdir -p "$CCACHE_DIR"
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # And the trees the tests build themselves (the Debian package, the RPM,
  # the demo's): CMake takes its launchers from these when none is given.
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
else
  unset CMAKE_C_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER
fi

# Whatever happens, leave no cluster behind (the pytest fixture tears its own
# down; this catches an interrupted run).
export EXITPOLICY_CLUSTER_DIR=${EXITPOLICY_CLUSTER_DIR:-/tmp/exitpolicy-test-cluster}
trap on_exit EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# The Slurm release tarball tested beside Debian's: the one named, else the
# newest in ../shared/upstream/.
upstream_tarball() {
  if [ -n "${EXITPOLICY_SLURM_TARBALL-}" ]; then
    [ -f "$EXITPOLICY_SLURM_TARBALL" ] || {
      echo "tests/run.sh: EXITPOLICY_SLURM_TARBALL=$EXITPOLICY_SLURM_TARBALL is no file" >&2
      return 1
    }
    realpath "$EXITPOLICY_SLURM_TARBALL"
    return 0
  fi
  local dir
  dir=$(realpath -m "$src/../shared/upstream")
  # No such directory (a clone elsewhere) is no tarball, not a failure.
  { find "$dir" -maxdepth 1 -name 'slurm-[0-9]*.tar.*' -printf '%f\n' 2>/dev/null || true; } |
    sort -V | tail -n 1 | sed "s|^.|$dir/&|"
}

# The whole suite against a Slurm built from source: its prefix from
# contrib/slurm/build, exitpolicy built against it in $build-slurm-VERSION,
# the cluster running it (ctest hands the prefix to the tests).
run_upstream() {
  local tarball=$1 beside=${2:-0} version prefix tree
  version=$(basename "$tarball")
  version=${version#slurm-}
  version=${version%%.tar.*}
  where="SchedMD's Slurm $version (built from ${tarball##*/}, on Debian $release, the cluster on cgroup/v2)"
  step "Slurm $version from source (contrib/slurm/build)"
  prefix=$(bash "$src/contrib/slurm/build" "$tarball")
  tree=$build-slurm-$version
  step "build against Slurm $version ($tree)"
  cmake -S "$src" -B "$tree" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEXITPOLICY_WERROR=ON \
    -DSLURM_ROOT="$prefix" "${launcher[@]}" >/dev/null
  cmake --build "$tree" -j "$jobs"
  step "tests against Slurm $version: unit, pmix, integration"
  # Beside Debian's releases, the PMIx service's suite is forky's, whose
  # Slurm is the same release (see the top).
  local except=()
  [ "$beside" = 1 ] && except=(-E '^pmix[.]service$')
  EXITPOLICY_CLUSTER_CGROUP=v2 EXITPOLICY_BESIDE_FIRST_RELEASE=$beside \
    ctest --test-dir "$tree" --output-on-failure -L 'unit|pmix|integration' "${except[@]}"
  "$src/contrib/slurm/cluster" down >/dev/null
  step "all tests passed on $where"
}

if [ "${EXITPOLICY_ONLY_UPSTREAM:-0}" = 1 ]; then
  tarball=$(upstream_tarball)
  if [ -z "$tarball" ]; then
    echo "tests/run.sh: no Slurm source tarball (EXITPOLICY_SLURM_TARBALL, or slurm-*.tar.* in $(realpath -m "$src/../shared/upstream"))" >&2
    exit 1
  fi
  run_upstream "$tarball"
  exit 0
fi

# Each release's output whole, in order, once its leg has ended; a
# failure there is that release's. $1: what passed before them.
finish_rootfs_legs() {
  local tested=$1 suite rc failed=()
  for suite in "${rootfs_suites[@]}"; do
    rc=0
    if [ -z "$legs_dir" ]; then
      step "the whole suite again on $(rootfs_where "$suite")"
      run_rootfs_leg "$suite" || rc=$?
    else
      if [ -n "$legs_pid" ]; then
        wait "$legs_pid" || true
        legs_pid=
      fi
      rc=$(cat "$legs_dir/$suite.rc" 2>/dev/null || echo "none (the leg never ended)")
      step "the whole suite on $(rootfs_where "$suite"), beside this one: its output (exit status $rc)"
      cat "$legs_dir/$suite.log" 2>/dev/null || true
    fi
    if [ "$rc" = 0 ]; then
      tested+=", $(suite_name "$suite")"
    else
      failed+=("$(suite_name "$suite") (root file system)")
    fi
  done
  if ((${#failed[@]})); then
    where=$(printf '%s\n' "${failed[@]}" | paste -sd ';' | sed 's/;/; /g')
    exit 1
  fi
  if [ -n "$legs_dir" ]; then
    rm -rf "$legs_dir"
  fi
  where=$tested
  step "all tests passed on $where"
}

# The releases tested in root file systems, started now, beside this one.
rootfs_suites=()
if [ -z "${EXITPOLICY_IN_ROOTFS-}" ] && [ -z "${EXITPOLICY_IN_PIDNS-}" ] &&
  [ "${EXITPOLICY_SKIP_OTHER_RELEASE:-0}" != 1 ]; then
  if [ -z "$other" ]; then
    echo "tests/run.sh: $where is neither Debian 12 nor 13: the other releases are not tested" >&2
    exit 1
  fi
  read -ra rootfs_suites <<<"${EXITPOLICY_ROOTFS_RELEASES:-$other forky}"
fi
rootfs_where() { echo "$(suite_name "$1") (root file system, contrib/rootfs --release $1)"; }
# The cgroup setup of a release's leg (see the top).
leg_cgroup() {
  case $1 in
    trixie) echo v1 ;;
    *) echo none ;;
  esac
}
run_rootfs_leg() {
  bash "$src/contrib/rootfs" --release "$1" run \
    env EXITPOLICY_IN_ROOTFS=1 EXITPOLICY_SKIP_SANITIZE=1 EXITPOLICY_SKIP_FUZZ=1 EXITPOLICY_BESIDE_FIRST_RELEASE=1 \
    EXITPOLICY_CLUSTER_CGROUP="$(leg_cgroup "$1")" bash /src/tests/run.sh
}
if ((${#rootfs_suites[@]})) && [ "${EXITPOLICY_ROOTFS_SERIAL:-0}" != 1 ]; then
  legs_dir=$(mktemp -d /tmp/exitpolicy-legs.XXXXXX)
  step "the whole suite on ${rootfs_suites[*]} (root file systems), one after the other, beside this one (their output: $legs_dir)"
  # One job for them all, not one each: on two cores, two streams keep
  # both busy, and more only slow every step they run (Slurm's own timings
  # with them).
  (
    for suite in "${rootfs_suites[@]}"; do
      rc=0
      run_rootfs_leg "$suite" >"$legs_dir/$suite.log" 2>&1 </dev/null || rc=$?
      echo "$rc" >"$legs_dir/$suite.rc"
    done
  ) &
  legs_pid=$!
  # This machine's legs in PID and mount namespaces of their own: a test
  # that looks in /proc for its step's processes (a node's daemon, what a
  # step left) finds none of the releases' beside it, whose processes the
  # machine's /proc shows. Whoever stops this script stops them
  # (--kill-child).
  step "this machine's legs, in a PID namespace of their own"
  host_rc=0
  EXITPOLICY_IN_PIDNS=1 unshare --pid --fork --kill-child --mount-proc bash "$src/tests/run.sh" </dev/null ||
    host_rc=$?
  if ((host_rc != 0)); then
    where="Debian $release (this machine's legs, above)"
    exit "$host_rc"
  fi
  finish_rootfs_legs "this machine's legs (above)"
  exit 0
fi

step "build ($build)"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEXITPOLICY_WERROR=ON "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$jobs"

step "tests: unit, pmix, integration"
# The README's demo runs on this machine's release, where its instructions
# hold (tests/integration/test_demo.py).
demo=0
if [ -z "${EXITPOLICY_IN_ROOTFS-}" ] && [ "${EXITPOLICY_SKIP_DEMO:-0}" != 1 ]; then
  demo=1
fi
# The cgroup/v2 setups on a host with cgroup v2 alone (a guest of
# contrib/vm; tests/integration/test_cgroup_v2_host.py): on this machine's
# release, whose file system the guest runs.
vm=0
if [ -z "${EXITPOLICY_IN_ROOTFS-}" ] && [ "${EXITPOLICY_SKIP_VM:-0}" != 1 ]; then
  bash "$src/contrib/install-deps" vm
  vm=1
fi
EXITPOLICY_RUN_DEMO=$demo EXITPOLICY_RUN_VM=$vm ctest --test-dir "$build" --output-on-failure -L 'unit|pmix|integration'
# Every test carries a label: nothing may run unlabelled, nothing is left out.
unlabelled=$(ctest --test-dir "$build" -N -LE 'unit|pmix|integration' | sed -n 's/^Total Tests: //p')
if [ "${unlabelled:-0}" != 0 ]; then
  echo "tests/run.sh: $unlabelled test(s) carry none of the labels unit, pmix, integration" >&2
  exit 1
fi

# Clang as well as GCC, with warnings as errors: Debian 13's (19), the
# newest Clang of the releases tested. A build, no second test run.
if [ "$release" = 13 ] && [ "${EXITPOLICY_SKIP_CLANG:-0}" != 1 ]; then
  step "build with Clang, warnings as errors ($build-clang)"
  bash "$src/contrib/install-deps" fuzz
  CC=clang CXX=clang++ cmake -S "$src" -B "$build-clang" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEXITPOLICY_WERROR=ON \
    "${launcher[@]}" >/dev/null
  cmake --build "$build-clang" -j "$jobs"
fi

# GCC 15 as well as forky's own GCC (16 in the archive's snapshot here):
# the GCC that Debian 14's release is planned with. A build, no second
# test run.
if [[ $release == forky* ]] && [ "${EXITPOLICY_SKIP_GCC15:-0}" != 1 ]; then
  step "build with GCC 15, warnings as errors ($build-gcc15)"
  bash "$src/contrib/install-deps" gcc15
  CC=gcc-15 CXX=g++-15 cmake -S "$src" -B "$build-gcc15" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEXITPOLICY_WERROR=ON \
    "${launcher[@]}" >/dev/null
  cmake --build "$build-gcc15" -j "$jobs"
fi

if [ "${EXITPOLICY_SKIP_SANITIZE:-0}" != 1 ]; then
  step "unit tests under ASan+UBSan"
  cmake -S "$src" -B "$build-sanitize" -DCMAKE_BUILD_TYPE=Debug -DEXITPOLICY_WERROR=ON \
    -DEXITPOLICY_SANITIZE=ON -DEXITPOLICY_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
  cmake --build "$build-sanitize" -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$build-sanitize" --output-on-failure -L unit
fi

if [ "${EXITPOLICY_SKIP_FUZZ:-0}" != 1 ]; then
  step "the frame codec under libFuzzer (30 s)"
  fuzz_log=$(mktemp)
  if ! EXITPOLICY_FUZZ_BUILD_DIR="$build-fuzz" bash "$src/tests/fuzz/run.sh" 30 >"$fuzz_log" 2>&1; then
    tail -n 80 "$fuzz_log"
    echo "tests/run.sh: the codec fuzzer found something (see above)" >&2
    exit 1
  fi
  tail -n 5 "$fuzz_log"
  rm -f "$fuzz_log"
fi

step "no cluster process left"
"$src/contrib/slurm/cluster" down
step "all tests passed on $where"

if [ -z "${EXITPOLICY_IN_ROOTFS-}" ] && [ "${EXITPOLICY_SKIP_UPSTREAM:-0}" != 1 ]; then
  tarball=$(upstream_tarball)
  if [ -n "$tarball" ]; then
    run_upstream "$tarball" 1
    upstream_tested="SchedMD's $(basename "$tarball" | sed 's/\.tar\..*$//')"
  else
    echo "tests/run.sh: no Slurm source tarball in $(realpath -m "$src/../shared/upstream") (or EXITPOLICY_SLURM_TARBALL): the suite against SchedMD's Slurm is skipped"
  fi
fi

if [ -n "${EXITPOLICY_IN_ROOTFS-}" ]; then
  exit 0
fi
finish_rootfs_legs "Debian $release${upstream_tested:+, $upstream_tested}"
