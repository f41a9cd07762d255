"""The API client's HTTP side, on its pure parts: URL paths, failure answers as typed errors, no answer as the httpx2
transport error every caller catches, the proxy the environment names, and the credentials a kubeconfig user presents
(a rotated token file is read again; a 401 asks again only where asking again can help)."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import aiohttp
import httpx2
import pytest
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import Cluster, Context, User, UserExec
from lightkube.core.exceptions import ConfigError

from pko import kube
from pko.kube import client, errors, resources, transport


def test_paths_of_core_and_group_kinds() -> None:
    assert client.path(resources.CONFIG_MAP, "ns", "c1") == "/api/v1/namespaces/ns/configmaps/c1"
    assert client.path(resources.STACK, None) == "/apis/pulumi.com/v1/stacks"
    assert client.path(resources.STACK, "a", "s", "status") == "/apis/pulumi.com/v1/namespaces/a/stacks/s/status"


def test_a_name_cannot_change_the_path() -> None:
    assert client.path(resources.CONFIG_MAP, "ns", "a/../b") == "/api/v1/namespaces/ns/configmaps/a%2F..%2Fb"


def test_a_status_answer_keeps_its_reason_message_and_details() -> None:
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
                       "reason": "AlreadyExists", "message": "stacks \"s\" already exists",
                       "details": {"name": "s", "kind": "stacks"}}).encode()
    err = transport.api_error(409, body)
    assert type(err) is kube.AlreadyExists
    assert (err.reason, err.message, err.details) == ("AlreadyExists", 'stacks "s" already exists',
                                                       {"name": "s", "kind": "stacks"})


def test_a_gone_watch_error_is_gone() -> None:
    body = json.dumps({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}).encode()
    assert type(transport.api_error(200, body)) is kube.Gone


def test_a_non_json_answer_keeps_its_text() -> None:
    err = transport.api_error(404, b"404 page not found\n")
    assert type(err) is kube.NotFound
    assert err.message == "404 page not found"


@pytest.mark.parametrize(("raised", "expected"), [
    (aiohttp.ServerDisconnectedError(), httpx2.RemoteProtocolError),
    (TimeoutError(), httpx2.ReadTimeout),
    (aiohttp.ClientOSError(104, "Connection reset by peer"), httpx2.ReadError),
    (aiohttp.ClientPayloadError("truncated"), httpx2.RemoteProtocolError),
    (aiohttp.ClientError("other"), httpx2.TransportError),
])
def test_no_answer_is_a_transport_error(raised: BaseException, expected: type[Exception]) -> None:
    err = transport.transport_error(raised)
    assert type(err) is expected
    assert isinstance(err, errors.TransportError)


def test_the_proxy_is_the_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert transport.proxy_for("https://api.example.invalid:6443") == "http://proxy.invalid:3128"
    monkeypatch.setenv("NO_PROXY", "example.invalid")
    assert transport.proxy_for("https://api.example.invalid:6443") is None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_token_file_is_read_again_when_old_or_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    clock = Clock()
    creds = transport.Credentials(User(token_file=str(token)), clock=clock)
    assert await creds.header() == "Bearer one"
    token.write_text("two")
    assert await creds.header() == "Bearer one"  # still fresh
    clock.now = transport.TOKEN_FILE_MAX_AGE + 1
    assert await creds.header() == "Bearer two"
    token.write_text("three")
    assert creds.rejected()
    assert await creds.header() == "Bearer three"


async def test_a_static_token_or_password_is_not_asked_again() -> None:
    creds = transport.Credentials(User(token="abc"))
    assert await creds.header() == "Bearer abc"
    assert not creds.rejected()
    basic = transport.Credentials(User(username="u", password="p"))
    assert await basic.header() == "Basic dTpw"
    assert await transport.Credentials(None).header() is None


async def test_an_exec_plugins_token_is_kept_until_refused(tmp_path: Path) -> None:
    count = tmp_path / "count"
    plugin = tmp_path / "plugin"
    plugin.write_text(f"""#!/bin/sh
echo x >> {count}
n=$(wc -l < {count})
echo '{{"apiVersion": "client.authentication.k8s.io/v1beta1", "status": {{"token": "t'$n'"}}}}'
""")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    creds = transport.Credentials(User(exec=UserExec(apiVersion="client.authentication.k8s.io/v1beta1",
                                                     command=str(plugin))))
    assert await creds.header() == "Bearer t1"
    assert await creds.header() == "Bearer t1"
    assert creds.rejected()
    assert await creds.header() == "Bearer t2"


async def test_an_exec_plugin_that_fails_says_so(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    plugin.write_text("#!/bin/sh\necho 'no credentials here' >&2\nexit 3\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    creds = transport.Credentials(User(exec=UserExec(apiVersion="client.authentication.k8s.io/v1beta1",
                                                     command=str(plugin))))
    with pytest.raises(ConfigError, match="returned 3: no credentials here"):
        await creds.header()



async def test_a_credential_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    """Over the short requests' own HTTP/1.1 writer a line break in a header value would end the headers early and
    smuggle the rest in as a request of its own: it is refused (as aiohttp refuses it), nothing is sent."""
    received: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(65536))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = SingleConfig(context_name="c", context=Context(cluster="c"),
                          cluster=Cluster(server=f"http://127.0.0.1:{port}"),
                          user=User(token="abc\r\nX-Injected: 1"))
    http = transport.Transport(config)
    try:
        with pytest.raises(ConfigError, match="line break"):
            await http.request("GET", "/api/v1/namespaces")
        await asyncio.sleep(0.05)
        assert received == []
    finally:
        await http.close()
        server.close()
        await server.wait_closed()
