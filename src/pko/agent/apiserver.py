"""The agent's own client of the Kubernetes API server: just enough for its two reviews, on the standard library.

Why not ``pko.kube``: the agent asks the API server two things, ever (a TokenReview and a SubjectAccessReview per
caller, cached), and every workspace pod starts an agent. ``pko.kube`` brings lightkube, its HTTP stack and pko's
models, which were most of ``agent serve``'s start-up CPU (0.5 s of about 0.8 s on an idle core; ten pods at once
on two cores wait for all of it). Here: a kubeconfig or the pod's service account, a TLS context, one HTTPS POST
of a JSON body in a worker thread.

What it reads, as lightkube and client-go do: an explicit kubeconfig file (its current context, or `context`);
else the pod's service account (``KUBERNETES_SERVICE_HOST``/``_PORT`` and the mounted token and CA); else
``$KUBECONFIG`` (its first file) or ``~/.kube/config``. Credentials: a bearer token (``token``/``tokenFile``), a
client certificate and key (files or ``-data``), or basic auth; an exec plugin or auth provider is refused with a
clear message. The service account's token is read at every request (the kubelet rotates it).

Must never log or put a token or key into an error message.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ConfigError(Exception):
    """No usable API server configuration."""


class ApiError(Exception):
    """The API server answered with an error status; ``message`` is its ``Status`` message."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"{status}: {message}")


@dataclass
class Endpoint:
    """Where the API server is and how to present ourselves to it."""

    host: str
    port: int
    context: ssl.SSLContext
    authorization: Callable[[], str | None]  # the Authorization header's value, read per request
    base_path: str = ""
    timeout: float = 10.0

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` as JSON to `path`; the JSON answer, or :class:`ApiError` (blocking: see :func:`post`)."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        credential = self.authorization()
        if credential:
            headers["Authorization"] = credential
        connection = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=self.timeout)
        try:
            connection.request("POST", self.base_path + path, body=json.dumps(body).encode(), headers=headers)
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        try:
            answer = json.loads(data or b"{}")
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        if response.status >= 300:
            raise ApiError(response.status, str(answer.get("message") or response.reason or "request failed"))
        return answer


async def post(endpoint: Endpoint, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """:meth:`Endpoint.post` in a worker thread (the event loop keeps serving)."""
    return await asyncio.to_thread(endpoint.post, path, body)


# --- configuration --------------------------------------------------------------------------------------------

def endpoint(kubeconfig: str = "", context: str = "", timeout: float = 10.0,
             environ: dict[str, str] | None = None) -> Endpoint:
    """The API server to ask, by the rules in the module docstring."""
    env = dict(os.environ if environ is None else environ)
    if kubeconfig:
        return from_kubeconfig(Path(kubeconfig), context, timeout)
    if env.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT / "token").is_file():
        return in_cluster(env, timeout)
    listed = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    path = Path(listed[0]) if listed else Path.home() / ".kube" / "config"
    if not path.is_file():
        raise ConfigError("no kubeconfig and not in a cluster: give --kubeconfig or set KUBECONFIG")
    return from_kubeconfig(path, context, timeout)


def in_cluster(env: dict[str, str], timeout: float = 10.0, account: Path = SERVICE_ACCOUNT) -> Endpoint:
    host = env["KUBERNETES_SERVICE_HOST"]
    port = int(env.get("KUBERNETES_SERVICE_PORT") or 443)
    context = ssl.create_default_context(cafile=str(account / "ca.crt"))
    token_file = account / "token"
    return Endpoint(host.strip("[]"), port, context, lambda: f"Bearer {token_file.read_text().strip()}",
                    timeout=timeout)


def _named(entries: Any, name: str, what: str) -> dict[str, Any]:
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            found = entry.get(what)
            return found if isinstance(found, dict) else {}
    raise ConfigError(f"the kubeconfig has no {what} named {name!r}")


def _relative(base: Path, value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else base / path


def _material(section: dict[str, Any], key: str, base: Path) -> bytes | None:
    """A PEM item given as ``<key>-data`` (base64) or as a file ``<key>``."""
    data = section.get(f"{key}-data")
    if data:
        return base64.b64decode(data)
    path = section.get(key)
    return _relative(base, path).read_bytes() if path else None


def from_kubeconfig(path: Path, context: str = "", timeout: float = 10.0) -> Endpoint:
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"unable to read the kubeconfig {path}: {err}") from err
    base = path.parent
    name = context or config.get("current-context") or ""
    if not name:
        raise ConfigError(f"the kubeconfig {path} names no current context")
    ctx = _named(config.get("contexts"), name, "context")
    cluster = _named(config.get("clusters"), str(ctx.get("cluster", "")), "cluster")
    user = _named(config.get("users"), str(ctx.get("user", "")), "user") if ctx.get("user") else {}
    server = urllib.parse.urlsplit(str(cluster.get("server", "")))
    if server.scheme != "https" or not server.hostname:
        raise ConfigError(f"the kubeconfig's server {cluster.get('server')!r} is not an https:// URL")
    tls = ssl.create_default_context()
    authority = _material(cluster, "certificate-authority", base)
    if authority:
        tls.load_verify_locations(cadata=authority.decode())
    if cluster.get("insecure-skip-tls-verify"):
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    if cluster.get("tls-server-name"):
        raise ConfigError("tls-server-name in a kubeconfig is not supported by the agent")
    if user.get("exec") or user.get("auth-provider"):
        raise ConfigError("the agent supports kubeconfig users with a token, a client certificate or basic auth, "
                          "not exec plugins or auth providers")
    certificate, key = _material(user, "client-certificate", base), _material(user, "client-key", base)
    if certificate and key:
        _load_client_certificate(tls, certificate, key)
    authorization = _authorization(user, base)
    return Endpoint(server.hostname, server.port or 443, tls, authorization, server.path.rstrip("/"), timeout)


def _authorization(user: dict[str, Any], base: Path) -> Callable[[], str | None]:
    if user.get("token"):
        token = str(user["token"])
        return lambda: f"Bearer {token}"
    if user.get("tokenFile"):
        token_file = _relative(base, str(user["tokenFile"]))
        return lambda: f"Bearer {token_file.read_text().strip()}"
    if user.get("username"):
        basic = base64.b64encode(f"{user['username']}:{user.get('password', '')}".encode()).decode()
        return lambda: f"Basic {basic}"
    return lambda: None


def _load_client_certificate(tls: ssl.SSLContext, certificate: bytes, key: bytes) -> None:
    """ssl takes a client certificate from files only: written to a private directory, loaded, removed."""
    with tempfile.TemporaryDirectory(prefix="pko-agent-tls-") as private:
        cert_path, key_path = Path(private) / "client.crt", Path(private) / "client.key"
        for path, content in ((cert_path, certificate), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
        tls.load_cert_chain(str(cert_path), str(key_path))
