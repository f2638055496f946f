"""A running pipeline's own web server: ``/metrics`` (Prometheus) and ``/``, its console page.

``kayak pipeline run`` starts a :class:`PipelineConsole` (see ``--metrics-port``): an aiohttp
server on an event loop in a thread of its own (the pipeline itself is threads and Spark, not
asyncio). Its page shows the pipeline's tables (captured, applied, backlog), the last
verification, and small charts (changes/s, behind-source seconds, latency p50/p99) of the
last minutes, from samples the server takes every few seconds into a bounded ring
(:class:`PipelineHistory`). The page reloads itself (a meta refresh): no script is needed.

A request whose ``Host`` is not one of the server's names is refused (421), as the broker's
web server does without passwords: the page has none, and a page on another site whose name
the attacker re-points at 127.0.0.1 (DNS rebinding) would otherwise read it. Its names are
localhost's, the address it is bound to, this machine's name and ``allowed_hosts``
(``kayak pipeline run --metrics-allowed-hosts``; ``*``: any).

With an embedded broker the server leaves its address in the broker's data directory
(:data:`~kayak.console.broker_metrics.PIPELINE_LINK_FILE`), so the broker's console links to
this page while the pipeline runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from kayak.broker.web.guards import own_hosts_only
from kayak.console.assets import SCRIPT, STYLE, asset_handler
from kayak.console.broker_metrics import PIPELINE_LINK_FILE
from kayak.console.charts import SampleRing, format_value, series_chart, span
from kayak.console.html import Html, definition_list, join, link, render, table
from kayak.console.layout import SCRIPT_PATH, STYLE_PATH, page
from kayak.console.view import html_response
from kayak.pipeline.metrics import (
    BacklogProbe,
    MeteredPipeline,
    PipelineSnapshot,
    VerificationRecord,
    percentile_s,
    pipeline_registry,
    subtract,
    take_snapshot,
)
from kayak.pipeline.runner import Pipeline

__all__ = ["PipelineConsole", "PipelineHistory", "PipelinePoint", "render_pipeline"]

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 5.0
WINDOW_S = 10 * 60
REFRESH_S = 5


@dataclass(frozen=True)
class PipelinePoint:
    """What happened between two samples."""

    captured_per_s: float
    applied_per_s: float
    behind_source_s: float | None  # None: changes are in flight, no batch finished
    p50_s: float | None  # of the changes applied in the interval; None: none applied
    p99_s: float | None


def point_between(earlier: PipelineSnapshot, later: PipelineSnapshot) -> PipelinePoint:
    elapsed = max(later.taken_at - earlier.taken_at, 1e-9)
    captured = max(0, later.captured_total - earlier.captured_total)
    applied = max(0, later.applied_total - earlier.applied_total)
    batches = later.batches - earlier.batches
    if batches > 0 and later.changes > earlier.changes:
        behind = later.behind_source_s
    elif captured == 0 and (later.backlog is None or not any(later.backlog.values())):
        behind = 0.0  # nothing new and nothing waiting: an idle source is not behind
    else:
        behind = None
    latencies = subtract(later.latency_ms, earlier.latency_ms)
    return PipelinePoint(
        captured_per_s=captured / elapsed,
        applied_per_s=applied / elapsed,
        behind_source_s=behind,
        p50_s=percentile_s(latencies, 50),
        p99_s=percentile_s(latencies, 99),
    )


class PipelineHistory:
    """The last samples of a pipeline as :class:`PipelinePoint` s (bounded), and the last
    snapshot taken."""

    def __init__(self, capacity: int) -> None:
        self.ring: SampleRing[PipelinePoint] = SampleRing(capacity)
        self.last: PipelineSnapshot | None = None

    def add(self, snapshot: PipelineSnapshot) -> None:
        if self.last is not None:
            self.ring.add(point_between(self.last, snapshot))
        self.last = snapshot


def without_password(url: str) -> str:
    """A source or target URL fit to show: no password in it."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        credentials, host = netloc.rsplit("@", 1)
        netloc = f"{credentials.split(':', 1)[0]}@{host}"
    query = "&".join(p for p in parts.query.split("&") if not p.startswith("password="))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _verification_cell(record: VerificationRecord | None, table: str) -> Html:
    if record is None:
        return Html('<span class="note">not yet</span>')
    found = next((t for t in record.tables if t.table == table), None)
    if found is None:
        return Html('<span class="note">not verified</span>')
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.at))
    badge = ('<span class="badge ok">equal</span>' if found.equal
             else '<span class="badge bad">differ</span>')  # fmt: skip
    return render("{} {:,} rows, {}", Html(badge), found.rows, when)


