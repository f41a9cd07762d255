"""Samples the process tree under a pid in a process of its own (a script the local fleet starts, not a test):
``python -m bench.procwatch PID OUT``.

Why: the local fleet's harness shares its process with the operator, and reports that process's CPU as the
operator's. Walking /proc for the agents' count and RSS every half second took about a tenth of that process's
busy time at 300 Stacks (py-spy), charged to the operator. Here it is charged to this process instead. Every
:data:`bench.bed.POLL` seconds it writes the most agents seen at once, the peak RSS of the tree (without itself), and
when the parent's own RSS (the operator's and the harness's) peaked, in seconds since the start, to OUT as JSON,
replacing the file whole; it stops when its parent is gone or on SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from bench import localfleet
from bench.bed import POLL


def main(argv: list[str]) -> int:
    pid, out = int(argv[0]), Path(argv[1])
    me = os.getpid()
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    peak_rss = most_agents = own_peak = 0
    start = time.monotonic()
    own_peak_at = 0.0
    while not stop[0] and os.getppid() == pid:
        peak_rss = max(peak_rss, sum(localfleet.rss(p) for p in localfleet.children(pid) if p != me))
        most_agents = max(most_agents, localfleet.agents(pid))
        own = localfleet.rss(pid)
        if own > own_peak:
            own_peak, own_peak_at = own, time.monotonic() - start
        partial = out.with_suffix(".partial")
        partial.write_text(json.dumps({"peak_rss": peak_rss, "most_agents": most_agents,
                                       "own_peak_at": round(own_peak_at, 1)}))
        partial.replace(out)
        time.sleep(POLL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
