"""What the dependency cache answers for a path, what its upstreams are, and what workspace pods are told.

Why a module of its own: the rules that make the cache safe live here, as pure functions that are easy to read and
test — which upstreams may be configured (the operator's, never a Stack's), which request paths are accepted
(one plugin file name; npm and GOPROXY paths without ``.``/``..`` segments or queries), which answers never change
(a plugin release file, an npm tarball, a module's ``.zip``/``.mod``/``.info``: cached for good) and which do
(npm packuments, ``@v/list``, ``@latest``: cached for the index TTL), and how an npm packument's tarball URLs are
pointed back at the cache.

Pure: text in, values out. Must never do I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

PREFIX = "/cache/"
PLUGINS, NPM, GO = "plugins", "npm", "go"
PARTS = (PLUGINS, NPM, GO)
#: The node_modules trees built from the npm part (``POST`` a lockfile: :mod:`pko.depcache.npmtree`).
NPM_TREE = "npm-tree"
NPM_TREE_PATH = f"{PREFIX}{NPM_TREE}"
#: Where a workspace's agent asks for its lockfile's tree (set with the npm part; the Go agent ignores it).
NPM_TREE_ENV = "PKO_NPM_TREE_URL"

#: The upstreams of a production operator that may reach the internet (`--dependency-cache-upstreams` default).
DEFAULT_UPSTREAMS = {
    PLUGINS: "https://get.pulumi.com/releases/plugins",
    NPM: "https://registry.npmjs.org",
    GO: "https://proxy.golang.org",
}

#: npm's "abbreviated metadata" (what `npm install` asks for): cached apart from full packuments.
NPM_ABBREVIATED = "application/vnd.npm.install-v1+json"

_PLUGIN_FILE = re.compile(r"^/pulumi-(resource|language|converter|tool|analyzer)-[A-Za-z0-9._+-]+\.(tar\.gz|tgz|zip)$")
_NPM_TARBALL = re.compile(r"^/(@[^/]+/)?[^/@][^/]*/-/[^/]+\.tgz$")
_GO_IMMUTABLE = re.compile(r"/@v/[^/]+\.(zip|mod|info)$")


class UpstreamError(ValueError):
    """The `--dependency-cache-upstreams` text is not a list of `part=URL` pairs this cache can use."""


def parse_upstreams(text: str) -> dict[str, str]:
    """``plugins=URL,npm=URL,go=URL`` (any subset; ``default`` alone: :data:`DEFAULT_UPSTREAMS`) → part → URL base
    without a trailing slash. Refuses unknown parts, repeats, and URLs that are not plain http(s) bases."""
    text = text.strip()
    if text == "default":
        return dict(DEFAULT_UPSTREAMS)
    upstreams: dict[str, str] = {}
    for item in filter(None, (piece.strip() for piece in text.split(","))):
        part, sep, url = item.partition("=")
        part, url = part.strip(), url.strip()
        if not sep or part not in PARTS:
            raise UpstreamError(f"{item!r}: expected <part>=<URL> with a part of {', '.join(PARTS)}")
        if part in upstreams:
            raise UpstreamError(f"{part!r} is given twice")
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise UpstreamError(f"{part}: {redact(url)!r} is not an http(s) URL")
        if parsed.query or parsed.fragment:
            raise UpstreamError(f"{part}: {redact(url)!r} must not have a query or a fragment")
        upstreams[part] = url.rstrip("/")
    if not upstreams:
        raise UpstreamError("no upstream given")
    return upstreams


def redact(url: str) -> str:
    """`url` without the credentials of its userinfo (for logs, metrics and messages)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.username is None and parsed.password is None:
        return url
    host = parsed.hostname or ""
    netloc = f"***@{host}" + (f":{parsed.port}" if parsed.port else "")
    return urllib.parse.urlunsplit((parsed.scheme, netloc, parsed.path, parsed.query, parsed.fragment))


@dataclass(frozen=True)
class Lookup:
    """One request the cache will answer: its part, the upstream URL, and how long an answer stays good."""

    part: str
    path: str  # as the client sent it (percent-encoding kept), after /cache/<part>
    url: str  # the upstream's
    immutable: bool  # the answer never changes (cached for good)
    rewrite: bool  # an npm packument: tarball URLs are pointed back at the cache
    key: str  # what the answer is stored under

    @property
    def key_digest(self) -> str:
        return hashlib.sha256(self.key.encode()).hexdigest()


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str


