"""The frame every console page shares: navigation, the action result area, the assets."""

from __future__ import annotations

from collections.abc import Sequence

from kayak.console.html import Html, join, render

PREFIX = "/console"
STYLE_PATH = f"{PREFIX}/static/console.css"
SCRIPT_PATH = f"{PREFIX}/static/console.js"

# (key, label, path): the navigation bar, in this order.
SECTIONS = (
    ("cluster", "Cluster", f"{PREFIX}/"),
    ("topics", "Topics", f"{PREFIX}/topics"),
    ("groups", "Consumer groups", f"{PREFIX}/groups"),
    ("schemas", "Schema registry", f"{PREFIX}/schemas"),
    ("pipeline", "Pipeline & metrics", f"{PREFIX}/pipeline"),
)

# No inline script or style is allowed; SVG charts are markup, not images.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def page(
    title: str, body: Html, *, section: str, user: str | None,
    sections: Sequence[tuple[str, str, str]] = SECTIONS, refresh_s: int | None = None,
) -> Html:  # fmt: skip
    """A whole HTML document around ``body``; ``sections`` is the navigation bar (another
    server, such as a pipeline's, has its own); ``refresh_s`` reloads the page that often."""
    navigation = join(
        render('<a href="{}" class="{}">{}</a>', path, "active" if key == section else "", label)
        for key, label, path in sections
    )
    refresh = render('<meta http-equiv="refresh" content="{}">', refresh_s) if refresh_s else ""
    who = render('<span class="user">signed in as {}</span>', user) if user else Html("")
    return render(
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">{}'
        "<title>{} · kayak console</title>"
        '<link rel="stylesheet" href="{}"><script src="{}" defer></script></head>'
        '<body><header><span class="brand">kayak</span><nav>{}</nav>{}</header>'
        '<main><div id="result" role="status"></div>{}</main></body></html>',
        refresh, title, STYLE_PATH, SCRIPT_PATH, navigation, who, body,
    )  # fmt: skip


def error_body(title: str, message: str) -> Html:
    return render('<h1>{}</h1><p class="error-box" id="error">{}</p>', title, message)
