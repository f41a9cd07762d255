"""A GitHub App installation token for git over HTTPS (``GIT_GITHUB_APP_*``), as the reference agent obtains one.

The app signs a short JWT with its RSA private key (RS256; ``iss`` = app id, ``iat`` = now - 60 s, ``exp`` = now +
10 min) and trades it at ``POST /app/installations/<id>/access_tokens`` (answer 201) for a token used as the HTTP
password of user ``x-access-token``. Signing is PyJWT over ``cryptography`` (constant-time RSA, blinded); keys are PEM
in PKCS#1 (``RSA PRIVATE KEY``) or PKCS#8 (``PRIVATE KEY``) form.

It must never log the key, the JWT or the token.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when a Stack asks for a token: 9 MB of every operator's memory otherwise
    from cryptography.hazmat.primitives.asymmetric import rsa

API_URL = "https://api.github.com"


class GitHubAppError(Exception):
    """The key is unusable or GitHub refused to issue a token."""


def rsa_private_key(pem: str) -> rsa.RSAPrivateKey:
    """The RSA private key in a PEM text (PKCS#1 or PKCS#8, unencrypted)."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as err:  # the message never holds key material
        raise GitHubAppError("the GitHub App private key is not a PEM RSA private key") from err
    if not isinstance(key, rsa.RSAPrivateKey):
        raise GitHubAppError("the GitHub App private key is not an RSA key")
    return key


def app_jwt(app_id: str, private_key: str, now: float | None = None) -> str:
    """The app's JWT, valid from a minute ago for ten minutes."""
    import jwt

    issued = int(time.time() if now is None else now)
    claims = {"iat": issued - 60, "exp": issued + 600, "iss": app_id}
    return jwt.encode(claims, rsa_private_key(private_key), algorithm="RS256", headers={"typ": "JWT"})


def installation_token(app_id: str, installation_id: str, private_key: str, api_url: str = API_URL,
                       timeout: float = 30.0) -> str:
    """An installation access token for the app's installation."""
    import httpx

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
