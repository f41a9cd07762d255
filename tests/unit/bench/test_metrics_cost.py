"""bench.metricscost compares like with like: the same series either way, pko's in less memory."""

from __future__ import annotations

import prometheus_client

from bench import metricscost
from pko.runtime import compactmetrics


def test_both_ways_write_the_same_series_and_pko_holds_less() -> None:
    before = metricscost.measure(metricscost._client_metrics, prometheus_client.generate_latest, 50)
    after = metricscost.measure(metricscost._pko_metrics, compactmetrics.exposition, 50)
    assert before["series"] == after["series"] == 50 * (18 * 4 + 2 * 4 + 1)
    assert after["held (MB)"] < before["held (MB)"] / 2
