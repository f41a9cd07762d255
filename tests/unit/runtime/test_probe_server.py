"""The probe/metrics HTTP server: Go-style addresses (shared with the program file server), routes, 404, 405
and 400 for what is not HTTP."""

from __future__ import annotations

import asyncio

import pytest

from pko.runtime import httpserver


@pytest.mark.parametrize(
    ("address", "bound"),
    [(":8081", ("0.0.0.0", 8081)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:9", ("::1", 9)), ("0", None),
     ("", None)],
)
def test_parse_address(address: str, bound: tuple[str, int] | None) -> None:
    assert httpserver.parse_address(address) == bound


def test_bind_addresses_are_go_style() -> None:
    assert httpserver.bind_address(":9090") == (None, 9090)
    assert httpserver.bind_address("[::1]:0") == ("::1", 0)
    for bad in ("9090", "host:", "a:b:9090", "[::1]9090"):
        with pytest.raises(ValueError, match="address"):
            httpserver.bind_address(bad)
        with pytest.raises(ValueError, match="address"):
            httpserver.parse_address(bad)


async def request(port: int, line: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{line}\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data


async def test_routes_answer_and_unknown_paths_do_not() -> None:
    async def hello() -> httpserver.Response:
        return 200, "text/plain", b"hi"

    server = httpserver.Server({"/hello": hello})
    await server.start("127.0.0.1", 0)
    try:
        ok = await request(server.port, "GET /hello?x=1 HTTP/1.1")
        assert ok.startswith(b"HTTP/1.1 200 OK\r\n")
        assert ok.endswith(b"\r\n\r\nhi")
        assert b"Content-Length: 2\r\n" in ok
        assert (await request(server.port, "GET /nope HTTP/1.1")).startswith(b"HTTP/1.1 404")
        assert (await request(server.port, "POST /hello HTTP/1.1")).startswith(b"HTTP/1.1 405")
        garbage = await request(server.port, "garbage")  # no request line: aiohttp answers it as HTTP/1.0
        assert garbage.startswith(b"HTTP/1.")
        assert garbage.split(b" ", 2)[1] == b"400"
    finally:
        await server.close()
