"""Where a whole `make test` run spent the machine's CPU, by command: the kernel's process accounting, summed.

Why: `make test` keeps both cores of a 2-core machine busy, so its wall time is its CPU time over two, and it only
gets shorter when a test does less work, not when it waits differently. `--durations` and the tier table say how
long tests took; they cannot say that a third of the run's CPU is the Pulumi CLI starting up, or how much the
control planes burn while tests wait. Every process that exits writes a 64-byte record (command name, user and
system time, elapsed time, pid and parent) to the file that ``acct(2)`` names; summing the records by command gives
the table `make test` ends with.

Root only (``acct(2)`` needs CAP_SYS_PACCT), as the cluster tier is: otherwise ``start`` says so and the run goes
on without the table. Accounting covers this PID namespace and those below it: every process of the run counts, a
workspace pod's included, and so does anything else there meanwhile. Processes still running at ``stop`` (none,
after a run: the streams have ended) have no record. ``start`` takes accounting over (one file per namespace) and
``stop`` turns it off: a host that keeps its own accounting on (psacct) turns it on again after a run. A kernel
without version-3 records gives an empty table.

``python -m pko.testing.cpuacct start FILE`` / ``stop`` / ``report FILE``. The record layout is Linux's
``struct acct_v3`` (``linux/acct.h``); times are ``comp_t`` in ticks of ``AHZ`` = 100 per second.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import ctypes.util
import os
import struct
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

#: ``struct acct_v3``: flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (float), utime, stime, mem,
#: io, rw, minflt, majflt, swaps (comp_t each), comm[16].
_RECORD = struct.Struct("=BBHIIIIIIf8H16s")
_VERSION = 3
_AHZ = 100.0


@dataclass(frozen=True)
class Record:
    """One exited process."""

    command: str
    cpu: float  # user + system, seconds
    elapsed: float  # seconds
    pid: int
    ppid: int


def comp_t(value: int) -> int:
    """A ``comp_t`` (13-bit mantissa, 3-bit base-8 exponent) as the integer it stands for."""
    return (value & 0x1FFF) << (3 * ((value >> 13) & 0x7))


def records(data: bytes) -> Iterator[Record]:
    """The version-3 records in `data` (a trailing partial record, written as the file was read, is left out)."""
    for offset in range(0, len(data) - _RECORD.size + 1, _RECORD.size):
        fields = _RECORD.unpack_from(data, offset)
        if fields[1] & 0x7F != _VERSION:
            continue
        utime, stime = comp_t(fields[10]), comp_t(fields[11])
        command = fields[18].split(b"\0", 1)[0].decode("utf-8", "replace")
        yield Record(command, (utime + stime) / _AHZ, fields[9] / _AHZ, fields[6], fields[7])


@dataclass
class Total:
    processes: int = 0
    cpu: float = 0.0


def by_command(found: Iterable[Record]) -> dict[str, Total]:
    totals: dict[str, Total] = collections.defaultdict(Total)
    for record in found:
        total = totals[record.command]
        total.processes += 1
        total.cpu += record.cpu
    return dict(totals)


def table(totals: dict[str, Total], wall: float | None = None, top: int = 15) -> list[str]:
    """The lines `make test` prints: the commands that used the most CPU, each with its share, its process count
    and its CPU per process; the rest summed; then the total (and the cores it kept busy over `wall` seconds)."""
    whole = sum(t.cpu for t in totals.values()) or 1e-9
    ranked = sorted(totals.items(), key=lambda item: (-item[1].cpu, item[0]))
    lines = [f"{'command':16s} {'CPU s':>9s} {'share':>6s} {'processes':>9s} {'CPU s each':>10s}"]
    for command, total in ranked[:top]:
        lines.append(f"{command:16s} {total.cpu:9.1f} {100 * total.cpu / whole:5.1f}% {total.processes:9d} "
                     f"{total.cpu / total.processes:10.2f}")
    rest = ranked[top:]
    if rest:
        cpu = sum(t.cpu for _, t in rest)
        count = sum(t.processes for _, t in rest)
        lines.append(f"{f'({len(rest)} others)':16s} {cpu:9.1f} {100 * cpu / whole:5.1f}% {count:9d}")
    processes = sum(t.processes for t in totals.values())
    summary = f"{'total':16s} {whole:9.1f} {100.0:5.1f}% {processes:9d}"
    if wall:
        summary += f"   ({whole / wall:.2f} cores busy over {wall:.0f} s)"
    lines.append(summary)
    return lines


def _acct(path: str | None) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.acct(path.encode() if path is not None else None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def start(path: Path) -> str | None:
    """Turn accounting on into `path` (created empty); None when it is on, else why not."""
    if os.geteuid() != 0:
        return "process accounting needs root: no CPU table for this run"
    path.write_bytes(b"")
    try:
        _acct(str(path))
    except OSError as err:
        return f"process accounting could not start ({err}): no CPU table for this run"
    return None


def stop() -> None:
    """Turn accounting off (for this PID namespace; a no-op when it was off)."""
    if os.geteuid() == 0:
        with contextlib.suppress(OSError):
            _acct(None)


def main(argv: Sequence[str]) -> int:
    if len(argv) >= 2 and argv[0] == "start":
        problem = start(Path(argv[1]))
        if problem:
            print(f"[make test] {problem}")
        return 0
    if argv[:1] == ["stop"]:
        stop()
        return 0
    if len(argv) >= 2 and argv[0] == "report":
        path = Path(argv[1])
        if not path.is_file() or not path.stat().st_size:
            return 0
        wall = float(argv[2]) if len(argv) > 2 else None
        print("\n[make test] CPU by command (process accounting, every process that exited during the run):")
        for line in table(by_command(records(path.read_bytes())), wall):
            print(line)
        return 0
    print("usage: python -m pko.testing.cpuacct start FILE | stop | report FILE [WALL_SECONDS]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
