"""What the fault tests (chaos and cluster tiers) share about *when* to strike: a schedule of kill points that
exercises each point before repeating any, and recognising a `pulumi install` process in /proc."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path


def schedule(rng: random.Random, points: Sequence[str], rounds: int) -> list[str]:
    """`rounds` kill points: every point once in a random order, then again, so each is exercised."""
    order: list[str] = []
    while len(order) < rounds:
        order += rng.sample(list(points), len(points))
    return order[:rounds]


def is_pulumi_install(pid: int) -> bool:
    """Process `pid` is the Pulumi CLI running `pulumi install` (an agent installing a program's dependencies)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(argv) and Path(argv[0].decode(errors="replace")).name == "pulumi" and b"install" in argv[1:]
