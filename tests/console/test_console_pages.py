"""The console without a browser: escaping (markup in names, keys and headers is text),
decoding, the guards on actions (CSRF, JSON bodies, writers), ``/`` shared with the registry,
and logging in when the broker's listener needs SASL."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import struct
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import fastavro
import pytest

from kayak.broker import Broker
from kayak.broker.security.credentials import CredentialStore
from kayak.broker.security.listeners import parse_listeners
from kayak.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from kayak.client.admin import GroupDescription, MemberDescription
from kayak.console import mount_console
from kayak.console.decode import show
from kayak.console.groups import OffsetRow, render_group
from kayak.console.html import Html, render
from kayak.console.messages import ShownRecord, parse_timestamp, record_rows
from kayak.console.schemas import render_subject
from kayak.console.topics import PartitionRow, TopicRow, parse_configs, render_topic_list
from kayak.console.view import ActionRefused

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def assert_escaped(document: str) -> None:
    assert "<script>alert" not in document and "<img src=x" not in document
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x" in document


# -- rendering, no server ---------------------------------------------------------------------


def test_render_escapes_values_but_not_html_it_made() -> None:
    inner = render("<b>{}</b>", XSS)
    assert isinstance(inner, Html)
    outer = render("<td>{}</td><td>{!r}</td>", inner, Html("<i>raw</i>"))
    assert outer.startswith("<td><b>&lt;script&gt;")
    assert "<i>" not in outer  # a conversion turns markup back into text, escaped
    assert render('<a title="{}">', '" onmouseover="x') == '<a title="&quot; onmouseover=&quot;x">'


def test_topic_group_record_and_subject_pages_escape_what_came_from_the_cluster() -> None:
    topic = TopicRow(XSS, False, (PartitionRow(0, 0, (0,), (0,), 0, 3, 120),))
    assert_escaped(render_topic_list([topic], query=XSS, total=1, csrf="t"))

    record = ShownRecord(7, "now", show_text(XSS), ((XSS, XSS),), show_text(XSS))
    assert_escaped(record_rows([record]))

    member = MemberDescription("m-1", XSS, XSS, assignment=(TopicPartition(XSS, 0),))
    group = GroupDescription(XSS, "Empty", "consumer", "range", (member,), 0)
    document = render_group(group, [OffsetRow(TopicPartition(XSS, 0), 1, 5, "m-1")], "t")
    assert_escaped(document)
    assert 'value="' + XSS not in document

    assert_escaped(render_subject(XSS, [1], XSS, {"version": 1, "id": 1, "schema": XSS}))


def show_text(text: str) -> Any:
    return asyncio.run(show(text.encode(), "text", None))


def test_values_are_decoded_as_avro_json_text_or_hex() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), {"n": 42})
    framed = struct.pack(">bI", 0, 9) + body.getvalue()

    async def registry(schema_id: int) -> Any:
        if schema_id != 9:
            raise LookupError(schema_id)
        return schema

    async def decode_all() -> list[tuple[str, str]]:
        shown = [
            await show(framed, "auto", registry),
            await show(b'{"a": [1, 2]}', "auto", registry),
            await show("héllo".encode(), "auto", registry),
            await show(b"\x00\x01\xff", "auto", registry),
            await show(None, "auto", registry),
            await show(struct.pack(">bI", 0, 8) + b"\x02", "auto", registry),  # unknown id
            await show(b"plain", "json", registry),
        ]
        return [(s.format, s.text) for s in shown]

    avro, as_json, text, binary, null, unknown, not_json = asyncio.run(decode_all())
    assert avro[0] == "avro (schema 9)" and json.loads(avro[1]) == {"n": 42}
    assert as_json == ("json", '{\n  "a": [\n    1,\n    2\n  ]\n}')
    assert text == ("text", "héllo")
    assert binary == ("hex", "00 01 ff")
    assert null == ("null", "null")
    assert unknown[0] == "hex"
    assert not_json == ("hex (not JSON)", "70 6c 61 69 6e")


def test_timestamps_and_config_lists_are_parsed() -> None:
    assert parse_timestamp("1764000000000") == 1_764_000_000_000
    assert parse_timestamp("2025-11-24T16:00:00Z") == 1_764_000_000_000
    assert parse_timestamp("2025-11-24T16:00:00") == 1_764_000_000_000  # UTC when no zone
    with pytest.raises(ValueError, match="neither"):
        parse_timestamp("yesterday")
    assert parse_configs("retention.ms=1, cleanup.policy=delete\n") == {
        "retention.ms": "1", "cleanup.policy": "delete"}  # fmt: skip
    with pytest.raises(ActionRefused):
        parse_configs("retention.ms")


# -- over HTTP, against a real broker ---------------------------------------------------------


def basic(user: str, password: str) -> dict[str, str]:
    """An ``Authorization: Basic`` header."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None
    return found.group(1)


