"""The console's one style sheet and one script, served from ``/console/static/``.

Both are served as files (not inline) so pages can carry a Content-Security-Policy that
allows no inline script at all: markup that slipped through escaping still could not run.
The script is small and does three things: sends action forms as JSON (the broker's web
server takes only JSON bodies for changes, see ``kayak.broker.web.guards``) and shows their
result; polls for new records while "live tail" is on; shows the result of the last action
after the page it led to loads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

STYLE = """
:root { --fg:#1d2430; --muted:#667085; --line:#d8dde6; --bg:#f7f8fa; --accent:#1f6feb;
        --ok:#1a7f37; --bad:#cf222e; --warn:#9a6700; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
       color:var(--fg); background:var(--bg); }
header { background:#0d1b2a; color:#fff; padding:0 20px; display:flex; align-items:center;
         gap:24px; height:48px; }
header .brand { font-weight:700; letter-spacing:.5px; }
header nav a { color:#c9d6e3; text-decoration:none; margin-right:16px; }
header nav a.active, header nav a:hover { color:#fff; border-bottom:2px solid #4aa3ff; }
header .user { margin-left:auto; color:#c9d6e3; font-size:12px; }
main { padding:16px 24px 48px; max-width:1400px; }
h1 { font-size:20px; margin:8px 0 12px; }
h2 { font-size:16px; margin:24px 0 8px; }
a { color:var(--accent); }
table { border-collapse:collapse; background:#fff; border:1px solid var(--line);
        min-width:40%; margin-bottom:8px; }
th, td { padding:5px 10px; border-bottom:1px solid var(--line); text-align:left;
         vertical-align:top; }
th { background:#eef1f5; font-weight:600; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
td.empty { color:var(--muted); font-style:italic; }
pre { margin:0; white-space:pre-wrap; word-break:break-all; max-width:70ch;
      font:12px/1.4 ui-monospace, monospace; }
.facts { display:grid; grid-template-columns:max-content auto; gap:4px 16px; }
.facts dt { color:var(--muted); }
.facts dd { margin:0; }
form.action, form.inline { display:inline-flex; flex-wrap:wrap; gap:8px; align-items:center;
        background:#fff; border:1px solid var(--line); padding:8px 10px; margin:4px 8px 4px 0; }
input, select { font:inherit; padding:3px 6px; }
button { font:inherit; padding:4px 12px; border-radius:4px; border:1px solid var(--line);
         cursor:pointer; background:#fff; }
button.primary { background:var(--accent); color:#fff; border-color:var(--accent); }
button.danger { background:var(--bad); color:#fff; border-color:var(--bad); }
#result { margin:8px 0; padding:8px 12px; border-radius:4px; display:none; }
#result.ok { display:block; background:#dafbe1; color:var(--ok); border:1px solid #aceebb; }
#result.error { display:block; background:#ffebe9; color:var(--bad); border:1px solid #ffcecb; }
#result.busy { display:block; background:#fff8c5; color:var(--warn); }
.error-box { background:#ffebe9; color:var(--bad); border:1px solid #ffcecb; padding:8px 12px; }
.note { color:var(--muted); }
.badge { display:inline-block; padding:0 8px; border-radius:10px; font-size:12px;
         background:#eef1f5; }
.badge.ok { background:#dafbe1; color:var(--ok); }
.badge.bad { background:#ffebe9; color:var(--bad); }
.badge.warn { background:#fff8c5; color:var(--warn); }
svg.chart text { font:11px system-ui, sans-serif; fill:var(--fg); }
svg.chart rect.bar { fill:#4aa3ff; }
.charts { display:flex; flex-wrap:wrap; gap:12px; margin:8px 0; }
figure.spark { margin:0; background:#fff; border:1px solid var(--line); padding:8px 10px; }
figure.spark figcaption { font-size:12px; margin-bottom:4px; }
figure.spark .series { margin-left:8px; color:var(--muted); white-space:nowrap; }
.format { color:var(--muted); font-size:11px; }
.toolbar { margin:8px 0; }
"""

SCRIPT = """
'use strict';
(function () {
  const FLASH = 'kayak-console-flash';

  function show(kind, text) {
    const box = document.getElementById('result');
    if (!box) return;
    box.className = kind;
    box.textContent = text;
  }

  async function submitAction(form) {
    const body = {};
    new FormData(form).forEach((value, key) => { body[key] = value; });
    show('busy', 'working…');
    let answer;
    try {
      const response = await fetch(form.action, {
        method: 'POST', credentials: 'same-origin',
        headers: {'Content-Type': 'application/json', 'Accept': 'application/json'},
        body: JSON.stringify(body),
      });
      try { answer = await response.json(); } catch (e) { answer = {}; }
      if (!response.ok) {
        show('error', answer.message || ('HTTP ' + response.status));
        return;
      }
    } catch (e) {
      show('error', 'the request failed: ' + e);
      return;
    }
    sessionStorage.setItem(FLASH, answer.message || 'done');
    window.location.assign(answer.location || window.location.href);
  }

  document.addEventListener('submit', (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute('data-action')) return;
    event.preventDefault();
    submitAction(form);
  });

  function startTail(button) {
    const table = document.getElementById('records');
    let next = button.dataset.next;
    let timer = null;
    async function poll() {
      try {
        const url = new URL(button.dataset.url, window.location.href);
        url.searchParams.set('offset', next);
        const response = await fetch(url, {credentials: 'same-origin'});
        if (response.ok) {
          const rows = await response.text();
          next = response.headers.get('X-Next-Offset') || next;
          if (rows.trim()) {
            const body = table.tBodies[0];
            const empty = body.querySelector('td.empty');
            if (empty) empty.parentElement.remove();
            body.insertAdjacentHTML('beforeend', rows);
          }
          document.getElementById('tail-status').textContent =
            'live: polling every second, next offset ' + next;
        }
      } catch (e) { /* the next poll tries again */ }
    }
    button.addEventListener('click', () => {
      if (timer === null) {
        poll();
        timer = window.setInterval(poll, 1000);
        button.textContent = 'Stop live tail';
      } else {
        window.clearInterval(timer);
        timer = null;
        button.textContent = 'Live tail';
        document.getElementById('tail-status').textContent = 'stopped';
      }
    });
  }

  document.addEventListener('DOMContentLoaded', () => {
    const flash = sessionStorage.getItem(FLASH);
    if (flash !== null) {
      sessionStorage.removeItem(FLASH);
      show('ok', flash);
    }
    const tail = document.getElementById('tail');
    if (tail) startTail(tail);
  });
})();
"""


def asset_handler(text: str, content_type: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler serving ``text`` (the console's style sheet or script) as it is."""
    body = text.encode()

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=content_type, charset="utf-8",
                            headers={"Cache-Control": "no-cache"})  # fmt: skip

    return handler
