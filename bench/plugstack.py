# SPDX-License-Identifier: Apache-2.0
"""plugstack.py - the benchmarks' one way to turn the plugin on and off on the local cluster, and to
time configurations side by side."""

import os


def configure(conf, line):
    """Writes `line` as the plugstack file `conf`, or removes it (no plugin) when line is None."""
    if line is None:
        if os.path.exists(conf):
            os.unlink(conf)
    else:
        with open(conf, "w") as f:
            f.write(line)


def interleaved(names, run, rounds):
    """Each configuration once to warm up, then `rounds` rounds of all of
    them, who goes first rotating, so that machine noise hits all alike:
    {name: [seconds of each round]} from run(name)."""
    for name in names:
        run(name)
    times = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(run(name))
    return times
