"""The CPU-per-test table each `make test` stream ends with: counters read from cgroups, their growth per test."""

from __future__ import annotations

from pathlib import Path

from pko.testing import testcpu


def test_growth_of_a_counter_and_of_one_made_again() -> None:
    assert testcpu.grown(100, 250) == 150
    assert testcpu.grown(None, 40) == 40  # made during the test
    assert testcpu.grown(500, 30) == 30  # removed and made again: it counts from zero
    assert testcpu.grown(500, None) == 0  # gone


def test_usage_reads_v1_and_v2_counters(tmp_path: Path) -> None:
    v1, v2, none = tmp_path / "v1", tmp_path / "v2", tmp_path / "absent"
    v1.mkdir()
    v2.mkdir()
    (v1 / "cpuacct.usage").write_text("1500000000\n")
    (v2 / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    assert testcpu.usage(v1) == 1_500_000_000
    assert testcpu.usage(v2) == 2_500_000_000
    assert testcpu.usage(none) is None


def test_the_table_puts_the_costliest_first_and_sums_all() -> None:
    spent = {"a": (10.0, 20.0), "b": (30.0, 15.0), "c": (1.0, 0.0)}
    lines = testcpu.table(spent, shown=2)
    assert lines[1].split()[-1] == "b"
    assert lines[1].split()[2] == "2.00"
    assert lines[2].split()[-1] == "a"
    assert len(lines) == 4
    assert lines[-1].split()[0] == "41.0"
    assert "all 3 tests" in lines[-1]
