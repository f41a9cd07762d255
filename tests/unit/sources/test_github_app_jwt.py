"""The GitHub App JWT is RS256-signed correctly: byte-identical to OpenSSL's signature (PKCS#1 v1.5 is
deterministic), for keys in both PEM forms."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pko.sources import githubapp


def _b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    openssl = shutil.which("openssl")
    assert openssl, "openssl is needed to check the RS256 signatures"
    base = tmp_path_factory.mktemp("keys")
    pkcs8 = base / "pkcs8.pem"
    subprocess.run([openssl, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(pkcs8)],
                   check=True, capture_output=True)
    pkcs1 = base / "pkcs1.pem"
    subprocess.run([openssl, "rsa", "-in", str(pkcs8), "-traditional", "-out", str(pkcs1)], check=True,
                   capture_output=True)
    return {"pkcs8": pkcs8, "pkcs1": pkcs1}


@pytest.mark.parametrize("form", ["pkcs8", "pkcs1"])
def test_jwt_signature_matches_openssl(keys: dict[str, Path], form: str, tmp_path: Path) -> None:
    pem = keys[form].read_text()
    assert ("BEGIN RSA PRIVATE KEY" in pem) == (form == "pkcs1")
    token = githubapp.app_jwt("12345", pem, now=1_700_000_000)
    header, payload, signature = token.split(".")
    assert json.loads(_b64d(header)) == {"alg": "RS256", "typ": "JWT"}
    assert json.loads(_b64d(payload)) == {"iat": 1_699_999_940, "exp": 1_700_000_600, "iss": "12345"}
    signing_input = tmp_path / "input"
    signing_input.write_bytes(f"{header}.{payload}".encode())
    expected = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(keys[form]), str(signing_input)],
                              check=True, capture_output=True).stdout
    assert _b64d(signature) == expected


def test_not_a_key() -> None:
    with pytest.raises(githubapp.GitHubAppError):
        githubapp.app_jwt("1", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
