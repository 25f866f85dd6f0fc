#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""soak_bench.py - does a step leave anything behind, however it ends?

With exitpolicy enabled as sites get it (pmix=auto), srun -N4 -n8 steps of
six kinds, each with the code srun must return:

    success     --exit-policy=main-rank true                                     0
    exit-3      sh -c: rank 5 exits 3, no policy (Slurm's own rule)              3
    segv-main   --exit-policy=main-rank sh -c: rank 0 kills itself with SIGSEGV 139
    fence       --exit-policy=main-rank ep_fence --data (PMIx, data collected)   0
    mpi-hello   --exit-policy=main-rank ep_mpi_ring (Open MPI, a plain ring)     0
    mpi-abort   --exit-policy=main-rank ep_mpi_fail: rank 3 calls MPI_Abort(7)   7

STEPS of them in a row (cycling through the kinds), then WAVES waves of four
steps of four different kinds started together. Before and after: every
entry in /dev/shm and what MPI, PMIx or exitpolicy make at the top of /tmp
(ompi*, openmpi*, prte*, pmix*, spmix*, exitpolicy.*, core*), everything under /tmp/ompi.*,
/tmp/exitpolicy.*, /tmp/pmix*, /tmp/spmix* and the nodes' TmpFS (where
Slurm's mpi/pmix keeps its directories), and the cluster's processes that
are exitpolicy-pmixd, orted, prted or a test program. What is new at the
end, and still there at a second look two seconds later, was left behind;
it is reported, never removed.

Then the two MPI kinds, alternating, under Slurm's own mpi/pmix (plugin
disabled, --mpi=pmix, no policy) and under ours (--mpi=none
--exit-policy=main-rank), in paired, alternating runs: steps per second of
each, and what each left behind (whatever appeared during a step is
charged to that step's side). srun's codes under mpi/pmix are recorded,
not judged: Slurm decides its own code.

Open MPI's TCP transport on these virtual nodes fails to connect now and
then, under either server: an MPI step in which no rank got to its point
(all 8 "mpi ok" for the ring; rank 3's "fail" line for the abort) is run
again, at most three times in all; such runs are counted as retries, never
as wrong codes, and count in the steps per second (they took the time).

Exit status 1 if srun returned a wrong code or exitpolicy left anything (a
process, a path); else 0. The plugstack file is left enabled at the end.

Run inside the cluster's namespace (bench/run.sh soak does):
    contrib/slurm/cluster exec /usr/bin/python3 bench/soak_bench.py PLUGIN CLIENTS PLUGSTACK_D STEPS WAVES
"""

import collections
import glob
import json
import os
import re
import subprocess
import sys
import time

from plugstack import open_mpi_env

plugin, clients, plugstack_d = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
steps, waves = int(sys.argv[4]), int(sys.argv[5])
conf = os.path.join(plugstack_d, "exitpolicy.conf")
# The daemon beside the plugin in its build tree (a plugin knows none by default).
daemon = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(plugin))), "pmix_server", "exitpolicy-pmixd")
enabled = f"optional {plugin} daemon={daemon}\n"
env = {**os.environ, **open_mpi_env()}

# The kinds: srun options under ours (after --mpi=none -N4 -n8), the command,
# the code srun must return.
MAIN = ["--exit-policy=main-rank"]
KINDS = {
    "success": (MAIN, ["true"], 0),
    "exit-3": ([], ["sh", "-c", 'if [ "$SLURM_PROCID" = 5 ]; then exit 3; fi'], 3),
    "segv-main": (MAIN, ["sh", "-c", 'if [ "$SLURM_PROCID" = 0 ]; then kill -SEGV $$; fi'], 139),
    "fence": (MAIN, [os.path.join(clients, "ep_fence"), "--data", "--timeout", "30"], 0),
    "mpi-hello": (MAIN, [os.path.join(clients, "ep_mpi_ring"), "--timeout", "60"], 0),
    "mpi-abort": (MAIN, [os.path.join(clients, "ep_mpi_fail"), "--fail", "3:abort:7", "--timeout", "60"], 7),
}
NAMES = list(KINDS)
# An MPI step is judged once a rank got this far; before, it is run again.
REACHED = {
    "mpi-hello": lambda out: out.count("mpi ok ") == 8,
    "mpi-abort": lambda out: "fail rank=3 " in out,
}
SRUN_TIMEOUT = 300

# Not ours to watch: where this script runs, and the cluster's own state
# (its logs change with every step).
cluster_dir = os.path.dirname(os.path.dirname(os.path.abspath(plugstack_d)))
ignored = {os.path.realpath(os.getcwd()), cluster_dir,
           os.path.abspath(os.environ.get("EXITPOLICY_CLUSTER_DIR", cluster_dir))}
# At the top of /tmp: what a step's MPI, PMIx or exitpolicy could make there.
TOP = ["/tmp/ompi*", "/tmp/openmpi*", "/tmp/prte*", "/tmp/pmix*", "/tmp/spmix*", "/tmp/exitpolicy.*", "/tmp/core*"]
# Walked in full. The nodes' TmpFS is inside the cluster's directory, but it
# is where Slurm's mpi/pmix puts its own directories.
DEEP = ["/tmp/ompi.*", "/tmp/exitpolicy.*", "/tmp/pmix*", "/tmp/spmix*", os.path.join(cluster_dir, "nodes", "*", "tmp")]
# Processes are this cluster's only: those in its network namespace (ours).
# Another cluster on this machine has daemons and test programs of its own.
NETNS = os.stat("/proc/self/ns/net").st_ino


def set_conf(text):
    """Replaces the plugstack file at once, so that no step reads half of it."""
    tmp = conf + ".tmp"  # not *.conf
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, conf)


def is_ignored(path):
    return any(path == d or path.startswith(d + "/") for d in ignored)


def processes():
    """The cluster's exitpolicy-pmixd, orted, prted and test programs, as
    (pid, name, cmdline); zombies left out."""
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino != NETNS:
                continue
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)"))
        except (OSError, IndexError):
            continue  # gone, or a kernel thread
        if state in ("Z", "X") or not argv:
            continue
        cmdline = " ".join(argv)
        name = os.path.basename(argv[0])
        if exe == "exitpolicy-pmixd":
            found.add((int(pid), exe, cmdline))
        elif exe in ("orted", "prted") or name in ("orted", "prted") or clients in cmdline:
            found.add((int(pid), name, cmdline))
    return found


def snapshot():
    """Everything a step could leave behind: (paths, processes)."""
    paths = {os.path.join("/dev/shm", name) for name in os.listdir("/dev/shm")}
    # In /tmp, what MPI, PMIx and exitpolicy make (this machine's other
    # users of /tmp are not ours to count).
    paths |= {p for pattern in TOP for p in glob.glob(pattern) if not is_ignored(p)}
    for root in sorted({r for pattern in DEEP for r in glob.glob(pattern)}):
        for parent, dirs, files in os.walk(root):
            paths.update(os.path.join(parent, n) for n in dirs + files)
    return paths, processes()


def settle(before):
    """Waits (at most 10 s) until no exitpolicy-pmixd started since `before` runs."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not [p for p in processes() - before[1] if p[1] == "exitpolicy-pmixd"]:
            return
        time.sleep(0.1)


def still_there(after):
    """What is still there two seconds later: a step of another cluster on
    this machine may have had its directories there for a moment."""
    time.sleep(2)
    again = snapshot()
    return after[0] & again[0], after[1] & again[1]


def group(path):
    """A leftover's group: its name with the numbers (and mkdtemp's suffix)
    generalised, e.g. /tmp/ompi.node1.0/jf.NNN."""
    parent, name = os.path.split(path)
    step_dir = re.match(r"exitpolicy\.\d+\.\d+\.([^.]+)\.[^.]+$", name)
    if step_dir:
        name = f"exitpolicy.JOB.STEP.{step_dir.group(1)}.XXXXXX"
    else:
        name = re.sub(r"(?:^|(?<=[._-]))\d+(?=$|[._-])", "NNN", name)
    return os.path.join(parent, name)


def leftovers(paths, procs):
    """New paths and processes, grouped and counted: one line per group."""
    lines = []
    # A directory left behind is counted once, with what is inside it.
    roots = sorted(p for p in paths if os.path.dirname(p) not in paths)
    counts, inside = collections.Counter(), collections.Counter()
    for root in roots:
        counts[group(root)] += 1
        inside[group(root)] += sum(1 for p in paths if p.startswith(root + "/"))
    for key in sorted(counts):
        lines.append(f"{key}: {counts[key]}" + (f" (+{inside[key]} inside)" if inside[key] else ""))
    by_name = collections.defaultdict(list)
    for pid, name, cmdline in sorted(procs):
        by_name[name].append(f"pid {pid} `{cmdline}`")
    for name in sorted(by_name):
        lines.append(f"process {name}: {len(by_name[name])}: " + ", ".join(by_name[name]))
    return lines


def start(mpi, kind):
    options, command, _ = KINDS[kind]
    args = ["srun", f"--mpi={mpi}", "-N4", "-n8"] + (options if mpi == "none" else []) + command
    return subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace")


def finish(proc):
    """Waits for srun: (code, stdout, stderr). One that hangs is ended."""
    try:
        out, err = proc.communicate(timeout=SRUN_TIMEOUT)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        proc.terminate()  # srun passes it on to the step
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return proc.returncode, out, err + f"\nsoak_bench: srun still running after {SRUN_TIMEOUT} s, ended"


sruns = collections.Counter()  # every srun run, retries included, by --mpi
retries = collections.Counter()  # (mpi, kind)
wrong = []


def step(mpi, kind, proc=None):
    """One step of this kind (already started if proc is given): (code,
    stdout, stderr). An MPI step in which no rank got to its point is run
    again, at most three times in all; the last one stands."""
    proc = proc or start(mpi, kind)
    for attempt in range(3):
        result = finish(proc)
        sruns[mpi] += 1
        if kind not in REACHED or REACHED[kind](result[1]) or attempt == 2:
            return result
        retries[(mpi, kind)] += 1
        proc = start(mpi, kind)


def judge(where, kind, result):
    code, _, err = result
    expected = KINDS[kind][2]
    if code != expected:
        tail = " | ".join(err.strip().splitlines()[-5:])
        wrong.append(f"{kind} ({where}): expected {expected}, got {code}; srun's stderr ends: {tail}")


try:
    # The soak, under ours: steps in a row, then waves.
    set_conf(enabled)
    before = snapshot()
    t0 = time.perf_counter()
    for i in range(steps):
        kind = NAMES[i % len(NAMES)]
        judge(f"step {i + 1}", kind, step("none", kind))
    for w in range(waves):
        kinds = [NAMES[(4 * w + j) % len(NAMES)] for j in range(4)]
        started = [start("none", kind) for kind in kinds]  # all four before waiting for any
        for kind, proc in zip(kinds, started):
            judge(f"wave {w + 1}", kind, step("none", kind, proc))
    soak_rate = sruns["none"] / (time.perf_counter() - t0)
    settle(before)
    after = still_there(snapshot())
    left_soak = leftovers(after[0] - before[0], after[1] - before[1])

    # The MPI kinds under Slurm's mpi/pmix and under ours, paired; what
    # appears during a step is charged to its side.
    pairs = max(6, steps // 6 * 2)
    initial = snapshot()
    seen = initial[0] | initial[1]
    side_of = {}
    spent = collections.Counter()
    ran = collections.Counter()
    codes = {(mpi, kind): collections.Counter() for mpi in ("none", "pmix") for kind in REACHED}
    mpi = "none"
    for i in range(pairs):
        kind = "mpi-hello" if i % 2 == 0 else "mpi-abort"
        for mpi in (["none", "pmix"] if i // 2 % 2 == 0 else ["pmix", "none"]):
            set_conf(enabled if mpi == "none" else "")
            n, t = sruns[mpi], time.perf_counter()
            result = step(mpi, kind)
            spent[mpi] += time.perf_counter() - t
            ran[mpi] += sruns[mpi] - n
            codes[(mpi, kind)][result[0]] += 1
            if mpi == "none":
                judge(f"pair {i + 1}", kind, result)
            now = snapshot()
            for item in (now[0] | now[1]) - seen:
                side_of[item] = mpi
            seen |= now[0] | now[1]
    set_conf(enabled)
    settle(initial)
    final = still_there(snapshot())
    # What appeared only after the last step is charged to the last step's side.
    new_paths, new_procs = final[0] - initial[0], final[1] - initial[1]
    left_pairs = {side: leftovers({p for p in new_paths if side_of.get(p, mpi) == side},
                                  {p for p in new_procs if side_of.get(p, mpi) == side})
                  for side in ("none", "pmix")}
finally:
    set_conf(enabled)

left_ours = left_soak + [f"in the MPI pairs: {line}" for line in left_pairs["none"]]
rate_ours, rate_pmix = ran["none"] / spent["none"], ran["pmix"] / spent["pmix"]
SIDE = {"none": "exitpolicy", "pmix": "mpi/pmix"}


def report(title, lines):
    print(f"{title}: none" if not lines else f"{title}:")
    for line in lines:
        print(f"  {line}")


print(f"soak: {steps} steps in a row + {waves} waves of 4: {soak_rate:.1f} steps/s, wrong codes: {len(wrong)}")
for line in wrong:
    print(f"  wrong code: {line}")
print("retries (MPI steps in which no rank got to its point, run again): "
      + ", ".join(f"{SIDE[m]} {k} {retries[(m, k)]}" for m in SIDE for k in REACHED))
report("left behind by exitpolicy", left_ours)
print(f"MPI steps, ours vs Slurm's mpi/pmix: {rate_ours:.2f} vs {rate_pmix:.2f} steps/s "
      f"(ratio {rate_ours / rate_pmix:.2f}; {pairs} steps each, in alternating pairs)")
print("  srun's codes: " + "; ".join(f"{SIDE[m]} {k} {dict(codes[(m, k)])}" for m in SIDE for k in REACHED))
report("left behind by --mpi=pmix", left_pairs["pmix"])
figures = {
    "steps": steps + 4 * waves,
    "waves": waves,
    "steps_per_s": round(soak_rate, 2),
    "wrong_codes": len(wrong),
    "retries": sum(n for (m, _), n in retries.items() if m == "none"),
    "retries_mpi_pmix": sum(n for (m, _), n in retries.items() if m == "pmix"),
    "left_ours": left_ours,
    "left_mpi_pmix": left_pairs["pmix"],
    "mpi_steps_per_s_ours": round(rate_ours, 2),
    "mpi_steps_per_s_pmix": round(rate_pmix, 2),
}
print("soak-json " + json.dumps(figures))
sys.exit(1 if wrong or left_ours else 0)
