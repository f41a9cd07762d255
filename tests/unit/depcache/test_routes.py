"""The dependency cache's rules: which upstreams may be configured, which paths are answered and for how long, how
npm packuments are pointed back at the cache, and what workspace pods are told."""

from __future__ import annotations

import json

import pytest

from pko.depcache import routes

UP = {"plugins": "http://mirror:8080/plugins", "npm": "https://registry.example/npm", "go": "http://proxy:3000"}


def test_upstreams_parse_any_subset_and_default() -> None:
    assert routes.parse_upstreams(" plugins=http://m/plugins/ , go=https://proxy.golang.org") == {
        "plugins": "http://m/plugins", "go": "https://proxy.golang.org"}
    assert routes.parse_upstreams("default") == routes.DEFAULT_UPSTREAMS


@pytest.mark.parametrize(("text", "needle"), [
    ("pip=http://m", "expected <part>=<URL>"),
    ("plugins http://m", "expected <part>=<URL>"),
    ("npm=http://a,npm=http://b", "given twice"),
    ("npm=file:///tmp/registry", "not an http(s) URL"),
    ("go=https://user:secret@proxy/go?x=1", "must not have a query"),
    ("", "no upstream"),
])
def test_upstreams_refused_with_a_reason(text: str, needle: str) -> None:
    with pytest.raises(routes.UpstreamError, match=needle.replace("(", r"\(").replace(")", r"\)")) as err:
        routes.parse_upstreams(text)
    assert "secret" not in str(err.value)  # credentials never reach a message


def test_redact_hides_credentials_only() -> None:
    assert routes.redact("https://u:p@reg.example:8443/npm/x") == "https://***@reg.example:8443/npm/x"
    assert routes.redact("https://reg.example/npm") == "https://reg.example/npm"


def test_plugin_release_files_are_immutable_and_nothing_else_is_answered() -> None:
    found = routes.lookup("/cache/plugins/pulumi-resource-random-v4.19.1-linux-amd64.tar.gz", UP)
    assert isinstance(found, routes.Lookup)
    assert found.url == "http://mirror:8080/plugins/pulumi-resource-random-v4.19.1-linux-amd64.tar.gz"
    assert found.immutable
    assert not found.rewrite
    for path in ("/cache/plugins/etc/passwd", "/cache/plugins/index.html",
                 "/cache/plugins/sub/pulumi-resource-random-v1-linux-amd64.tar.gz"):
        refused = routes.lookup(path, UP)
        assert refused == routes.Refusal(404, "not a plugin release file name"), path


@pytest.mark.parametrize("path", [
    "/cache/npm/../../etc/passwd", "/cache/go/github.com/%2e%2e/x/@v/list", "/cache/npm/", "/cache/go/a\\b",
])
def test_dot_segments_and_empty_paths_are_refused(path: str) -> None:
    refused = routes.lookup(path, UP)
    assert isinstance(refused, routes.Refusal), path
    assert refused.status == 400, path


def test_unknown_or_unconfigured_parts_are_not_found() -> None:
    assert routes.lookup("/cache/pypi/simple/pulumi/", UP) == routes.Refusal(
        404, "unknown part 'pypi': the cache serves plugins, npm, go")
    refused = routes.lookup("/cache/go/x/@v/list", {"npm": UP["npm"]})
    assert isinstance(refused, routes.Refusal)
    assert "no upstream for go" in refused.message


def test_npm_tarballs_are_immutable_packuments_are_indexes_keyed_by_format() -> None:
    tarball = routes.lookup("/cache/npm/@pulumi/pulumi/-/pulumi-3.259.0.tgz", UP)
    assert isinstance(tarball, routes.Lookup)
    assert tarball.immutable
    assert not tarball.rewrite
    assert tarball.url == "https://registry.example/npm/@pulumi/pulumi/-/pulumi-3.259.0.tgz"
    abbreviated = routes.lookup("/cache/npm/@pulumi%2frandom", UP, accept=routes.NPM_ABBREVIATED + ", */*")
    full = routes.lookup("/cache/npm/@pulumi%2frandom", UP, accept="application/json")
    assert isinstance(abbreviated, routes.Lookup)
    assert isinstance(full, routes.Lookup)
    assert abbreviated.rewrite
    assert not abbreviated.immutable
    assert abbreviated.url == "https://registry.example/npm/@pulumi%2frandom"  # encoding kept for the upstream
    assert abbreviated.key != full.key
    assert routes.upstream_accept(abbreviated).startswith(routes.NPM_ABBREVIATED)
    assert routes.upstream_accept(full) == "application/json"


def test_go_module_files_are_immutable_lists_are_not_and_queries_are_dropped() -> None:
    zip_ = routes.lookup("/cache/go/github.com/pulumi/pulumi/sdk/v3/@v/v3.259.0.zip?x=1", UP)
    listing = routes.lookup("/cache/go/github.com/pulumi/pulumi/sdk/v3/@v/list", UP)
    latest = routes.lookup("/cache/go/github.com/pulumi/pulumi/sdk/v3/@latest", UP)
    assert isinstance(zip_, routes.Lookup)
    assert zip_.immutable
    assert zip_.url == "http://proxy:3000/github.com/pulumi/pulumi/sdk/v3/@v/v3.259.0.zip"
    assert isinstance(listing, routes.Lookup)
    assert not listing.immutable
    assert isinstance(latest, routes.Lookup)
    assert not latest.immutable


def test_packument_tarballs_under_the_upstream_point_at_the_cache() -> None:
    document = {"name": "a", "versions": {
        "1.0.0": {"dist": {"tarball": "https://registry.example/npm/a/-/a-1.0.0.tgz", "integrity": "sha512-x"}},
        "1.1.0": {"dist": {"tarball": "http://registry.example/npm/a/-/a-1.1.0.tgz"}},  # the other scheme
        "2.0.0": {"dist": {"tarball": "https://elsewhere.example/a-2.0.0.tgz"}},
    }}
    out = json.loads(routes.rewrite_packument(json.dumps(document).encode(), UP["npm"], "http://op:80/cache/npm"))
    versions = out["versions"]
    assert versions["1.0.0"]["dist"] == {"tarball": "http://op:80/cache/npm/a/-/a-1.0.0.tgz", "integrity": "sha512-x"}
    assert versions["1.1.0"]["dist"]["tarball"] == "http://op:80/cache/npm/a/-/a-1.1.0.tgz"
    assert versions["2.0.0"]["dist"]["tarball"] == "https://elsewhere.example/a-2.0.0.tgz"
    with pytest.raises(json.JSONDecodeError):
        routes.rewrite_packument(b"<html>", UP["npm"], "http://op/cache/npm")


def test_pods_are_pointed_at_the_parts_the_cache_serves() -> None:
    base = routes.cache_base("pko.ns:80")
    assert base == "http://pko.ns:80/cache"
    assert routes.cache_base("https://pko.example/") == "https://pko.example/cache"
    env = routes.pod_env(base, ("plugins", "npm"))
    assert env["NPM_CONFIG_REGISTRY"] == "http://pko.ns:80/cache/npm/"
    assert env["PKO_NPM_TREE_URL"] == "http://pko.ns:80/cache/npm-tree"
    assert env["PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES"] == (
        "^github://api.github.com/pulumi$=http://pko.ns:80/cache/plugins,"
        "^https://get.pulumi.com/releases/plugins/?$=http://pko.ns:80/cache/plugins")
    assert "GOPROXY" not in env
    assert routes.pod_env(base, ("go",)) == {"GOPROXY": "http://pko.ns:80/cache/go"}
