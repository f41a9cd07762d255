"""Samples the process tree under a pid in a process of its own (a script the local fleet starts, not a test):
``python -m bench.procwatch PID OUT``, PID the operator's process (:mod:`bench.operatorproc`).

Why: walking /proc for the agents' count and RSS every half second took about a tenth of a process's busy time at
300 Stacks (py-spy); here it is charged to neither the operator nor the harness. Every :data:`EVERY`
seconds it writes the most agents seen at once, the peak RSS of PID's descendants (the agents and their CLIs), and
when PID's own RSS peaked, in seconds since the start, to OUT as JSON, rewriting it in place
(:class:`bench.proctree.StatusFile`); it stops when the process that started it (the harness) is gone, or on
SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from bench import proctree

#: Seconds between samples.
EVERY = 0.5


def main(argv: list[str]) -> int:
    pid, out = int(argv[0]), Path(argv[1])
    me, harness = os.getpid(), os.getppid()
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    peak_rss = most_agents = own_peak = 0
    start = time.monotonic()
    own_peak_at = 0.0
    status = proctree.StatusFile(out)
    while not stop[0] and os.getppid() == harness:
        peak_rss = max(peak_rss, sum(proctree.rss(p) for p in proctree.children(pid) if p != me))
        most_agents = max(most_agents, proctree.agents(pid))
        own = proctree.rss(pid)
        if own > own_peak:
            own_peak, own_peak_at = own, time.monotonic() - start
        status.write({"peak_rss": peak_rss, "most_agents": most_agents,
                                  "own_peak_at": round(own_peak_at, 1)})
        time.sleep(EVERY)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
