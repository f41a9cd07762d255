"""Digest parsing, host override and the extraction cap from the environment, as fluxcd's fetch applies them."""

from __future__ import annotations

import pytest

from pko.sources import flux, untar

SHA = "a" * 64


def test_parse_digest() -> None:
    assert flux.parse_digest(f"sha256:{SHA}") == ("sha256", SHA)
    assert flux.parse_digest("sha512:" + "0" * 128)[0] == "sha512"
    for bad in ("", SHA, f"md5:{SHA}", "sha256:xyz", "sha256:" + "A" * 64, "sha256:" + "a" * 63):
        with pytest.raises(flux.FetchError, match="failed to parse digest"):
            flux.parse_digest(bad)


def test_host_override() -> None:
    url = "http://source-controller.flux-system.svc.cluster.local./gitrepository/ns/repo/abc.tar.gz?x=1"
    assert flux.override_host(url, "localhost:9090") == "http://localhost:9090/gitrepository/ns/repo/abc.tar.gz?x=1"
    assert flux.override_host(url, None) == url


def test_max_untar_size_from_env() -> None:
    assert flux.max_untar_size({}) == 100 * 1024 * 1024
    assert flux.max_untar_size({"FLUX_MAX_UNTAR_SIZE_BYTES": "2048"}) == 2048
    assert flux.max_untar_size({"FLUX_MAX_UNTAR_SIZE_BYTES": "-1"}) == untar.UNLIMITED
    with pytest.raises(flux.FetchError):
        flux.max_untar_size({"FLUX_MAX_UNTAR_SIZE_BYTES": "lots"})
