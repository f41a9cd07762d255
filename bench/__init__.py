"""pko's benchmarks against the Go operator, on a real cluster: `python -m bench <scenario|all>` (see
`bench.harness`), plus two scripts: the agent's start-up `python -m bench.agent_startup`, and the operator's CPU for
one API request `python -m bench.requestcost`. Figures, never pass/fail: targets live in docs/performance.md, not
in timed tests."""
