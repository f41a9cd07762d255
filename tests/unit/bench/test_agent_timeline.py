"""The cold start's timeline from a workspace pod's log: each step of pko's agent found once, at the time
``kubectl logs --timestamps`` gives its first line, counted from the pod's creation."""

from __future__ import annotations

from datetime import datetime

from bench.scenarios import agent_timeline

# a first cold start's `pulumi` container, as the bench read it (2026-12-07)
LOG = """\
2026-12-07T10:24:49.498817629Z 2026-12-07 10:24:49,498 INFO pko.agent: Pulumi Kubernetes Agent (pko 0.1.0)
2026-12-07T10:24:49.725035468Z 2026-12-07 10:24:49,725 INFO pko.agent.serve: installation skipped
2026-12-07T10:24:49.729484932Z 2026-12-07 10:24:49,729 INFO pko.agent.grpc: server listening on 0.0.0.0:50051
2026-12-07T10:24:50.376715127Z 2026-12-07 10:24:50,376 INFO pko.agent.server: installing the project dependencies
2026-12-07T10:24:55.810873299Z 2026-12-07 10:24:55,810 INFO pko.agent.server: installation completed
2026-12-07T10:24:56.257237020Z 2026-12-07 10:24:56,257 INFO pko.agent.server: up: kept running as operation c71d
2026-12-07T10:24:56.692884950Z 2026-12-07 10:24:56,692 INFO pko.agent.pulumi: Updating (s000):
2026-12-07T10:25:05.1Z 2026-12-07 10:25:05,100 INFO pko.agent.server: installing the project dependencies
"""


def test_each_step_is_found_once_from_the_pod_s_creation() -> None:
    created = datetime.fromisoformat("2026-12-07T10:24:45+00:00").timestamp()
    found = agent_timeline(created, LOG)
    assert {name: round(value, 3) for name, value in found.items()} == {
        "pod→agent start (s)": 4.499, "pod→agent listening (s)": 4.729, "pod→Install asked (s)": 5.377,
        "pod→installed (s)": 10.811, "pod→up started (s)": 11.257}


def test_another_agent_s_log_gives_no_figure() -> None:
    assert agent_timeline(0.0, "2026-12-07T10:24:49.1Z level=info msg=\"serving on :50051\"\n") == {}