def test_pages_over_http_escape_group_ids_and_keys_and_actions_need_csrf(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Broker(
            tmp_path, port=0, schema_registry_port=0, web_mounts=(mount_console,)
        ) as broker:
            url = broker.schema_registry_url
            assert url is not None
            bootstrap = broker.bootstrap_servers
            async with Admin(bootstrap_servers=bootstrap) as admin:
                await admin.create_topics([NewTopic("t", 1)])
            async with Producer(bootstrap_servers=bootstrap) as producer:
                await producer.send_and_wait("t", XSS.encode(), key=XSS.encode(),
                                             headers=[(XSS, XSS.encode())])  # fmt: skip
            group = Consumer(bootstrap_servers=bootstrap, group_id=XSS)
            await group.start()
            group.assign([TopicPartition("t", 0)])
            await group.commit({TopicPartition("t", 0): 1})
            await group.close()

            async with aiohttp.ClientSession() as http:
                for path in ("/console/topics/t/messages?from=beginning", "/console/groups",
                             "/console/group?" + urlencode({"id": XSS})):
                    async with http.get(url + path) as answer:
                        assert answer.status == 200, path
                        assert "script-src 'self'" in answer.headers["Content-Security-Policy"]
                        assert_escaped(await answer.text())

                async with http.get(url + "/", headers={"Accept": "text/html"},
                                    allow_redirects=False) as answer:  # fmt: skip
                    assert answer.status == 302 and answer.headers["Location"] == "/console/"
                async with http.get(url + "/") as answer:  # the registry's own root
                    assert answer.status == 200 and await answer.json() == {}

                async with http.get(url + "/console/topics") as answer:
                    token = _csrf(await answer.text())
                create = url + "/console/topics"
                async with http.post(create, json={"csrf": "forged", "name": "x"}) as answer:
                    assert answer.status == 403 and "CSRF" in (await answer.json())["message"]
                async with http.post(create, data={"csrf": token, "name": "x"}) as answer:
                    assert answer.status == 415  # a plain HTML form post: the web guard
                async with http.post(create, json={"csrf": token, "name": "x"},
                                     headers={"Origin": "http://evil.example"}) as answer:
                    assert answer.status == 403
                async with http.post(create, json={"csrf": token, "name": "bad/name"}) as answer:
                    assert answer.status == 400
                async with http.post(create, json={"csrf": token, "name": "x"}) as answer:
                    assert answer.status == 200
                    assert (await answer.json())["location"] == "/console/topics/x"
                async with http.post(create, json={"csrf": token, "name": "x"}) as answer:
                    assert answer.status == 409  # TopicExistsError, shown to the user
                    assert "TopicExists" in (await answer.json())["message"]

    asyncio.run(scenario())


def test_with_sasl_the_console_needs_a_login_and_uses_it_on_the_wire(tmp_path: Path) -> None:
    store = CredentialStore.open(tmp_path)
    store.upsert("admin", "SCRAM-SHA-256", password="admin-secret")
    store.upsert("reader", "SCRAM-SHA-256", password="reader-secret")

    async def scenario() -> None:
        settings: dict[str, Any] = {
            "listeners": parse_listeners("SASL_PLAINTEXT://127.0.0.1:0"),
            "schema_registry_port": 0,
            "super_users": ("User:admin",),
        }
        async with Broker(tmp_path, web_mounts=(mount_console,), **settings) as broker:
            url = broker.schema_registry_url
            assert url is not None
            admin_login = basic("admin", "admin-secret")
            async with aiohttp.ClientSession() as http:
                async with http.get(url + "/console/topics") as answer:
                    assert answer.status == 401 and "Basic" in answer.headers["WWW-Authenticate"]
                async with http.get(url + "/console/topics",
                                    headers=basic("admin", "wrong")) as answer:
                    assert answer.status == 401
                async with http.get(url + "/console/topics", headers=admin_login) as answer:
                    page = await answer.text()
                    assert answer.status == 200 and "signed in as admin" in page
                    token = _csrf(page)
                async with http.post(url + "/console/topics", headers=admin_login,
                                     json={"csrf": token, "name": "made-by-admin"}) as answer:
                    assert answer.status == 200, await answer.text()
                async with http.get(url + "/console/topics/made-by-admin",
                                    headers=admin_login) as answer:  # fmt: skip
                    assert answer.status == 200
                reader = basic("reader", "reader-secret")
                async with http.post(url + "/console/topics", headers=reader,
                                     json={"csrf": token, "name": "y"}) as answer:
                    assert answer.status == 403  # not a writer

    asyncio.run(scenario())
