"""``deploy/crds/`` and ``pko crds`` are exactly what the models generate (regenerate with
``pko crds --output-dir deploy/crds``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pko.api import crds
from pko.cli import crds as crds_cli

CRD_DIR = Path(__file__).resolve().parents[3] / "deploy" / "crds"


def test_committed_files_match_the_models() -> None:
    expected = crds.all_crds()
    assert sorted(p.name for p in CRD_DIR.glob("*.yaml")) == sorted(expected)
    for file_name, manifest in expected.items():
        text = (CRD_DIR / file_name).read_text(encoding="utf-8")
        assert text == crds.render(manifest), f"{file_name} drifted: run `pko crds --output-dir deploy/crds`"


def test_rendering_is_stable_and_parses_back() -> None:
    for manifest in crds.all_crds().values():
        text = crds.render(manifest)
        assert text == crds.render(manifest)
        assert yaml.safe_load(text) == manifest


def test_pko_crds_prints_all_six(capsys: pytest.CaptureFixture[str]) -> None:
    assert crds_cli.main([]) == 0
    out = capsys.readouterr().out
    assert out == crds.render_all()
    documents = list(yaml.safe_load_all(out))
    assert [d["metadata"]["name"] for d in documents] == [
        "stacks.pulumi.com", "programs.pulumi.com", "workspaces.auto.pulumi.com", "updates.auto.pulumi.com",
        "stackapprovals.pulumi.com", "stackrollouts.pulumi.com",
    ]
    assert all(d["apiVersion"] == "apiextensions.k8s.io/v1" for d in documents)


def test_pko_crds_writes_the_deploy_files(tmp_path: Path) -> None:
    assert crds_cli.main(["--output-dir", str(tmp_path / "out")]) == 0
    for file_name in crds.all_crds():
        assert (tmp_path / "out" / file_name).read_text() == (CRD_DIR / file_name).read_text()
