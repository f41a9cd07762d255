"""The Stack's SSH private key as the in-process SSH client loads it (:func:`pko.sources.ssh.load_key`): every
format and type a user's ``ssh-keygen`` makes, with or without a passphrase, and a clear error that shows neither
key nor passphrase when it cannot be used."""

from __future__ import annotations

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from pko.sources.ssh import SSHKeyError, load_key

PASSPHRASE = "PLANTED-passphrase"


def _pem(key: object, fmt: serialization.PrivateFormat, passphrase: str = "") -> str:
    encryption = (serialization.BestAvailableEncryption(passphrase.encode()) if passphrase
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, fmt, encryption).decode()  # type: ignore[attr-defined]


KEYS = {
    "ed25519": (lambda: ed25519.Ed25519PrivateKey.generate(), paramiko.Ed25519Key),
    "ecdsa": (lambda: ec.generate_private_key(ec.SECP256R1()), paramiko.ECDSAKey),
    "rsa": (lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048), paramiko.RSAKey),
}


@pytest.mark.parametrize("kind", list(KEYS))
@pytest.mark.parametrize("fmt", [serialization.PrivateFormat.OpenSSH, serialization.PrivateFormat.PKCS8])
def test_a_key_loads_with_its_passphrase_and_without_one_when_it_has_none(
        kind: str, fmt: serialization.PrivateFormat) -> None:
    make, expected = KEYS[kind]
    key = make()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,  # type: ignore[attr-defined]
                                           serialization.PublicFormat.OpenSSH).decode()
    for text, passphrase in ((_pem(key, fmt), ""), (_pem(key, fmt, PASSPHRASE), PASSPHRASE),
                             (_pem(key, fmt), "a passphrase the key does not need")):
        loaded = load_key(text.rstrip("\n"), passphrase)  # a Secret's value may lack the final newline
        assert isinstance(loaded, expected)
        assert f"{loaded.get_name()} {loaded.get_base64()}" == public


@pytest.mark.parametrize("fmt", [serialization.PrivateFormat.OpenSSH, serialization.PrivateFormat.PKCS8])
def test_a_wrong_or_missing_passphrase_is_named_without_the_key_or_the_passphrase(
        fmt: serialization.PrivateFormat) -> None:
    text = _pem(ed25519.Ed25519PrivateKey.generate(), fmt, PASSPHRASE)
    with pytest.raises(SSHKeyError) as wrong:
        load_key(text, "not-the-passphrase")
    assert str(wrong.value) == "unable to decrypt the SSH private key with the given password"
    with pytest.raises(SSHKeyError) as missing:
        load_key(text)
    assert "protected by a passphrase" in str(missing.value)
    assert "gitAuth.sshAuth.password" in str(missing.value)
    for said in (str(wrong.value), str(missing.value)):
        assert PASSPHRASE not in said
        assert "not-the-passphrase" not in said
        assert text.splitlines()[1] not in said


def test_what_is_no_private_key_is_refused_clearly() -> None:
    for text in ("not a key", "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----"):
        with pytest.raises(SSHKeyError, match="could not be read"):
            load_key(text)
