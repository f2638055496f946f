"""Bad HTTP never crashes the registry or touches its state: raw sockets against the broker,
and the HTTP server on its own for timeouts and failing handlers."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from urllib.parse import urlsplit

from kayak.broker.registry.http import HttpRequest, HttpResponse, HttpServer
from tests.registry.conftest import call, record_schema


def exchange(url: str, data: bytes, read_timeout: float = 5.0) -> bytes:
    """Send ``data`` on a fresh connection; everything the server sends until it closes."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=read_timeout) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
        return b"".join(chunks)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def body_of(answer: bytes) -> dict[str, object]:
    document = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert isinstance(document, dict)
    return document


def test_malformed_requests_get_errors_and_close(url: str, subject: str) -> None:
    schema = record_schema("Kept", ("x", "int"))
    assert call(url, "POST", f"/subjects/{subject}/versions", {"schema": schema}).status == 200
    cases = {
        b"garbage\r\n\r\n": 400,
        b"GET /subjects\r\n\r\n": 400,
        b"GET /subjects SPDY/3\r\n\r\n": 400,
        b"GET /subjects HTTP/1.1\r\nno colon here\r\n\r\n": 400,
        b"GET /subjects HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n": 431,
        b"GET /subjects HTTP/1.1\r\n" + b"X-H: 1\r\n" * 200 + b"\r\n": 431,
        b"POST /subjects/x/versions HTTP/1.1\r\nContent-Length: abc\r\n\r\n": 400,
        b"POST /subjects/x/versions HTTP/1.1\r\nContent-Length: -5\r\n\r\n": 400,
        b"POST /subjects/x/versions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n": 411,
        # 17 MiB announced: refused from the header, before a byte of the body is read.
        b"POST /subjects/x/versions HTTP/1.1\r\nContent-Length: 17825792\r\n\r\n": 413,
    }
    for request, status in cases.items():
        answer = exchange(url, request)
        assert status_of(answer) == status, (request[:60], answer[:200])
        assert body_of(answer)["error_code"] == status
        assert b"Connection: close" in answer
    # A client that goes away mid-body, or mid-head, is simply forgotten.
    exchange(url, b"POST /subjects/x/versions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{", 0.2)
    exchange(url, b"GET /subj", 0.2)
    # Nothing above changed what is stored.
    assert call(url, "GET", f"/subjects/{subject}/versions").document == [1]
    assert call(url, "GET", "/subjects/x/versions").status == 404


def test_a_body_at_the_limit_is_read_and_refused_as_a_schema(url: str, subject: str) -> None:
    big = json.dumps({"schema": '"' + "x" * (15 * 1024 * 1024) + '"'}).encode()
    answer = call(url, "POST", f"/subjects/{subject}/versions", raw=big)
    assert (answer.status, answer.document["error_code"]) == (422, 42201)


def test_keep_alive_pipelining_and_http_1_0(url: str) -> None:
    one = b"GET /schemas/types HTTP/1.1\r\nHost: x\r\n\r\n"
    last = b"GET /schemas/types HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer = exchange(url, one * 3 + last)
    assert answer.count(b"HTTP/1.1 200 OK") == 4
    assert answer.count(b'["AVRO"]') == 4
    old = exchange(url, b"GET /schemas/types HTTP/1.0\r\n\r\n")
    assert status_of(old) == 200 and b"Connection: close" in old


def test_expect_100_continue(url: str, subject: str) -> None:
    body = json.dumps({"schema": record_schema("Cont", ("x", "int"))}).encode()
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(
            f"POST /subjects/{subject}/versions HTTP/1.1\r\nContent-Length: {len(body)}\r\n"
            "Expect: 100-continue\r\nConnection: close\r\n\r\n".encode()
        )
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    assert status_of(rest) == 200 and "id" in body_of(rest)


def test_a_slow_client_does_not_hold_up_others(url: str) -> None:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as slow:
        slow.sendall(b"GET /subjects HTTP/1.1\r\nHost: ")  # and then nothing
        started = time.monotonic()
        for _ in range(5):
            assert call(url, "GET", "/schemas/types").status == 200
        assert time.monotonic() - started < 2


def test_request_timeout_and_failing_handlers_in_process() -> None:
    async def handler(request: HttpRequest) -> HttpResponse:
        if request.segments == ["boom"]:
            raise RuntimeError("handler bug")
        return HttpResponse(200, {"path": request.segments, "q": request.query})

    async def scenario() -> None:
        server = HttpServer(handler, "127.0.0.1", 0, request_timeout_s=0.3, idle_timeout_s=0.5)
        await server.start()
        try:
            # Half a request line, then silence: 408 and closed after the request timeout.
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(b"GET /sl")
            answer = await asyncio.wait_for(reader.read(), 3)
            assert answer.startswith(b"HTTP/1.1 408 ")
            writer.close()
            # An idle kept-alive connection is closed without a word.
            reader, writer = await asyncio.open_connection(server.host, server.port)
            assert await asyncio.wait_for(reader.read(), 3) == b""
            writer.close()
            # A handler that raises is a 500; the next request on the same connection works.
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(b"GET /boom HTTP/1.1\r\n\r\nGET /a%2Fb/c?x=1 HTTP/1.1\r\n"
                         b"Connection: close\r\n\r\n")  # fmt: skip
            answer = await asyncio.wait_for(reader.read(), 3)
            assert answer.startswith(b"HTTP/1.1 500 ")
            assert b'"error_code":50000' in answer
            assert b'{"path":["a/b","c"],"q":{"x":["1"]}}' in answer
            writer.close()
        finally:
            await server.stop()

    asyncio.run(scenario())
