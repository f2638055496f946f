"""HTML built from Python strings, escaped by default (the standard library's ``html.escape``).

Why no template engine: the console's pages are a few tables and forms, and a dependency is
not worth that. What a template engine gives that matters — escaping everything unless told
otherwise — is :func:`render`: ``render("<td>{}</td>", value)`` escapes ``value`` unless it
is :class:`Html` already (made by ``render`` itself or by the helpers here). Nothing builds
markup by string concatenation of raw values, so a topic name, a record key or a header can
only ever be text on the page.
"""

from __future__ import annotations

import html
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


class Html(str):
    """Markup that is already safe: inserted into other markup as it is."""

    __slots__ = ()


def escape(value: object) -> Html:
    """``value`` as text in HTML (quotes escaped too, so it is safe in attributes)."""
    if isinstance(value, Html):
        return value
    return Html(html.escape(str(value), quote=True))


class _EscapingFormatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        if isinstance(value, Html) and not format_spec:
            return value
        return escape(format(value, format_spec))

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        converted = super().convert_field(value, conversion)
        # !r and !s make plain strings of Html too: escape those like any other text.
        return converted if conversion is None else str(converted)


_FORMATTER = _EscapingFormatter()


def render(template: str, /, *args: object, **kwargs: object) -> Html:
    """``template.format(...)`` with every value escaped unless it is :class:`Html`.

    The template itself is trusted (a literal in the code); lists of :class:`Html` can be
    passed through :func:`join`.
    """
    return Html(_FORMATTER.format(template, *args, **kwargs))


def join(parts: Iterable[Html | str], separator: str = "") -> Html:
    """Pieces joined; plain strings among them are escaped."""
    return Html(escape(separator).join(escape(p) for p in parts))


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    table_id: str = "",
    empty: str = "nothing to show",
    numeric: Iterable[int] = (),
) -> Html:
    """A table; cells are escaped unless :class:`Html`. ``numeric``: indexes of columns
    aligned right."""
    right = set(numeric)
    head = join(
        render('<th class="num">{}</th>', h) if i in right else render("<th>{}</th>", h)
        for i, h in enumerate(headers)
    )
    body = [
        render(
            "<tr>{}</tr>",
            join(
                render('<td class="num">{}</td>', c) if i in right else render("<td>{}</td>", c)
                for i, c in enumerate(row)
            ),
        )
        for row in rows
    ]
    if not body:
        body = [render('<tr><td colspan="{}" class="empty">{}</td></tr>', len(headers), empty)]
    id_attribute = render(' id="{}"', table_id) if table_id else Html("")
    return render(
        "<table{}><thead><tr>{}</tr></thead><tbody>{}</tbody></table>",
        id_attribute, head, join(body),
    )  # fmt: skip


def link(href: str, text: object) -> Html:
    return render('<a href="{}">{}</a>', href, text)


def definition_list(items: Mapping[str, object]) -> Html:
    return render(
        '<dl class="facts">{}</dl>',
        join(render("<dt>{}</dt><dd>{}</dd>", k, v) for k, v in items.items()),
    )


def hidden(name: str, value: object) -> Html:
    return render('<input type="hidden" name="{}" value="{}">', name, value)


def action_form(
    action: str,
    csrf_token: str,
    fields: Html,
    submit: str,
    *,
    form_id: str,
    danger: bool = False,
) -> Html:
    """A form the console's script sends as JSON (with the CSRF token) to ``action``; the
    answer is shown in the page's result area."""
    return render(
        '<form class="action" id="{}" method="post" action="{}" data-action>{}{}'
        '<button type="submit" class="{}">{}</button></form>',
        form_id, action, hidden("csrf", csrf_token), fields,
        "danger" if danger else "primary", submit,
    )  # fmt: skip


def bar_chart(values: Sequence[tuple[str, int]], *, unit: str = "", chart_id: str = "") -> Html:
    """A small horizontal bar chart in inline SVG: one bar per (label, value)."""
    if not values:
        return Html("")
    width, bar_height, label_width = 420, 16, 140
    largest = max(v for _, v in values) or 1
    bars = []
    for i, (label, value) in enumerate(values):
        y = i * (bar_height + 4)
        length = max(1, round((width - label_width - 60) * value / largest)) if value else 0
        bars.append(
            render(
                '<text x="0" y="{}" class="label">{}</text>'
                '<rect x="{}" y="{}" width="{}" height="{}" class="bar"><title>{}: {}{}</title>'
                '</rect><text x="{}" y="{}" class="value">{}{}</text>',
                y + 12, label, label_width, y, length, bar_height, label, value, unit,
                label_width + length + 4, y + 12, value, unit,
            )
        )
    height = len(values) * (bar_height + 4)
    return render(
        '<svg class="chart" id="{}" width="{}" height="{}" viewBox="0 0 {} {}" role="img">{}</svg>',
        chart_id, width, height, width, height, join(bars),
    )  # fmt: skip


def human_bytes(size: int | None) -> str:
    if size is None:
        return "—"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m {seconds}s"
    return f"{minutes}m {seconds}s"
