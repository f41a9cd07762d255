"""Operator settings whose values are parsed: sizes and the dependency cache's upstreams, each refused with a
message argparse shows when it cannot be used."""

from __future__ import annotations

import pytest

from pko.controllers import settings


def _parse(*args: str) -> settings.Settings:
    return settings.from_args(settings.parser({}).parse_args(list(args)), "test", {})


def test_the_dependency_cache_is_off_by_default_and_sized_in_quantities() -> None:
    off = _parse()
    assert off.dependency_cache_upstreams == {}
    assert off.dependency_cache_size == 10 * 1024**3
    assert off.dependency_cache_index_ttl == 300
    on = _parse("--dependency-cache-upstreams", "plugins=http://m/plugins,npm=http://m/npm",
                "--dependency-cache-size", "500Mi", "--dependency-cache-index-ttl", "30s")
    assert on.dependency_cache_upstreams == {"plugins": "http://m/plugins", "npm": "http://m/npm"}
    assert on.dependency_cache_size == 500 * 1024**2
    assert on.dependency_cache_index_ttl == 30
    assert _parse("--dependency-cache-size", "2G").dependency_cache_size == 2 * 1000**3


@pytest.mark.parametrize(("flag", "value", "needle"), [
    ("--dependency-cache-size", "0", "must be positive"),
    ("--dependency-cache-size", "ten gigs", "invalid size"),
    ("--dependency-cache-upstreams", "pypi=http://m", "expected <part>=<URL>"),
    ("--workspace-share-volume-size", "2 GB", "invalid volume size"),
])
def test_bad_values_are_refused_with_a_reason(flag: str, value: str, needle: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse(flag, value)
    assert needle in capsys.readouterr().err


def test_sharding_flags_choose_what_the_operator_reconciles() -> None:
    assert _parse().shard.everything
    shard = _parse("--shard-key", "b").shard
    assert shard.name == "b"
    assert shard.text == "sharding.fluxcd.io/key in (b)"
    default = _parse("--watch-label-selector", "!sharding.fluxcd.io/key").shard
    assert default.name is None
    assert not default.owns({"metadata": {"labels": {"sharding.fluxcd.io/key": "b"}}})
    assert settings.from_args(settings.parser({"SHARD_KEY": "c"}).parse_args([]), "test", {}).shard.name == "c"


@pytest.mark.parametrize(("args", "needle"), [
    (["--shard-key", "Shard_B"], "argument --shard-key: invalid shard name 'Shard_B'"),
    (["--watch-label-selector", "team in (a"], "argument --watch-label-selector: invalid label selector"),
    (["--shard-key", "b", "--watch-label-selector", "team=a"], "give one"),
])
def test_bad_sharding_flags_stop_the_operator_with_a_reason(args: list[str], needle: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from pko.cli import operator

    with pytest.raises(SystemExit) as exited:
        operator.main(args)
    assert exited.value.code == 2
    assert needle in capsys.readouterr().err


def test_a_kept_share_volume_is_off_by_default_and_sized_as_a_claim() -> None:
    off = _parse()
    assert off.workspace_share_volume_size is None
    assert off.workspace_share_volume_storage_class is None
    on = _parse("--workspace-share-volume-size", "2Gi", "--workspace-share-volume-storage-class", "fast")
    assert (on.workspace_share_volume_size, on.workspace_share_volume_storage_class) == ("2Gi", "fast")
    from_env = settings.from_args(settings.parser({"WORKSPACE_SHARE_VOLUME_SIZE": "500Mi"}).parse_args([]), "t", {})
    assert from_env.workspace_share_volume_size == "500Mi"
