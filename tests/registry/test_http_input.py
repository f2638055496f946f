"""Bad HTTP never crashes the registry or touches its state: raw sockets against the broker,
and the web server on its own for timeouts and failing handlers."""

from __future__ import annotations

import asyncio
import json
import socket
from urllib.parse import urlsplit

from aiohttp import web

from kayak.broker.web import WebLimits, WebServer
from tests.registry.conftest import call, record_schema

HOST = b"Host: localhost\r\n"


def read_answer(sock: socket.socket) -> bytes:
    """One response: its head, then Content-Length bytes of body (b"" if the server closed)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def exchange(url: str, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data`` on a fresh connection; the one answer it gets."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_answer(sock)


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
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
    post = b"POST /subjects/x/versions HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\n"
    refused_by_the_parser = [
        b"garbage\r\n\r\n",
        b"GET /subjects SPDY/3\r\n\r\n",
        b"GET /subjects HTTP/1.1\r\nno colon here\r\n\r\n",
        b"GET /subjects HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host
        b"GET /subjects HTTP/1.1\r\n" + HOST + b"X-Big: " + b"a" * 70_000 + b"\r\n\r\n",
        b"GET /subjects HTTP/1.1\r\n" + HOST + b"X-H: 1\r\n" * 200 + b"\r\n",
        b"GET /" + b"s" * 10_000 + b" HTTP/1.1\r\n" + HOST + b"\r\n",
        post + b"Content-Length: abc\r\n\r\n",
        post + b"Content-Length: -5\r\n\r\n",
        post + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n",
    ]
    for request in refused_by_the_parser:
        answer = exchange(url, request)
        assert status_of(answer) == 400, (request[:60], answer[:200])
    # Announced over the 16 MiB limit: refused from the header, before a byte of the body.
    answer = exchange(url, post + b"Content-Length: 17825792\r\n\r\n")
    assert status_of(answer) == 413 and body_of(answer)["error_code"] == 413
    assert b"Connection: close" in answer
    # A client that goes away mid-body, or mid-head, is simply forgotten.
    parts = urlsplit(url)
    for partial in (post + b"Content-Length: 100\r\n\r\n{", b"GET /subj"):
        with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
            sock.sendall(partial)
    # Nothing above changed what is stored, and the registry still answers.
    assert call(url, "GET", f"/subjects/{subject}/versions").document == [1]
    assert call(url, "GET", "/subjects/x/versions").status == 404


def test_a_body_at_the_limit_is_read_and_refused_as_a_schema(url: str, subject: str) -> None:
    big = json.dumps({"schema": '"' + "x" * (15 * 1024 * 1024) + '"'}).encode()
    answer = call(url, "POST", f"/subjects/{subject}/versions", raw=big)
    assert (answer.status, answer.document["error_code"]) == (422, 42201)


def test_chunked_bodies_within_and_over_the_limit(url: str, subject: str) -> None:
    body = json.dumps({"schema": record_schema("Chunked", ("x", "int"))}).encode()
    head = (
        f"POST /subjects/{subject}/versions HTTP/1.1\r\nHost: localhost\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    half = len(body) // 2
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in (body[:half], body[half:]))
    answer = exchange(url, head + chunks + b"0\r\n\r\n")
    assert status_of(answer) == 200 and "id" in body_of(answer)
    # Chunked, so no Content-Length to refuse up front: refused once the limit is passed.
    megabyte = b"x" * (1024 * 1024)
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head)
        try:
            for _ in range(17):
                sock.sendall(b"%x\r\n%s\r\n" % (len(megabyte), megabyte))
        except OSError:
            pass  # the server may close once it has answered
        answer = read_answer(sock)
    assert status_of(answer) == 413 and body_of(answer)["error_code"] == 413


def test_keep_alive_pipelining_and_http_1_0(url: str) -> None:
    one = b"GET /schemas/types HTTP/1.1\r\nHost: localhost\r\n\r\n"
    last = b"GET /schemas/types HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(one * 3 + last)
        answer = read_until_closed(sock)
    assert answer.count(b"HTTP/1.1 200 OK") == 4
    assert answer.count(b'["AVRO"]') == 4
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(b"GET /schemas/types HTTP/1.0\r\n\r\n")
        old = read_until_closed(sock)  # HTTP/1.0 without keep-alive: closed after the answer
    assert status_of(old) == 200 and old.endswith(b'["AVRO"]')


def test_expect_100_continue(url: str, subject: str) -> None:
    body = json.dumps({"schema": record_schema("Cont", ("x", "int"))}).encode()
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(
            f"POST /subjects/{subject}/versions HTTP/1.1\r\nHost: localhost\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Expect: 100-continue\r\nConnection: close\r\n\r\n".encode()
        )
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        rest = read_until_closed(sock)
    assert status_of(rest) == 200 and "id" in body_of(rest)
    # Over the limit: refused at once, the client is never told to send the body.
    too_big = exchange(
        url,
        f"POST /subjects/{subject}/versions HTTP/1.1\r\nHost: localhost\r\n"
        "Content-Type: application/json\r\nContent-Length: 17825792\r\n"
        "Expect: 100-continue\r\n\r\n".encode(),
    )
    assert status_of(too_big) == 413


def test_a_slow_client_does_not_hold_up_others(url: str) -> None:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as slow:
        slow.sendall(b"GET /subjects HTTP/1.1\r\nHost: ")  # and then nothing
        for _ in range(5):
            assert call(url, "GET", "/schemas/types").status == 200


def test_timeouts_and_failing_handlers_in_process() -> None:
    async def handler(request: web.Request) -> web.Response:
        if request.match_info["first"] == "boom":
            raise RuntimeError("handler bug")
        document = {"path": [request.match_info["first"], request.match_info["second"]],
                    "q": dict(request.query)}  # fmt: skip
        return web.json_response(document)

    async def scenario() -> None:
        server = WebServer("127.0.0.1", 0, limits=WebLimits(keepalive_timeout_s=0.5))
        server.add_routes([web.get("/{first}/{second}", handler)])
        await server.start()
        try:
            # Half a request line, then silence: closed after the keep-alive timeout.
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(b"GET /sl")
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            # A connection that never sends anything is closed without a word.
            reader, writer = await asyncio.open_connection(server.host, server.port)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            # A handler that raises is a 500; the next request on the same connection works.
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(b"GET /boom/x HTTP/1.1\r\nHost: h\r\n\r\nGET /a%2Fb/c?x=1 HTTP/1.1\r\n"
                         b"Host: h\r\nConnection: close\r\n\r\n")  # fmt: skip
            answer = await asyncio.wait_for(reader.read(), 5)
            assert answer.startswith(b"HTTP/1.1 500 ")
            assert b'"error_code":50000' in answer
            assert b'{"path": ["a/b", "c"], "q": {"x": "1"}}' in answer
            writer.close()
            # Unknown paths and methods are JSON errors too, 405 naming what is allowed.
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(b"DELETE /a/b HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), 5)
            assert answer.startswith(b"HTTP/1.1 405 ") and b"Allow: GET, HEAD\r\n" in answer
            assert b'"error_code":405' in answer
            writer.close()
        finally:
            await server.stop()

    asyncio.run(scenario())
