# SPDX-License-Identifier: Apache-2.0
"""What the node daemon's children hold of it, on the real cluster
(docs/security.md, "What root does, and why it is safe"): nothing.

The event anchor, a PMIx client the daemon spawns for the step's life,
inherited every overlay link the daemon had connected (libevent makes those
sockets without close-on-exec): a link the daemon closed, or lost when it
crashed, sent no FIN to its peer until the anchor exited.
"""

import os
import time

import pytest

from test_pmix import client, daemon_arg, daemons, pmix, socket_inodes  # noqa: F401 (pmix: a fixture)

pytestmark = pytest.mark.integration


def children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(entry))
    return out


def test_the_event_anchor_holds_none_of_the_daemons_sockets(cluster, workdir, pmix):
    """node1's daemon relays for node3 and node4 (fan-out 2) and links to
    srun: its overlay sockets are its own, not its event anchor's too. The
    tasks are PMIx clients that stay (the server and its anchor start with
    the first client)."""
    before = set(daemons())  # an earlier step's may still be on its way out
    proc = cluster.popen("srun", "-N4", "-n8", client("ep_events"), "--victim", "0", "--exit", "0",
                         "--finalize-victim", "--delay", "5", "--expect", "0", "--timeout", "6", cwd=workdir)
    try:
        daemon = None
        deadline = time.monotonic() + 10
        while daemon is None and time.monotonic() < deadline:
            daemon = next((p for p in set(daemons()) - before if daemon_arg(p, b"--hostname") == "node1"), None)
            time.sleep(0.05)
        assert daemon is not None, "no daemon for node1 appeared"
        anchor = None
        deadline = time.monotonic() + 10
        while anchor is None and time.monotonic() < deadline:
            anchor = next((c for c in children(daemon)
                           if b"--event-anchor" in open(f"/proc/{c}/cmdline", "rb").read()), None)
            time.sleep(0.05)
        assert anchor is not None, "node1's daemon started no event anchor"
        time.sleep(0.5)  # the children's links are up by now
        mine = socket_inodes(daemon)
        assert len(mine) >= 4, mine  # listeners, srun, node3, node4, its clients' socket
        shared = mine & socket_inodes(anchor)
        assert not shared, f"the event anchor holds {len(shared)} of the daemon's sockets"
    finally:
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