def _table_rows(snapshot: PipelineSnapshot, tables: Sequence[str], prefix: str) -> list[list[Any]]:
    backlog: dict[str, int] = {}
    for (topic, _), n in (snapshot.backlog or {}).items():
        table = topic.removeprefix(f"{prefix}.")
        backlog[table] = backlog.get(table, 0) + n
    names = list(dict.fromkeys([*tables, *snapshot.captured, *snapshot.applied]))
    return [
        [name, f"{snapshot.captured.get(name, 0):,}",
         f"{snapshot.applied[name]:,}" if name in snapshot.applied else "—",
         f"{backlog[name]:,}" if name in backlog else "—",
         _verification_cell(snapshot.verification, name)]
        for name in names
    ]  # fmt: skip


def render_pipeline(
    snapshot: PipelineSnapshot, history: PipelineHistory, *, tables: Sequence[str],
    facts: Mapping[str, object], prefix: str = "kayak", interval_s: float = SAMPLE_INTERVAL_S,
) -> Html:  # fmt: skip
    """The pipeline page's body. ``tables``: the pipeline's tables as the metrics name them
    (``schema.table``), listed even before a change of theirs was captured."""
    latency = snapshot.latency()
    summary: dict[str, object] = {
        **facts,
        "Captured": f"{snapshot.captured_total:,}",
        "Applied": f"{snapshot.applied_total:,}",
        "Batches": f"{snapshot.batches:,}",
        "Dead letters": f"{snapshot.dead_letters:,}",
        "Behind source (last batch)": format_value(snapshot.behind_source_s, "s"),
        "Latency p50 / p99 (whole run)": (
            f"{format_value(latency.percentile(50) / 1000, 's')} / "
            f"{format_value(latency.percentile(99) / 1000, 's')}" if latency.total else "—"
        ),
    }
    points = history.ring.samples()
    capacity = history.ring.capacity

    chart = functools.partial(series_chart, capacity)

    charts = join([
        chart("chart-changes", "Changes", "/s",
              ("captured", [p.captured_per_s for p in points]),
              ("applied", [p.applied_per_s for p in points])),
        chart("chart-behind", "Behind source", "s",
              ("behind", [p.behind_source_s for p in points])),
        chart("chart-latency", "Latency", "s",
              ("p50", [p.p50_s for p in points]), ("p99", [p.p99_s for p in points])),
    ])  # fmt: skip
    verification = snapshot.verification
    verified_note = (
        Html('<p class="note" id="verification">No verification yet: it runs when the pipeline '
             "stops (Ctrl-C, SIGTERM, or the end of <code>--once</code>).</p>")
        if verification is None else
        render('<p class="note" id="verification">Last verification: {}.</p>',
               time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(verification.at)))
    )  # fmt: skip
    return render(
        "<h1>Pipeline</h1>{}<h2>Tables</h2>{}{}<h2>The last {}</h2>"
        '<p class="note">Sampled every {:g} s; the page reloads every {} s. All numbers: {}.</p>'
        '<div class="charts">{}</div>',
        definition_list(summary),
        table(["Table", "Captured", "Applied", "Backlog (records)", "Last verification"],
              _table_rows(snapshot, tables, prefix), table_id="pipeline-tables",
              numeric=(1, 2, 3)),
        verified_note, span(capacity * interval_s), interval_s, REFRESH_S,
        link("/metrics", "/metrics"), charts,
    )  # fmt: skip


