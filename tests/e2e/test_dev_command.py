"""The README's main job, `pko dev --once`, runs end to end in a subprocess and prints a Ready Stack."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml


def test_pko_dev_once_prints_a_ready_stack_and_tears_down(tmp_path: Path) -> None:
    env = dict(os.environ)
    result = subprocess.run(
        [sys.executable, "-m", "pko", "dev", "--once", "--dir", str(tmp_path / "dev")],
        capture_output=True, text=True, timeout=420, env=env, check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    printed = yaml.safe_load(out.split("---\n")[1])
    assert printed["kind"] == "Stack"
    assert printed["status"]["outputs"]["message"] == "Hello from a Stack, pko"
    assert printed["status"]["outputs"]["token"] == "[secret]"
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in printed["status"]["conditions"])
    assert "the Stack was destroyed and removed." in out
    assert "not-for-your-eyes" not in out + result.stderr


def test_pko_dev_reports_a_missing_binary_clearly(tmp_path: Path) -> None:
    env = dict(os.environ, PKO_BIN_DIR=str(tmp_path / "empty"))
    result = subprocess.run([sys.executable, "-m", "pko", "dev", "--once", "--dir", str(tmp_path / "dev")],
                            capture_output=True, text=True, timeout=60, env=env, check=False)
    assert result.returncode == 2
    assert "etcd not found in" in result.stdout
    assert "make tools" in result.stdout
