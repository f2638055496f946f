"""The broker's metrics as small charts: request rate, bytes in and out, fsync latency.

:class:`~kayak.console.metrics_history.BrokerMetricsHistory` samples the registry the broker
serves at ``/metrics`` every few seconds on the broker's event loop (the same collection a
Prometheus scrape does) and keeps rates between consecutive samples in a bounded ring; the
"Pipeline & metrics" page draws them (:mod:`kayak.console.charts`) and links to a pipeline's
own page when one runs on this broker.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry

from kayak.broker.metrics.publication import published
from kayak.console.charts import series_chart, span
from kayak.console.html import Html, definition_list, join, link, render
from kayak.console.metrics_history import BrokerMetricsHistory
from kayak.console.view import View, page_handler

if TYPE_CHECKING:
    from kayak.broker.config import BrokerConfig

log = logging.getLogger(__name__)

REFRESH_S = 10
# A running pipeline with an embedded broker leaves its page's address here, in the
# broker's data directory (kayak.console.pipeline writes it, removes it when it stops).
PIPELINE_LINK_FILE = "pipeline-console.json"


def published_registry(config: BrokerConfig) -> Callable[[], CollectorRegistry | None]:
    """What the broker serves at ``/metrics`` for ``config`` (found when sampled: the broker
    publishes it after the web server is built)."""
    return lambda: published(config)


def pipeline_link_reader(data_dir: Path) -> Callable[[], str | None]:
    """The address of the page of a pipeline running on this broker, if one runs."""
    path = data_dir / PIPELINE_LINK_FILE

    def read() -> str | None:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            url, pid = str(document["url"]), int(document["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return url if _alive(pid) else None

    return read


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def render_charts(history: BrokerMetricsHistory) -> Html:
    points = history.ring.samples()
    capacity = history.ring.capacity

    chart = functools.partial(series_chart, capacity)

    return render(
        '<h2>Broker metrics</h2><p class="note">The last {}, sampled every {:g} s '
        "(the page reloads every {} s); all of them at {}.</p>"
        '<div class="charts">{}</div>',
        span(capacity * history.interval_s), history.interval_s, REFRESH_S,
        link("/metrics", "/metrics"),
        join([
            chart("chart-requests", "Requests", "/s",
                  ("requests", [p.requests_per_s for p in points])),
            chart("chart-bytes", "Bytes", "B/s",
                  ("in", [p.bytes_in_per_s for p in points]),
                  ("out", [p.bytes_out_per_s for p in points])),
            chart("chart-fsync", "fsync latency (mean)", "s",
                  ("fsync", [p.fsync_mean_s for p in points])),
        ]),
    )  # fmt: skip


@page_handler("pipeline")
async def metrics_page(view: View) -> web.StreamResponse:
    """The broker's metrics as charts, and the running pipeline's page when there is one."""
    state = view.state
    parts: list[Html] = [Html("<h1>Pipeline &amp; metrics</h1>")]
    pipeline_url = state.pipeline_link() if state.pipeline_link is not None else None
    if pipeline_url:
        parts.append(render('<p id="pipeline-link">A pipeline runs on this broker: {} (its '
                            "tables, lag, latency and last verification).</p>",
                            link(pipeline_url, pipeline_url)))  # fmt: skip
    else:
        parts.append(Html(
            '<p class="note" id="pipeline-link">No pipeline runs on this broker. '
            "<code>kayak pipeline run</code> serves its own page and <code>/metrics</code> "
            "(its address is printed at start, see <code>--metrics-port</code>).</p>"
        ))  # fmt: skip
    history = state.metrics_history
    if history is None:
        parts.append(render('<p class="note">Metrics are not sampled here: see {}.</p>',
                            link("/metrics", "/metrics")))  # fmt: skip
    else:
        if len(history.ring) < 2:
            parts.append(render("<p class=\"note\">Collecting samples (one every {:g} s).</p>",
                                history.interval_s))  # fmt: skip
        parts.append(render_charts(history))
        facts = definition_list({"Samples kept": f"{len(history.ring)} of {history.ring.capacity}"})
        parts.append(facts)
    return view.html("Pipeline & metrics", join(parts), section="pipeline", refresh_s=REFRESH_S)
