"""Git over SSH in-process (paramiko), instead of the system ``ssh`` client.

Why: the places that fetch a Stack's repository are the operator's pod and a workspace pod's ``fetch`` init
container. pko's image is a slim Python image with no ``ssh`` binary, and a workspace pod runs as a UID that is in
no ``/etc/passwd`` of that image — OpenSSH's client refuses to start without one ("No user exists for uid"). The Go
operator's go-git speaks SSH itself, so ``gitAuth.sshAuth`` works in its pods; so it must in pko's. The rules are the
reference's: the key and its passphrase come from the Stack (in memory here, never written to disk), the host key is
not verified (the reference ignores it too; ``known_hosts`` has no place in the CRD), and an agent or the user's own
keys are used only when the Stack gives no key (``pko dev`` on a workstation).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from dulwich.client import SSHVendor


class SSHKeyError(Exception):
    """The Stack's SSH private key cannot be used: unreadable, of an unknown type, or its passphrase is wrong."""


def load_key(text: str, passphrase: str = "") -> paramiko.PKey:
    """The private key in `text` (OpenSSH, PKCS#8 or traditional PEM), decrypted with `passphrase`. A passphrase
    given for a key that needs none is ignored; a wrong or missing one is an :class:`SSHKeyError` that names neither
    the key nor the passphrase."""
    data = (text if text.endswith("\n") else text + "\n").encode()
    loaded: Any = None
    for password in ([passphrase.encode(), None] if passphrase else [None]):
        try:
            loaded = _load(data, password)
            break
        except TypeError:  # encrypted without a passphrase, or a passphrase for a key that needs none
            if password is None:
                raise SSHKeyError("the SSH private key is protected by a passphrase: set gitAuth.sshAuth.password"
                                  ) from None
        except ValueError:
            if password is not None:
                raise SSHKeyError("unable to decrypt the SSH private key with the given password") from None
            raise SSHKeyError("the SSH private key could not be read (not an OpenSSH or PEM private key)") from None
        except Exception:  # cryptography's own errors for unsupported ciphers or formats
            raise SSHKeyError("the SSH private key could not be read") from None
    key_class: type[paramiko.PKey]
    if isinstance(loaded, rsa.RSAPrivateKey):
        key_class = paramiko.RSAKey
    elif isinstance(loaded, ed25519.Ed25519PrivateKey):
        key_class = paramiko.Ed25519Key
    elif isinstance(loaded, ec.EllipticCurvePrivateKey):
        key_class = paramiko.ECDSAKey
    else:
        raise SSHKeyError(f"SSH private keys of type {type(loaded).__name__} are not supported")
    # paramiko reads every type in OpenSSH's own format, not in each PEM flavour: hand it that, in memory
    text = loaded.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    try:
        return key_class.from_private_key(io.StringIO(text))
    except paramiko.SSHException:
        raise SSHKeyError("the SSH private key could not be read") from None


def _load(data: bytes, password: bytes | None) -> Any:
    try:
        return serialization.load_ssh_private_key(data, password=password)
    except ValueError:
        if b"OPENSSH PRIVATE KEY" in data:
            raise
        return serialization.load_pem_private_key(data, password=password)


class _Channel:
    """What dulwich's SSH client reads and writes: a session channel running the git command."""

    def __init__(self, client: paramiko.SSHClient, channel: paramiko.Channel) -> None:
        self._client = client
        self._channel = channel
        self._stdout = channel.makefile("rb")
        self.stderr = channel.makefile_stderr("rb")

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._stdout.read(size)
        return data

    def write(self, data: bytes) -> int:
        self._channel.sendall(data)
        return len(data)

    def can_read(self) -> bool:
        return bool(self._channel.recv_ready())

    def close(self, timeout: int | None = None) -> None:
        self._channel.close()
        self._client.close()


@dataclass
class Vendor(SSHVendor):
    """dulwich's SSH vendor over paramiko: `key` from the Stack (None: an agent's or the user's own keys), and every
    step — connect, handshake, authentication, each read — gives up after `timeout` seconds of silence."""

    key: paramiko.PKey | None
    timeout: float

    # dulwich annotates the subprocess wrapper but uses only what _Channel has (read, write, close, can_read, stderr)
    def run_command(  # type: ignore[override]
            self, host: str, command: bytes, username: str | None = None, port: int | None = None,
            password: str | None = None, key_filename: str | None = None, ssh_command: str | None = None,
            protocol_version: int | None = None) -> _Channel:
        client = paramiko.SSHClient()
        # an unknown host key is accepted (into this client's memory only): the reference does not verify it
        # either, and the Stack has no field for one
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        try:
            client.connect(host, port=port or 22, username=username or "git", pkey=self.key,
                           look_for_keys=self.key is None, allow_agent=self.key is None, timeout=self.timeout,
                           banner_timeout=self.timeout, auth_timeout=self.timeout, channel_timeout=self.timeout)
            transport = client.get_transport()
            assert transport is not None
            channel = transport.open_session(timeout=self.timeout)
            channel.settimeout(self.timeout)
            if protocol_version == 2:  # git's own client sends it (AcceptEnv GIT_PROTOCOL); a refusal is harmless
                channel.update_environment({"GIT_PROTOCOL": "version=2"})
            channel.exec_command(command.decode())
        except paramiko.AuthenticationException as exc:
            client.close()
            raise ConnectionError(f"SSH authentication to {host} failed: {exc}") from None
        except (TimeoutError, paramiko.SSHException, OSError) as exc:
            client.close()
            raise ConnectionError(f"SSH connection to {host}:{port or 22} failed: {exc}") from None
        return _Channel(client, channel)
