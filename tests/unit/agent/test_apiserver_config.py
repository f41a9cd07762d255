"""The agent's own API server configuration (pko.agent.apiserver): a kubeconfig's context, cluster and user, the
pod's service account, and clear refusals of what it does not support; and how review answers are read."""

from __future__ import annotations

import base64
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from pko.agent import apiserver, auth
from pko.testing import testca


def _kubeconfig(tmp_path: Path, user: dict[str, Any], server: str = "https://10.0.0.1:6443/prefix/",
                **cluster: Any) -> Path:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "current-context": "main",
        "contexts": [{"name": "main", "context": {"cluster": "c", "user": "u"}},
                     {"name": "other", "context": {"cluster": "c2", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}},
                     {"name": "c2", "cluster": {"server": "https://other.example:443"}}],
        "users": [{"name": "u", "user": user}],
    }))
    return path


def test_a_token_user_of_the_current_context(tmp_path: Path) -> None:
    endpoint = apiserver.from_kubeconfig(_kubeconfig(tmp_path, {"token": "s3cr3t"}))
    assert (endpoint.host, endpoint.port, endpoint.base_path) == ("10.0.0.1", 6443, "/prefix")
    assert endpoint.authorization() == "Bearer s3cr3t"
    assert endpoint.context.verify_mode == ssl.CERT_REQUIRED
    other = apiserver.from_kubeconfig(_kubeconfig(tmp_path, {"token": "s3cr3t"}), "other")
    assert (other.host, other.port) == ("other.example", 443)


def test_a_token_file_is_read_at_every_request(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    endpoint = apiserver.from_kubeconfig(_kubeconfig(tmp_path, {"tokenFile": "token"}))
    assert endpoint.authorization() == "Bearer one"
    token.write_text("two")
    assert endpoint.authorization() == "Bearer two"


def test_basic_auth_and_no_credentials(tmp_path: Path) -> None:
    basic = apiserver.from_kubeconfig(_kubeconfig(tmp_path, {"username": "a", "password": "b"}))
    assert basic.authorization() == "Basic " + base64.b64encode(b"a:b").decode()
    assert apiserver.from_kubeconfig(_kubeconfig(tmp_path, {})).authorization() is None
    insecure = apiserver.from_kubeconfig(_kubeconfig(tmp_path, {}, **{"insecure-skip-tls-verify": True}))
    assert insecure.context.verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize(("user", "server", "message"), [
    ({"exec": {"command": "aws"}}, "https://h", "not exec plugins"),
    ({"auth-provider": {"name": "oidc"}}, "https://h", "not exec plugins"),
    ({}, "http://h:8080", "is not an https:// URL"),
])
def test_what_the_agent_cannot_use_is_refused_clearly(tmp_path: Path, user: dict[str, Any], server: str,
                                                      message: str) -> None:
    with pytest.raises(apiserver.ConfigError, match=message):
        apiserver.from_kubeconfig(_kubeconfig(tmp_path, user, server))


def test_a_missing_context_or_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(apiserver.ConfigError, match="no context named 'nope'"):
        apiserver.from_kubeconfig(_kubeconfig(tmp_path, {}), "nope")
    with pytest.raises(apiserver.ConfigError, match="unable to read"):
        apiserver.from_kubeconfig(tmp_path / "missing")
    with pytest.raises(apiserver.ConfigError, match="not in a cluster"):
        apiserver.endpoint(environ={"KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)})


def test_the_service_account_of_a_pod(tmp_path: Path) -> None:
    account = tmp_path / "sa"
    account.mkdir()
    (account / "token").write_text("pod-token")
    ca = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    (account / "ca.crt").write_bytes(ca.read_bytes())
    endpoint = apiserver.in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
                                    account=account)
    assert (endpoint.host, endpoint.port) == ("10.96.0.1", 443)
    assert endpoint.authorization() == "Bearer pod-token"


def test_review_answers_are_read_leniently() -> None:
    outcome = auth.token_review_outcome({"status": {
        "authenticated": True, "audiences": ["ws.ns"],
        "user": {"username": "system:serviceaccount:op:pko", "uid": "u1", "groups": ["g"], "extra": {"k": ["v"]}}}})
    assert outcome == auth.TokenReviewOutcome(True, auth.Identity("system:serviceaccount:op:pko", "u1", ("g",),
                                                                  (("k", ("v",)),)), ("ws.ns",), "")
    assert auth.token_review_outcome({}) == auth.TokenReviewOutcome(False)
    assert auth.token_review_outcome({"status": {"authenticated": False, "error": "bad"}}).error == "bad"
    review = auth.access_review(auth.Identity("alice", groups=("devs",)), "ns", "ws")
    attributes = review["spec"]["resourceAttributes"]
    assert (attributes["resource"], attributes["subresource"], attributes["verb"]) == ("workspaces", "rpc", "use")
    assert "uid" not in review["spec"]
    assert "extra" not in review["spec"]


def test_a_client_certificate_and_the_clusters_authority_as_data_or_files(tmp_path: Path) -> None:
    issued = testca.issue(tmp_path / "pki", "pko-agent")
    as_data = {"client-certificate-data": base64.b64encode(issued.cert_path.read_bytes()).decode(),
               "client-key-data": base64.b64encode(issued.key_path.read_bytes()).decode()}
    authority = {"certificate-authority-data": base64.b64encode(issued.ca_path.read_bytes()).decode()}
    endpoint = apiserver.from_kubeconfig(_kubeconfig(tmp_path, as_data, **authority))
    assert endpoint.authorization() is None  # the certificate is the credential
    assert endpoint.context.cert_store_stats()["x509_ca"] >= 1
    as_files = {"client-certificate": str(issued.cert_path), "client-key": str(issued.key_path)}
    apiserver.from_kubeconfig(_kubeconfig(tmp_path, as_files, **{"certificate-authority": str(issued.ca_path)}))
    other = testca.issue(tmp_path / "other", "someone-else")
    with pytest.raises(ssl.SSLError):  # a key that is not the certificate's
        apiserver.from_kubeconfig(_kubeconfig(tmp_path, {**as_files, "client-key": str(other.key_path)}))
    assert not list(Path(tempfile.gettempdir()).glob("pko-agent-tls-*"))  # the key's copy is gone
