"""A short run of every benchmark scenario (`bench/`) against both operators on this tier's cluster: the harness
must keep producing its figures for pko and for the Go operator, and its headline lines. Only that: the figures
themselves are for `python -m bench`, never asserted in a test, so the smoke run uses the smallest sizes that still
exercise every code path (one Stack, one change, a few idle seconds), and an operator's scenarios at once (but
the ones that restart or kill the operator, after them): about half the time of one after the other.

`make test` runs every scenario under pko and three under the Go operator (`fleet`, `idle`, `startup`: its
install, its pod's CPU, memory and API requests, its workspace pods); the others are the same scenario code,
guarded under pko, and ``make soak`` (``PKO_SOAK=1``) runs every scenario under both."""

from __future__ import annotations

import math
import os
import re
import time

import pytest

from bench import harness, report
from bench.scenarios import SCENARIOS
from pko.kube import client as kclient
from pko.testing import cluster, gitserver

HEADLINE = re.compile(r"^(\w+): pko/go = (\d+\.\d\d)$")
SOAK = bool(os.environ.get("PKO_SOAK"))
#: the scenarios the Go operator runs too: in `make test` the three whose figures the benchmark's headline ratios
#: are read from most (its install, its pod's CPU and memory, its API requests, its workspace pods), every one under
#: `make soak`
FOR_GO = list(SCENARIOS) if SOAK else ["fleet", "idle", "startup"]


@pytest.mark.timeout(900)  # eight scenarios under pko, the calm ones under the Go operator
async def test_every_scenario_yields_figures_for_both_operators(
    ckc: kclient.Client, real_cluster: cluster.Cluster, pod_git: gitserver.GitServer,
) -> None:
    def say(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)  # shown when the test fails (-rA), or with -s

    smallest = {"stacks": 1, "changes": 1, "idle_seconds": 5, "sleep_seconds": 3, "git": pod_git, "say": say,
                "together": True}
    results = await harness.run(real_cluster, ckc, list(SCENARIOS), ["pko"], **smallest)
    for name, figures in (await harness.run(real_cluster, ckc, FOR_GO, ["go"], **smallest)).items():
        results[name].update(figures)
    assert {"fleet", "idle", "startup"} <= set(FOR_GO)
    for name, scenario in SCENARIOS.items():
        assert set(results[name]) == ({"pko", "go"} if name in FOR_GO else {"pko"}), (name, results[name])
        for operator, figures in results[name].items():
            assert scenario.headline in figures, (name, operator, figures)
            produced = {figure: value for figure, value in figures.items() if not math.isnan(value)}
            assert produced == figures, f"{name}/{operator}: figures missing: {figures}"
            assert figures[scenario.headline] > 0, (name, operator, figures)
    # what each run measured from outside the operator: its pod's CPU and memory, its API requests, and the CPU
    # of the fleet's workspace pods
    for operator in ("pko", "go"):
        assert results["fleet"][operator]["operator CPU (s)"] > 0, results["fleet"]
        assert results["fleet"][operator]["API requests"] > 0, results["fleet"]
        assert results["fleet"][operator]["workspace pods CPU (s)"] > 0, results["fleet"]  # what the Stacks' pods did
    assert results["idle"]["pko"]["workspace pod RSS (MB)"] > 1
    # pko's fleet asleep (scale-to-zero): no workspace pod left, and one Stack woken on request
    assert results["idle"]["pko"]["asleep: workspace pods RSS total (MB)"] == 0, results["idle"]
    assert results["idle"]["pko"]["cold request→Ready (s)"] > 0, results["idle"]
    assert "cold request→Ready (s)" not in results["idle"]["go"], results["idle"]
    assert results["restart"]["pko"]["updates re-run"] == 0, results["restart"]
    # the cold start's timeline from pko's agent log, in the order of a workspace's start
    cold = results["coldstart"]["pko"]
    steps = [cold[f"second cold start: pod→{step} (s)"]
             for step in ("agent start", "agent listening", "Install asked", "installed", "up started")]
    assert steps[0] > 0, cold
    assert steps == sorted(steps), cold
    # PKO#1293's replay: the operator SIGKILLed while the long `up` runs in its (live) workspace pod; pko's agent
    # keeps that `up` running and the restarted operator follows it to its end (pko.agent.kept): one Update, not two
    killed = results["killed"]["pko"]
    assert killed["long operations running at the kill"] == 1, killed
    assert killed["long operations run twice (agent alive)"] == 0, killed
    assert killed["Updates a Stack (agent alive)"] == 1, killed
    printed: list[str] = []
    harness.show(results, list(SCENARIOS), printed.append)
    found = {m.group(1) for m in (HEADLINE.match(line) for line in printed) if m}
    assert found == set(FOR_GO), printed
    assert {f"{name}: pko/go = n/a" for name in SCENARIOS if name not in FOR_GO} <= set(printed), printed
    assert "pko/go" in report.table(results, "fleet")
