"""The local fleet's physical floor (bench.localfleet): the reference's CLI sequence, and the fleet's time over it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from bench import localfleet


def test_the_floor_is_the_cli_cpu_of_every_stack_spread_over_the_cores() -> None:
    figures = localfleet.against_floor(all_ready=300.0, before=0.8, after=1.0, stacks=1000, cores_=2)
    assert figures["floor (s)"] == pytest.approx(450.0)  # the mean of before and after: the backend grew
    assert figures["all Ready over the floor"] == pytest.approx(300.0 / 450.0)
    assert figures["floor: CLI CPU a Stack, empty backend (s)"] == 0.8
    assert figures["floor: CLI CPU a Stack, after the fleet (s)"] == 1.0


def test_the_operator_s_cpu_a_stack_is_also_given_as_a_share_of_the_cli_s_in_the_same_run() -> None:
    """The target's 30 ms a Stack was set on a VM where the CLI took 0.72 CPU s a Stack: the share compares across
    machines of different speed."""
    figures = localfleet.against_floor(all_ready=300.0, before=0.8, after=1.0, stacks=1000, cores_=2,
                                       operator_cpu=45.0)
    assert figures["operator CPU a Stack (ms)"] == pytest.approx(45.0)
    assert figures["operator CPU a Stack over the CLI's (%)"] == pytest.approx(5.0)
    assert localfleet.against_floor(10.0, 0.0, 0.0, 5, 2, 1.0)["operator CPU a Stack over the CLI's (%)"] == 0.0


def test_no_floor_gives_no_ratio_rather_than_a_division_by_zero() -> None:
    assert localfleet.against_floor(10.0, 0.0, 0.0, 5, 2)["all Ready over the floor"] == 0.0


def test_the_sequence_is_the_references_three_commands_with_the_stacks_own_config_key() -> None:
    select, config, up = localfleet.floor_sequence("floor03")
    assert select[:4] == ["pulumi", "stack", "select", "--create"]
    assert config[:3] == ["pulumi", "config", "set-all"]
    assert "floor03:greeting=hello" in config
    assert up[:2] == ["pulumi", "up"]
    assert "--yes" in up
    project = yaml.safe_load(localfleet.floor_project("floor03"))
    assert project == {"name": "floor03", "runtime": "yaml", "configuration": {"greeting": {"type": "String"}},
                       "outputs": {"greeting": "${greeting}"}}


def test_the_cpu_of_a_command_counts_what_it_waited_for_and_a_failure_says_what_it_wrote(tmp_path: Path) -> None:
    busy = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'sum(range(3_000_000))'])"
    assert localfleet._cpu_of([sys.executable, "-c", busy], tmp_path) > 0.02
    with pytest.raises(RuntimeError, match="refused here"):
        localfleet._cpu_of([sys.executable, "-c", "import sys; sys.exit('refused here')"], tmp_path)