def lookup(raw_path: str, upstreams: Mapping[str, str], accept: str = "") -> Lookup | Refusal:
    """The :class:`Lookup` for ``GET raw_path`` (a raw request target under :data:`PREFIX`), or why not."""
    path, _, _query = raw_path.partition("?")  # no upstream protocol here needs a query: never forwarded
    if not path.startswith(PREFIX):
        return Refusal(404, "not a dependency cache path")
    part, slash, rest = path[len(PREFIX):].partition("/")
    if part not in PARTS:
        return Refusal(404, f"unknown part {part!r}: the cache serves {', '.join(PARTS)}")
    if part not in upstreams:
        return Refusal(404, f"the dependency cache has no upstream for {part}")
    rest = slash + rest
    decoded = urllib.parse.unquote(rest)
    if len(rest) <= 1 or any(s in (".", "..") for s in decoded.split("/")) or "\\" in rest or "\x00" in rest:
        return Refusal(400, f"invalid {part} path")
    url = upstreams[part] + rest
    if part == PLUGINS:
        if not _PLUGIN_FILE.match(rest):
            return Refusal(404, "not a plugin release file name")
        return Lookup(part, rest, url, immutable=True, rewrite=False, key=f"{part}{rest}")
    if part == NPM:
        if _NPM_TARBALL.match(decoded):
            return Lookup(part, rest, url, immutable=True, rewrite=False, key=f"{part}{rest}")
        kind = "abbreviated" if NPM_ABBREVIATED in accept else "full"
        return Lookup(part, rest, url, immutable=False, rewrite=True, key=f"{part}{rest}#{kind}")
    return Lookup(part, rest, url, immutable=bool(_GO_IMMUTABLE.search(rest)), rewrite=False, key=f"{part}{rest}")


def upstream_accept(found: Lookup) -> str:
    """The ``Accept`` header to send upstream: npm's abbreviated type when the client asked for it."""
    if found.part == NPM and found.rewrite:
        return f"{NPM_ABBREVIATED}, application/json" if found.key.endswith("#abbreviated") else "application/json"
    return "*/*"


def rewrite_packument(body: bytes, upstream: str, base: str) -> bytes:
    """The packument with each version's tarball URL under `upstream` pointed at `base` (the cache's npm URL).

    A tarball on another host is left as it is: the client then fetches it from there, as it would without the
    cache. The document is otherwise unchanged (integrity hashes included), so npm verifies what it gets."""
    document = json.loads(body)
    versions = document.get("versions") if isinstance(document, dict) else None
    if not isinstance(versions, dict):
        return body
    for version in versions.values():
        dist = version.get("dist") if isinstance(version, dict) else None
        if not isinstance(dist, dict):
            continue
        tarball = dist.get("tarball")
        if isinstance(tarball, str):
            for prefix in _equivalents(upstream):
                if tarball.startswith(prefix + "/"):
                    dist["tarball"] = base + tarball[len(prefix):]
                    break
    return json.dumps(document, separators=(",", ":")).encode()


def _equivalents(upstream: str) -> tuple[str, ...]:
    """`upstream` and its other scheme (registries often publish http:// tarball URLs behind https, and back)."""
    if upstream.startswith("https://"):
        return upstream, "http://" + upstream[len("https://"):]
    if upstream.startswith("http://"):
        return upstream, "https://" + upstream[len("http://"):]
    return (upstream,)


def cache_base(advertised: str) -> str:
    """The cache's URL base as workspace pods reach it, from the file server's advertised address."""
    base = advertised if advertised.startswith(("http://", "https://")) else f"http://{advertised}"
    return base.rstrip("/") + PREFIX.rstrip("/")


def pod_env(base: str, parts: Mapping[str, str] | tuple[str, ...]) -> dict[str, str]:
    """The environment that points a workspace's Pulumi CLI, npm and go at the cache, for the parts it serves."""
    env: dict[str, str] = {}
    if PLUGINS in parts:
        plugins = f"{base}/{PLUGINS}"
        # the CLI's two homes of Pulumi's own plugins (a package's own pluginDownloadURL is left alone)
        env["PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES"] = (
            f"^github://api.github.com/pulumi$={plugins},^https://get.pulumi.com/releases/plugins/?$={plugins}")
    if NPM in parts:
        env["NPM_CONFIG_REGISTRY"] = f"{base}/{NPM}/"
        env[NPM_TREE_ENV] = f"{base}/{NPM_TREE}"
    if GO in parts:
        env["GOPROXY"] = f"{base}/{GO}"
    return env
