"""Schema registry pages: subjects (versions, compatibility) and one subject's versions with
their schemas. Read only: registering and deleting stay with the registry's API."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlencode

from aiohttp import web

from kayak.console.html import Html, definition_list, join, link, render, table
from kayak.console.layout import PREFIX
from kayak.console.registry import RegistryUnavailableError
from kayak.console.view import View, page_handler

MAX_LISTED_SUBJECTS = 500


def subject_url(subject: str, version: int | None = None) -> str:
    query = {"subject": subject, **({"version": version} if version is not None else {})}
    return f"{PREFIX}/schemas/subject?{urlencode(query)}"


def render_subjects(rows: list[tuple[str, list[int], str]], global_level: str) -> Html:
    return render(
        "<h1>Schema registry</h1>{}{}",
        definition_list({"Global compatibility": global_level, "Subjects": len(rows)}),
        table(
            ["Subject", "Versions", "Latest", "Compatibility"],
            [(link(subject_url(s), s), len(v), v[-1] if v else "—", level)
             for s, v, level in rows],
            table_id="subjects", empty="no subjects", numeric=(1, 2),
        ),
    )  # fmt: skip


def render_subject(subject: str, versions: list[int], level: str, shown: dict[str, object]) -> Html:
    version_links = join(
        (
            render("<strong>{}</strong>", v)
            if v == shown.get("version")
            else link(subject_url(subject, v), str(v))
        )
        for v in versions
    )
    schema_text = str(shown.get("schema", ""))
    try:
        pretty = json.dumps(json.loads(schema_text), indent=2)
    except ValueError:
        pretty = schema_text
    return render(
        "<h1>Subject {}</h1>{}<h2>Version {}</h2>{}<pre id=\"schema\">{}</pre>",
        subject,
        definition_list(
            {"Compatibility": level, "Versions": render("{}", join(version_links, " · "))}
        ),
        shown.get("version", "?"),
        definition_list(
            {"Schema id": shown.get("id", "?"), "Type": shown.get("schemaType", "AVRO")}
        ),
        pretty,
    )


@page_handler("schemas")
async def subject_list(view: View) -> web.StreamResponse:
    registry, auth = view.state.registry, view.authorization
    subjects = (await registry.subjects(auth))[:MAX_LISTED_SUBJECTS]

    async def row(subject: str) -> tuple[str, list[int], str]:
        versions, level = await asyncio.gather(
            registry.versions(subject, auth), registry.compatibility(subject, auth)
        )
        return subject, versions, level

    rows = await asyncio.gather(*(row(s) for s in subjects))
    global_level = await registry.compatibility(None, auth)
    return view.html("Schema registry", render_subjects(list(rows), global_level),
                     section="schemas")  # fmt: skip


@page_handler("schemas")
async def subject_detail(view: View) -> web.StreamResponse:
    registry, auth = view.state.registry, view.authorization
    subject = view.request.query.get("subject", "")
    versions, level = await asyncio.gather(
        registry.versions(subject, auth), registry.compatibility(subject, auth)
    )
    if not versions:
        raise RegistryUnavailableError(f"subject {subject!r} has no versions", 404)
    try:
        version = int(view.request.query.get("version", versions[-1]))
    except ValueError:
        version = versions[-1]
    shown = await registry.version(subject, version, auth)
    body = render_subject(subject, versions, level, shown)
    return view.html(f"Subject {subject}", body, section="schemas")
