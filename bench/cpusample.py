"""A sampling profiler on the process's CPU clock, for the operator's process in a bench run: set
``PKO_BENCH_CPU_PROFILE=FILE`` and :mod:`bench.operatorproc` writes the samples to FILE as collapsed stacks
(``frame;frame;frame count`` lines, what flame graph tools read) when it stops.

Why: py-spy samples on the wall clock. The operator waits most of a run (for agents, for the API server), and a
wall-clock sample of a thread that waits in C (uvloop's poll, gRPC's threads) looks busy to it, so its shares were
not the operator's CPU (docs/performance.md). ``ITIMER_PROF`` ticks only while the process uses CPU, in any of its
threads; each tick records what the main thread runs at that moment. CPU spent by another thread while the main
thread waits shows as the loop's own frame (``run``): that is the gRPC threads' and the kernel's share. A tick costs
a few microseconds (a frame walk in Python), so at the default 100 Hz of CPU the profile adds about 0.1%.
"""

from __future__ import annotations

import collections
import signal
import sys
from pathlib import Path
from types import FrameType

#: CPU seconds between two samples.
INTERVAL = 0.01

#: Frames kept from the outermost: deeper stacks are cut there (the informers' and the client's are not deeper).
DEPTH = 64


def label(frame: FrameType) -> str:
    """One frame as a flame graph shows it: the module's file name without its folder, the function's qualified
    name, its first line (a collapsed stack's separators ``;`` and spaces are replaced)."""
    code = frame.f_code
    where = code.co_filename.rsplit("/", 2)
    short = "/".join(where[-2:])
    return f"{short}:{code.co_qualname}:{code.co_firstlineno}".replace(";", ",").replace(" ", "_")


def stack(frame: FrameType | None) -> str:
    """The collapsed stack of `frame`, outermost first, at most :data:`DEPTH` frames."""
    names: list[str] = []
    while frame is not None:
        names.append(label(frame))
        frame = frame.f_back
    names.reverse()
    return ";".join(names[:DEPTH])


class Sampler:
    """Samples the main thread's stack on every :data:`INTERVAL` of the process's CPU, until :meth:`stop`."""

    def __init__(self, interval: float = INTERVAL) -> None:
        self.interval = interval
        self.counts: collections.Counter[str] = collections.Counter()

    def _tick(self, signum: int, frame: FrameType | None) -> None:
        self.counts[stack(frame)] += 1

    def start(self) -> None:
        signal.signal(signal.SIGPROF, self._tick)
        signal.setitimer(signal.ITIMER_PROF, self.interval, self.interval)

    def stop(self) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, signal.SIG_IGN)

    def collapsed(self) -> str:
        """The samples as collapsed stacks, the commonest first."""
        return "".join(f"{s} {n}\n" for s, n in self.counts.most_common())

    def write(self, path: Path) -> None:
        path.write_text(self.collapsed())


def top(collapsed: str, *, limit: int = 40) -> list[tuple[str, float, float]]:
    """The frames of `collapsed` with the largest inclusive share: (frame, inclusive %, self %), a frame counted once
    a sample however often it recurs in it."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        frames, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        names = frames.split(";")
        for name in set(names):
            inclusive[name] += n
        own[names[-1]] += n
    if not total:
        return []
    return [(name, 100 * n / total, 100 * own[name] / total) for name, n in inclusive.most_common(limit)]


def main(argv: list[str]) -> int:
    """``python -m bench.cpusample FILE [LIMIT]``: the frames with the largest inclusive share of FILE's samples."""
    text = Path(argv[0]).read_text()
    for name, incl, self_share in top(text, limit=int(argv[1]) if len(argv) > 1 else 40):
        print(f"{incl:6.1f}% {self_share:6.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
