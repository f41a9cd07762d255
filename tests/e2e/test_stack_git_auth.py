"""A Stack's `gitAuth` end to end, against real servers: an `sshAuth` key with a passphrase, both read from the
Stack's Secret, over the test bed's real sshd (the operator resolves the branch with them, the agent clones with
them). A wrong passphrase is a clear status that names neither the key nor the passphrase, and the Stack recovers
once its Secret is right.

`githubApp`: the app's JWT is really signed with its key from the Stack's Secret, and the clone is a real one with
the installation token; the one part that is not real is GitHub's token endpoint, for which a **stand-in** here
checks the JWT's RS256 signature with the app's public key, its issuer and its lifetime, and issues the token the git
server requires. The operator and the workspace reach it through `--github-api-url`, as they would a GitHub
Enterprise Server."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest
import stack_e2e as e2e
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from pko.kube import client as kclient
from pko.kube import resources
from pko.testing import controlplane, gitserver, operator

pytestmark = [pytest.mark.controlplane, pytest.mark.pulumi]

PASSPHRASE = "ssh-PLANTED-passphrase-71c2"


def _secret_ref(key: str) -> dict[str, object]:
    return {"type": "Secret", "secret": {"name": "git-ssh", "key": key}}


async def test_a_stack_clones_over_ssh_with_a_passphrase_protected_key_from_its_secret(
    kc: kclient.Client, namespace: str, running_operator: operator.Operator, tmp_path: Path,
) -> None:
    with gitserver.running(tmp_path / "git", ssh=True) as server:
        private_key = server.authorize_new_key(tmp_path, PASSPHRASE)
        payload = base64.b64decode("".join(private_key.strip().splitlines()[1:-1]))
        assert b"aes256-ctr" in payload[:64], "the key is not protected by a passphrase"
        commit = e2e.create_repo(server, "over-ssh", marker="over ssh")
        await kc.create(resources.SECRET.new("git-ssh", namespace, stringData={
            "key": private_key, "passphrase": "not-the-passphrase"}))
        await kc.create(e2e.git_stack("over-ssh", namespace, server.ssh_url("over-ssh"), branch="main", gitAuth={
            "sshAuth": {"sshPrivateKey": _secret_ref("key"), "password": _secret_ref("passphrase")}}))

        # A wrong passphrase: the Stack says so, and nothing of the key or of either passphrase shows.
        stuck = await e2e.wait_for(kc, resources.STACK, "over-ssh", namespace, lambda o: "SSH private key" in str(
            (o.get("status") or {}).get("conditions")), timeout=120)
        said = str(stuck["status"])
        assert "unable to decrypt the SSH private key with the given password" in said, said
        for planted in (PASSPHRASE, "not-the-passphrase", private_key.splitlines()[1]):
            assert planted not in said
            assert not [e for e in await e2e.events_of(kc, "over-ssh", namespace) if planted in e["message"]]
        assert "lastUpdate" not in stuck["status"]

        # The right passphrase: the operator resolves the branch over SSH, the agent clones it, the program runs.
        await kc.patch(resources.SECRET, "git-ssh", {"stringData": {"passphrase": PASSPHRASE}}, namespace)
        ready = await e2e.wait_for(kc, resources.STACK, "over-ssh", namespace, e2e.is_ready, timeout=240)
        assert e2e.last_update(ready)["lastSuccessfulCommit"] == commit
        assert ready["status"]["outputs"]["marker"] == "over ssh"
        assert "Accepted publickey" in server.ssh.log_path.read_text()


APP_ID = "4242"
INSTALLATION_ID = "77"
INSTALLATION_TOKEN = "ghs_PLANTED_installation_token_9d1f"


@dataclass
class _TokenEndpoint:
    """The stand-in for GitHub's `POST /app/installations/<id>/access_tokens` (see the module's docstring)."""

    public_key: rsa.RSAPublicKey
    url: str = ""
    issued: list[str] = field(default_factory=list)  # the installation ids it issued a token for
    refused: list[str] = field(default_factory=list)  # why it refused a request


@contextlib.contextmanager
def _token_endpoint(public_key: rsa.RSAPublicKey) -> Iterator[_TokenEndpoint]:
    endpoint = _TokenEndpoint(public_key)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            parts = self.path.strip("/").split("/")
            bearer = self.headers.get("Authorization", "").removeprefix("Bearer ")
            try:
                if parts[:2] != ["app", "installations"] or parts[3:] != ["access_tokens"]:
                    raise ValueError(f"not a token request: {self.path}")
                claims = jwt.decode(bearer, endpoint.public_key, algorithms=["RS256"],
                                    options={"require": ["iss", "iat", "exp"]})
                if str(claims["iss"]) != APP_ID or claims["exp"] - claims["iat"] > 11 * 60:
                    raise ValueError(f"wrong issuer or lifetime: {claims}")
            except (ValueError, jwt.PyJWTError) as err:
                endpoint.refused.append(str(err))
                self._answer(401, {"message": "A JSON web token could not be decoded"})
                return
            endpoint.issued.append(parts[2])
            self._answer(201, {"token": INSTALLATION_TOKEN, "expires_at": time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))})

        def _answer(self, code: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((gitserver.LOOPBACK, 0), Handler)
    endpoint.url = f"http://{gitserver.LOOPBACK}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="github-token-stand-in", daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()


async def test_a_stack_clones_with_a_github_app_installation_token(
    kc: kclient.Client, namespace: str, git: gitserver.GitServer, tmp_path: Path, pulumi_env: dict[str, str],
    cluster: controlplane.ControlPlane, monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                            serialization.NoEncryption()).decode()
    repo = f"app-{namespace}"
    commit = e2e.create_repo(git, repo, marker="cloned as an app")
    git.protect(repo, "x-access-token", INSTALLATION_TOKEN)
    await kc.create(resources.SECRET.new("github-app", namespace, stringData={
        "id": APP_ID, "installation": INSTALLATION_ID, "key": pem}))

    def ref(name: str) -> dict[str, object]:
        return {"type": "Secret", "secret": {"name": "github-app", "key": name}}

    with _token_endpoint(key.public_key()) as endpoint:
        for variable, value in pulumi_env.items():
            monkeypatch.setenv(variable, value)
        # Were --github-api-url lost on its way, the token request would go to github.com: instead it meets a closed
        # loopback port (the agents inherit this environment; what the Workspace sets overrides it).
        monkeypatch.setenv("GIT_GITHUB_APP_API_URL", "http://127.0.0.1:9")
        monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        e2e.with_settings(monkeypatch, github_api_url=endpoint.url)
        async with operator.running(cluster.kubeconfig, tmp_path / "workspaces", namespace=namespace):
            await kc.create(e2e.git_stack("as-app", namespace, git.http_url(repo), branch="main", gitAuth={
                "githubApp": {"appID": ref("id"), "installationID": ref("installation"), "privateKey": ref("key")}}))
            ready = await e2e.wait_for(kc, resources.STACK, "as-app", namespace, e2e.is_ready, timeout=240)
        assert e2e.last_update(ready)["lastSuccessfulCommit"] == commit
        assert ready["status"]["outputs"]["marker"] == "cloned as an app"
        # the operator asked for a token to resolve the branch, and the workspace again to clone
        assert endpoint.issued.count(INSTALLATION_ID) >= 2, (endpoint.issued, endpoint.refused)
        assert not endpoint.refused
        workspace = await kc.get(resources.WORKSPACE, "as-app", namespace)
        assert INSTALLATION_TOKEN not in json.dumps(workspace) + json.dumps(ready)
