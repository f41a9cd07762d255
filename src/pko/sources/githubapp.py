"""A GitHub App installation token for git over HTTPS (``GIT_GITHUB_APP_*``), as the reference agent obtains one.

The app signs a short JWT with its RSA private key (RS256; ``iss`` = app id, ``iat`` = now - 60 s, ``exp`` = now +
10 min) and trades it at ``POST /app/installations/<id>/access_tokens`` (answer 201) for a token used as the HTTP
password of user ``x-access-token``. RS256 is done here in plain Python (PKCS#1 v1.5 over SHA-256) so the agent
executable needs no crypto library: PEM keys in PKCS#1 (``RSA PRIVATE KEY``) or PKCS#8 (``PRIVATE KEY``) form.

It must never log the key, the JWT or the token.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time

import httpx

API_URL = "https://api.github.com"
_SHA256_DIGEST_INFO = bytes.fromhex("3031300d060960864801650304020105000420")
_RSA_OID = bytes.fromhex("2a864886f70d010101")


class GitHubAppError(Exception):
    """The key is unusable or GitHub refused to issue a token."""


def _der(data: bytes, pos: int) -> tuple[int, bytes, int]:
    """(tag, contents, next position) of the DER element at `pos`."""
    if pos + 2 > len(data):
        raise GitHubAppError("malformed private key")
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise GitHubAppError("malformed private key")
    return tag, data[pos:pos + length], pos + length


def _sequence(data: bytes) -> list[tuple[int, bytes]]:
    items = []
    pos = 0
    while pos < len(data):
        tag, contents, pos = _der(data, pos)
        items.append((tag, contents))
    return items


def rsa_private_key(pem: str) -> tuple[int, int]:
    """``(n, d)`` from a PEM RSA private key (PKCS#1 or PKCS#8)."""
    match = re.search(r"-----BEGIN ((?:RSA )?PRIVATE KEY)-----(.+?)-----END \1-----", pem, re.DOTALL)
    if not match:
        raise GitHubAppError("the GitHub App private key is not a PEM RSA private key")
    der = base64.b64decode("".join(match.group(2).split()))
    tag, body, _ = _der(der, 0)
    if tag != 0x30:
        raise GitHubAppError("malformed private key")
    items = _sequence(body)
    if match.group(1) == "PRIVATE KEY":  # PKCS#8: version, algorithm, octet string holding the PKCS#1 key
        if len(items) < 3 or _RSA_OID not in items[1][1] or items[2][0] != 0x04:
            raise GitHubAppError("the GitHub App private key is not an RSA key")
        tag, body, _ = _der(items[2][1], 0)
        items = _sequence(body)
    if len(items) < 4 or any(t != 0x02 for t, _ in items[:4]):
        raise GitHubAppError("malformed RSA private key")
    n = int.from_bytes(items[1][1], "big")
    d = int.from_bytes(items[3][1], "big")
    return n, d


def rs256(message: bytes, n: int, d: int) -> bytes:
    """The RSASSA-PKCS1-v1_5 SHA-256 signature of `message`."""
    size = (n.bit_length() + 7) // 8
    digest_info = _SHA256_DIGEST_INFO + hashlib.sha256(message).digest()
    if size < len(digest_info) + 11:
        raise GitHubAppError("RSA key too short")
    encoded = b"\x00\x01" + b"\xff" * (size - len(digest_info) - 3) + b"\x00" + digest_info
    return pow(int.from_bytes(encoded, "big"), d, n).to_bytes(size, "big")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def app_jwt(app_id: str, private_key: str, now: float | None = None) -> str:
    """The app's JWT, valid from a minute ago for ten minutes."""
    issued = int(time.time() if now is None else now)
    header = _b64url(json.dumps({"alg": "RS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {"iat": issued - 60, "exp": issued + 600, "iss": app_id}
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    n, d = rsa_private_key(private_key)
    signature = rs256(f"{header}.{payload}".encode(), n, d)
    return f"{header}.{payload}.{_b64url(signature)}"


def installation_token(app_id: str, installation_id: str, private_key: str, api_url: str = API_URL,
                       timeout: float = 30.0) -> str:
    """An installation access token for the app's installation."""
    url = f"{api_url.rstrip('/')}/app/installations/{installation_id}/access_tokens"
    headers = {"Authorization": f"Bearer {app_jwt(app_id, private_key)}", "Accept": "application/vnd.github+json"}
    try:
        response = httpx.post(url, headers=headers, timeout=timeout)
    except httpx.HTTPError as err:
        raise GitHubAppError(f"unable to request a GitHub App installation token: {err}") from err
    if response.status_code != 201:
        raise GitHubAppError(f"unexpected status code from GitHub: {response.status_code}")
    token = response.json().get("token")
    if not isinstance(token, str) or not token:
        raise GitHubAppError("GitHub returned no installation token")
    return token
