"""The pipeline's own web page refuses a ``Host`` that is not one of its names (421), as the
broker's web server does: a page on another site re-pointed at 127.0.0.1 by its DNS (DNS
rebinding) must not read it."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Sequence
from types import SimpleNamespace
from urllib.parse import urlsplit

from click.testing import CliRunner

from kayak.cdc.capture import CaptureStats
from kayak.cli.main import cli
from kayak.console.pipeline import PipelineConsole
from kayak.pipeline.job import ReplicationStats


def _server(allowed_hosts: Sequence[str] = ()) -> PipelineConsole:
    pipeline = SimpleNamespace(
        capture=SimpleNamespace(stats=CaptureStats(changes=3, by_table={"main.t": 3})),
        job=SimpleNamespace(stats=ReplicationStats(batches=1, changes=3, applied=3), query=None),
        last_verification=None,
    )  # fmt: skip
    return PipelineConsole(pipeline, tables=["main.t"], allowed_hosts=allowed_hosts)


def _get(server: PipelineConsole, path: str, host: str) -> tuple[int, str]:
    address = urlsplit(server.url)
    assert address.hostname is not None
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    try:
        connection.request("GET", path, headers={"Host": host})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_a_host_not_its_own_is_refused_and_its_own_names_are_served() -> None:
    with _server() as server:
        port = server.port
        for path in ("/", "/metrics"):
            status, body = _get(server, path, f"evil.example:{port}")
            assert status == 421, body
            assert "--metrics-allowed-hosts" in body
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"app.localhost:{port}",
                     f"{socket.gethostname()}:{port}"):  # fmt: skip
            status, body = _get(server, "/", host)
            assert status == 200, (host, body[:200])
        assert _get(server, "/metrics", f"localhost:{port}")[0] == 200


def test_allowed_hosts_add_names_and_a_star_allows_any() -> None:
    with _server(["Pipeline.Internal"]) as server:
        assert _get(server, "/", f"pipeline.internal:{server.port}")[0] == 200
        assert _get(server, "/", f"evil.example:{server.port}")[0] == 421
    with _server(["*"]) as server:
        assert _get(server, "/", f"evil.example:{server.port}")[0] == 200


def test_the_option_is_in_pipeline_runs_help() -> None:
    result = CliRunner().invoke(cli, ["pipeline", "run", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "--metrics-allowed-hosts" in result.output
