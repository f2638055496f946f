"""The broker's HTTP endpoints on aiohttp's web server (the schema registry today).

``server``: :class:`WebServer`, one port, to which route tables and sub-applications are
added; ``broker``: such a server secured by the broker's settings; ``auth``: HTTP basic
authentication against the broker's users and the writer role; ``guards``: refusals that stop
web pages from changing state (415, cross-origin 403); ``errors``: JSON error documents.
"""

from __future__ import annotations

from kayak.broker.web.auth import PasswordVerifier
from kayak.broker.web.broker import WebMount, broker_web_server
from kayak.broker.web.errors import error_response
from kayak.broker.web.server import WebLimits, WebServer

__all__ = [
    "PasswordVerifier",
    "WebLimits",
    "WebMount",
    "WebServer",
    "broker_web_server",
    "error_response",
]
