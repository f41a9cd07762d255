"""How the replay of PKO#1293 (`python -m bench killed`) splits its Stacks: 8 long operations in 280 as the issue
found, half of them losing their agent at the kill, and never a replay without a long one or a short one."""

from __future__ import annotations

import pytest

from bench.scenarios import long_share


@pytest.mark.parametrize(("stacks", "expected"), [
    (280, (8, 4, 272)),  # the fleet: 8 slots held by dead operations
    (1, (1, 0, 1)),  # the smoke run: one long, one short, no agent killed
    (70, (2, 1, 68)),
    (1000, (29, 14, 971)),
])
def test_long_operations_are_eight_in_280_and_half_of_them_lose_their_agent(
        stacks: int, expected: tuple[int, int, int]) -> None:
    assert long_share(stacks) == expected
