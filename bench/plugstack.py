# SPDX-License-Identifier: Apache-2.0
"""plugstack.py - the benchmarks' one way to turn the plugin on and off on the local cluster."""

import os


def configure(conf, line):
    """Writes `line` as the plugstack file `conf`, or removes it (no plugin) when line is None."""
    if line is None:
        if os.path.exists(conf):
            os.unlink(conf)
    else:
        with open(conf, "w") as f:
            f.write(line)
