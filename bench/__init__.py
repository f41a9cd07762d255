"""pko's benchmarks against the Go operator, on a real cluster: `python -m bench <scenario|all>` (see
`bench.harness`), plus the agent start-up script `python -m bench.agent_startup`. Figures, never pass/fail: targets
live in docs/performance.md, not in timed tests."""
