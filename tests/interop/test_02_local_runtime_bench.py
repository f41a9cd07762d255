"""The benchmark's `local` runtime fleet (`python -m bench fleet --runtime local --restart`) at its smallest: pko
alone, for the Go operator has no local runtime. It needs no cluster (its control plane and operator are its own),
so `make test` runs it in the local stream, beside the cluster stream rather than in it; the benchmark smoke of
`test_90_bench_smoke` covers the scenarios that run on the cluster."""

from __future__ import annotations

import math

from bench import localfleet


async def test_the_local_runtime_fleet_yields_figures() -> None:
    """`python -m bench fleet --runtime local --restart`: pko alone (the Go operator has no local runtime)."""
    figures = await localfleet.run(1, say=lambda line: None, restart=True)
    assert figures["all Ready (s)"] > 0, figures
    assert figures["restart: all verified (s)"] > 0, figures
    assert figures["restart: updates re-run"] == 0, figures
    assert figures["restart: Ready after"] == 1, figures
    assert figures["agents RSS at rest (MB)"] > 1, figures  # the agent process was alive and measured
    # the operator runs in a process of its own (bench.operatorproc): its own CPU and memory when the fleet is
    # Ready, beside its peak (the sampler says when that was), and the harness's CPU apart
    assert 10 < figures["operator RSS when all Ready (MB)"] <= figures["operator peak RSS (MB)"], figures
    assert figures["operator peak RSS reached after (s)"] >= 0, figures
    # the operator's process was measured (the work itself is the reconciles below: one Stack, its Workspace and its
    # Update took 0.02 CPU s on 2026-12-06, so a floor above a clock tick or two would measure the machine)
    assert figures["operator CPU (s)"] > 0, figures
    assert figures["harness CPU (s)"] > 0, figures
    assert figures["restart: operator CPU (s)"] > 0, figures
    # the operator's own requests, told apart in the audit log by its User-Agent: a Stack's status, Workspace,
    # Update and events are written, and the restarted operator reads what it verifies
    assert figures["API writes per Stack"] >= 4, figures
    assert figures["restart: API requests per Stack"] > 0, figures
    # and its reconciles, from its own counter: the Stack, its Workspace and its Update at least once each
    assert figures["reconciles per Stack"] >= 3, figures
    assert figures["restart: reconciles per Stack"] >= 1, figures  # the new operator verified the Stack
    # the floor, measured in the same run: the CLI's own CPU for a Stack of the same program (a CLI start alone is
    # about 0.2 CPU s, and the sequence starts three), and the fleet's time over it
    assert 0.1 < figures["floor: CLI CPU a Stack, empty backend (s)"] < 30, figures
    assert 0.1 < figures["floor: CLI CPU a Stack, after the fleet (s)"] < 30, figures
    assert figures["all Ready over the floor"] == figures["all Ready (s)"] / figures["floor (s)"], figures
    assert not [name for name, value in figures.items() if math.isnan(value)], figures
