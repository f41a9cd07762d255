"""Fetching a Flux-style source artifact: download, verify its digest, extract it safely.

``agent init --flux-url --flux-digest`` uses this for Flux ``GitRepository``/``OCIRepository``/``Bucket`` sources
and for our own ``Program`` archives, as the reference uses fluxcd's ``fetch``: up to 3 retries on connection
errors and 5xx/429 answers, an optional host override (``SOURCE_CONTROLLER_LOCALHOST``) for running outside the
cluster, a ``<algorithm>:<hex>`` digest (sha256, sha384 or sha512) that must match the downloaded bytes before
anything is extracted, and a cap on the extracted size (``FLUX_MAX_UNTAR_SIZE_BYTES``, default 100 MiB, ``-1`` for
none).

The download itself is capped too (:func:`download_cap`: twice the extraction cap plus 1 MiB, room for tar headers
and incompressible content), so a server streaming without end cannot fill the disk before the digest is checked.

The HTTP client is the standard library's (``urllib``, TLS verified against ``$SSL_CERT_FILE`` or certifi's
bundle): every workspace pod runs this once, at start-up, where an HTTP library's imports cost more CPU than the
download of a small program.

It must never extract an archive whose digest did not match, and never log the URL's query string (it may carry
credentials).
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import certifi

from pko.sources import untar

log = logging.getLogger("pko.sources.flux")

DEFAULT_MAX_UNTAR_SIZE = 100 * 1024 * 1024
RETRIES = 3
ALGORITHMS = {"sha256": 64, "sha384": 96, "sha512": 128}


class FetchError(Exception):
    """The artifact could not be downloaded, verified or extracted."""


def max_untar_size(env: Mapping[str, str]) -> int:
    """The extraction cap from ``FLUX_MAX_UNTAR_SIZE_BYTES`` (default 100 MiB; ``-1`` means no cap)."""
    raw = env.get("FLUX_MAX_UNTAR_SIZE_BYTES", "").strip()
    if not raw:
        return DEFAULT_MAX_UNTAR_SIZE
    try:
        value = int(raw)
    except ValueError:
        raise FetchError(f"invalid FLUX_MAX_UNTAR_SIZE_BYTES: {raw!r}") from None
    return untar.UNLIMITED if value < 0 else value


def download_cap(max_size: int) -> int:
    """The most bytes we download for an extraction cap of `max_size` (:data:`untar.UNLIMITED`: no cap)."""
    return untar.UNLIMITED if max_size == untar.UNLIMITED else 2 * max_size + 1024 * 1024


def parse_digest(digest: str) -> tuple[str, str]:
    """``(algorithm, hex)`` of an OCI-style digest such as ``sha256:ab12...``."""
    algorithm, sep, encoded = digest.partition(":")
    if not sep or not encoded:
        raise FetchError(f"failed to parse digest {digest!r}: invalid checksum digest format")
    if algorithm not in ALGORITHMS:
        raise FetchError(f"failed to parse digest {digest!r}: unsupported digest algorithm")
    if len(encoded) != ALGORITHMS[algorithm] or any(c not in "0123456789abcdef" for c in encoded):
        raise FetchError(f"failed to parse digest {digest!r}: invalid checksum digest length or characters")
    return algorithm, encoded


def override_host(url: str, host: str | None) -> str:
    """`url` with its host[:port] replaced by `host` (when given)."""
    if not host:
        return url
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=host))


def _display(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(query="", fragment=""))


def tls_context() -> ssl.SSLContext:
    """Server certificates are checked against ``$SSL_CERT_FILE`` when set (a private CA), else certifi's bundle
    (the agent runs in images whose system store it cannot rely on), as the HTTP library before did."""
    return ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE") or certifi.where())


def _download(opener: urllib.request.OpenerDirector, url: str, sink: tempfile._TemporaryFileWrapper[bytes],
              algorithm: str, cap: int = untar.UNLIMITED, timeout: float = 60.0) -> str:
    """Stream `url` into `sink`, returning the hex digest; retry transient failures; refuse more than `cap` bytes."""
    last_error = ""
    for attempt in range(RETRIES + 1):
        if attempt:
            time.sleep(min(2 ** (attempt - 1), 8))
        sink.seek(0)
        sink.truncate()
        hasher = hashlib.new(algorithm)
        try:
            with opener.open(url, timeout=timeout) as response:
                received = 0
                while chunk := response.read(65536):
                    received += len(chunk)
                    if cap != untar.UNLIMITED and received > cap:
                        raise FetchError(f"failed to download archive from {_display(url)}: it is bigger than "
                                         f"{cap} bytes (twice FLUX_MAX_UNTAR_SIZE_BYTES plus 1 MiB)")
                    hasher.update(chunk)
                    sink.write(chunk)
            sink.flush()
            return hasher.hexdigest()
        except urllib.error.HTTPError as err:
            err.close()
            if err.code >= 500 or err.code == 429:
                last_error = f"status: {err.code} {err.reason}"
                continue
            raise FetchError(f"failed to download archive from {_display(url)}, "
                             f"status: {err.code} {err.reason}") from None
        except (OSError, http.client.HTTPException) as err:  # refused, reset, timed out, TLS, a broken answer
            reason = err.reason if isinstance(err, urllib.error.URLError) else err
            last_error = str(reason) or type(reason).__name__
    raise FetchError(f"failed to download archive from {_display(url)} after {RETRIES + 1} attempts: {last_error}")


def fetch(url: str, digest: str, target: Path, *, max_size: int = DEFAULT_MAX_UNTAR_SIZE,
          host_override: str | None = None, timeout: float = 60.0) -> None:
    """Download the ``.tar.gz`` at `url`, check it against `digest`, extract it into `target`."""
    algorithm, expected = parse_digest(digest)
    url = override_host(url, host_override)
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=tls_context()))
    with tempfile.NamedTemporaryFile(prefix="pko-artifact-", suffix=".tar.gz") as sink:
        actual = _download(opener, url, sink, algorithm, download_cap(max_size), timeout)
        if actual != expected:
            raise FetchError(f"failed to verify artifact: computed digest doesn't match '{digest}'")
        sink.seek(0)
        try:
            untar.extract_tgz(sink, target, max_size)
        except untar.UnsafeArchiveError as err:
            raise FetchError(f"failed to extract archive: {err}") from err
    log.info("fetched %s into %s", _display(url), target)