class PipelineConsole:
    """Serves a running pipeline's ``/metrics`` and page on ``host:port`` (0: ephemeral)
    from a thread of its own; :meth:`start` returns once it listens, :meth:`stop` ends it."""

    def __init__(
        self, pipeline: MeteredPipeline, *, host: str = "127.0.0.1", port: int = 0,
        prefix: str = "kayak", tables: Sequence[str] = (),
        facts: Mapping[str, object] | None = None, backlog: BacklogProbe | None = None,
        broker_console: str | None = None,
        link_dir: Path | None = None, interval_s: float = SAMPLE_INTERVAL_S,
        window_s: float = WINDOW_S, allowed_hosts: Sequence[str] = (),
    ) -> None:  # fmt: skip
        self.pipeline = pipeline
        self.host, self.port = host, port
        self.prefix = prefix
        self.tables = list(tables)
        self.facts = dict(facts or {})
        self.backlog = backlog
        self.broker_console = broker_console
        self.link_dir = link_dir
        self.allowed_hosts = tuple(allowed_hosts)
        self.interval_s = interval_s
        self.history = PipelineHistory(max(2, round(window_s / interval_s)))
        self.registry: CollectorRegistry = pipeline_registry(pipeline, backlog=backlog)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._sampler: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(host, host)
        return f"http://{host}:{self.port}/"

    def start(self) -> Self:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="kayak-pipeline-web",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._serve(), loop).result(30)
        except BaseException:
            self.stop()
            raise
        self._write_link()
        log.info("pipeline metrics at %smetrics, its page at %s", self.url, self.url)
        return self

    def stop(self) -> None:
        """Stop serving; safe to call more than once."""
        self._remove_link()
        loop, self._loop = self._loop, None
        if loop is None:
            return
        if loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        loop.close()
        if self.backlog is not None:
            self.backlog.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the server, on its loop -----------------------------------------------------------

    def own_host_names(self) -> frozenset[str]:
        """The names a request's ``Host`` may carry besides IP literals and localhost's."""
        names = {self.host, socket.gethostname(), *self.allowed_hosts}
        return frozenset(name.lower() for name in names if name)

    async def _serve(self) -> None:
        names = self.own_host_names()
        guard = [] if "*" in names else [
            own_hosts_only(names, allow_option="--metrics-allowed-hosts")
        ]  # fmt: skip
        app = web.Application(middlewares=guard)
        app.add_routes([
            web.get("/", self._page),
            web.get("/metrics", self._metrics),
            web.get(STYLE_PATH, asset_handler(STYLE, "text/css")),
            web.get(SCRIPT_PATH, asset_handler(SCRIPT, "text/javascript")),
        ])  # fmt: skip
        runner = self._runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        address = runner.addresses[0]
        self.port = int(address[1])
        self._sampler = asyncio.get_running_loop().create_task(self._sample_forever())

    async def _shutdown(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        if self._runner is not None:
            await self._runner.cleanup()

    def _snapshot(self, backlog: bool) -> PipelineSnapshot:
        return take_snapshot(self.pipeline, backlog=self.backlog if backlog else None)

    async def _sample_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                self.history.add(await loop.run_in_executor(None, self._snapshot, True))
            except Exception:  # a failed sample leaves a gap, not a dead sampler
                log.debug("pipeline metrics sample failed", exc_info=True)
            await asyncio.sleep(self.interval_s)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await asyncio.get_running_loop().run_in_executor(None, generate_latest,
                                                                self.registry)  # fmt: skip
        response = web.Response(body=body)
        response.headers["Content-Type"] = CONTENT_TYPE_PLAIN_0_0_4
        return response

    async def _page(self, request: web.Request) -> web.Response:
        snapshot = await asyncio.get_running_loop().run_in_executor(None, self._snapshot, False)
        last = self.history.last
        if last is not None and last.backlog is not None:  # the sampler's, not asked again
            snapshot = dataclasses.replace(snapshot, backlog=last.backlog)
        body = render_pipeline(snapshot, self.history, tables=self.tables, facts=self.facts,
                               prefix=self.prefix, interval_s=self.interval_s)  # fmt: skip
        sections = [("pipeline", "Pipeline", "/"), ("metrics", "/metrics", "/metrics")]
        if self.broker_console:
            sections.append(("broker", "Broker console", self.broker_console))
        document = page("Pipeline", body, section="pipeline", user=None, sections=sections,
                        refresh_s=REFRESH_S)  # fmt: skip
        return html_response(document)

    # -- the link from the broker's console ------------------------------------------------

    def _write_link(self) -> None:
        if self.link_dir is None:
            return
        path = self.link_dir / PIPELINE_LINK_FILE
        try:
            path.write_text(json.dumps({"url": self.url, "pid": os.getpid()}), encoding="utf-8")
        except OSError as e:
            log.warning("the broker's console will not link to the pipeline: %s", e)

    def _remove_link(self) -> None:
        if self.link_dir is not None:
            with contextlib.suppress(OSError):
                (self.link_dir / PIPELINE_LINK_FILE).unlink()




def start_pipeline_page(
    pipeline: Pipeline, *, allowed_hosts: Sequence[str] = ()
) -> PipelineConsole:
    """The page of a running ``pipeline`` on the host and port its spec names: what
    ``kayak pipeline run`` hands the pipeline (which itself never imports the console).
    ``allowed_hosts``: further names it may be reached under (see the module docstring)."""
    spec = pipeline.spec
    assert spec.metrics_port is not None and pipeline.source is not None
    facts = {
        "Source": without_password(spec.source), "Target": without_password(spec.target),
        "Broker": pipeline.bootstrap_servers,
        "Started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }  # fmt: skip
    broker = pipeline.broker
    return PipelineConsole(
        pipeline, host=spec.metrics_host, port=spec.metrics_port, prefix=spec.prefix,
        tables=[t.qualified_name for t in pipeline.source.tables()], facts=facts,
        backlog=BacklogProbe(pipeline.bootstrap_servers, spec.client_options),
        broker_console=f"{pipeline.registry_url}/console/" if broker else None,
        link_dir=broker.data_dir if broker else None, allowed_hosts=allowed_hosts,
    ).start()  # fmt: skip
