"""What the program file server puts on the wire: the reply's status and headers, the length, ``Connection: close``,
no body for ``HEAD``, and 405 with ``Allow`` for other methods (the Program comes from a plain lookup function)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pko.api import program as program_api
from pko.controllers.program import fileserver, serving
from pko.sources import program as artifacts

PROGRAM: dict[str, Any] = {
    "apiVersion": "pulumi.com/v1",
    "kind": "Program",
    "metadata": {"name": "hello", "namespace": "team", "generation": 4},
    "program": {"outputs": {"greeting": "hello"}},
}


async def _lookup(ref: serving.ProgramRef) -> dict[str, Any] | None:
    return PROGRAM if (ref.namespace, ref.name) == ("team", "hello") else None


@pytest.fixture
async def server() -> AsyncIterator[fileserver.FileServer]:
    files = fileserver.FileServer(_lookup, listen="127.0.0.1:0", advertised=None, env={}, hostname=lambda: "x")
    await files.start()
    try:
        yield files
    finally:
        await files.close()


async def _exchange(port: int, request_line: str) -> tuple[str, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{request_line}\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 10)  # the server closes the connection after one reply
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines)}
    return status, headers, body


async def test_an_archive_reply_on_the_wire(server: fileserver.FileServer) -> None:
    status, headers, body = await _exchange(server.port, "GET /programs/team/hello/4 HTTP/1.1")
    assert status == "HTTP/1.1 200 OK"
    assert headers["content-type"] == "application/gzip"
    assert headers["content-disposition"] == "attachment; filename=project.tar.gz"
    assert headers["connection"] == "close"
    assert body == artifacts.build(program_api.Program.model_validate(PROGRAM)).data
    assert int(headers["content-length"]) == len(body)


async def test_head_has_the_length_but_no_body(server: fileserver.FileServer) -> None:
    status, headers, body = await _exchange(server.port, "HEAD /programs/team/absent/4 HTTP/1.1")
    assert status == "HTTP/1.1 404 Not Found"
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert headers["x-content-type-options"] == "nosniff"
    assert int(headers["content-length"]) > 0
    assert body == b""


async def test_other_methods_are_not_allowed(server: fileserver.FileServer) -> None:
    status, headers, body = await _exchange(server.port, "DELETE /programs/team/hello/4 HTTP/1.1")
    assert status == "HTTP/1.1 405 Method Not Allowed"
    assert headers["allow"] == "GET, HEAD"
    assert body == b"method not allowed\n"
