"""The registry's security: JSON-only bodies (415), no cross-site writes, HTTP basic
authentication against the broker's users with read and write roles, HTTPS, and no cap on
idle connections that would lock it."""

from __future__ import annotations

import asyncio
import http.client
import math
import resource
import ssl
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.error import SchemaRegistryError as ConfluentError

from kayak.broker import Broker
from kayak.broker.security.credentials import CredentialStore
from kayak.errors import SchemaRegistryError
from kayak.serde import SchemaRegistryClient
from tests.fixtures.certs import TlsFiles
from tests.registry.conftest import (
    Answer,
    RegistryBroker,
    call,
    record_schema,
    start_registry_broker,
)

READER = ("reader", "reader-secret")
WRITER = ("writer", "writer-secret")
ADMIN = ("admin", "admin-secret")


def schema_body(name: str) -> dict[str, str]:
    return {"schema": record_schema(name, ("x", "int"))}


def add_users(data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    store = CredentialStore.open(data_dir)
    for user, password in (READER, WRITER, ADMIN):
        store.upsert(user, "SCRAM-SHA-256", password=password)


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles
) -> Iterator[RegistryBroker]:
    """A ``kayak broker`` whose registry is HTTPS with basic auth: ``writer`` may write,
    ``admin`` is a super user, ``reader`` may only read."""
    data_dir = tmp_path_factory.mktemp("secured-registry") / "data"
    add_users(data_dir)
    running = start_registry_broker(
        data_dir,
        "--schema-registry-tls", "--schema-registry-auth",
        "--schema-registry-writers", WRITER[0],
        "--super-users", f"User:{ADMIN[0]}",
        "--ssl-certificate-location", str(tls_files.server_cert),
        "--ssl-key-location", str(tls_files.server_key),
    )  # fmt: skip
    yield running
    running.broker.stop()


@pytest.fixture(scope="module")
def trusting(tls_files: TlsFiles) -> ssl.SSLContext:
    """A client context that trusts the test CA (and checks the host name)."""
    return ssl.create_default_context(cafile=str(tls_files.ca))


# -- 415 and cross-site requests (no authentication needed to be refused) ----------------


def test_bodies_that_are_not_json_are_415(url: str, subject: str) -> None:
    path = f"/subjects/{subject}/versions"
    body = b'{"schema": "\\"int\\""}'
    for content_type in ("text/plain", "application/x-www-form-urlencoded",
                         "multipart/form-data; boundary=x", "application/xml"):  # fmt: skip
        answer = call(url, "POST", path, raw=body, headers={"Content-Type": content_type})
        assert (answer.status, answer.document["error_code"]) == (415, 415), content_type
        assert answer.headers["Content-Type"] == "application/vnd.schemaregistry.v1+json"
    # A form post with a JSON-looking field, exactly as a page on another site would send it.
    form = call(url, "POST", path, raw=b'{"schema":"\\"int\\"","x":"=1"}',
                headers={"Content-Type": "application/x-www-form-urlencoded",
                         "Origin": "https://evil.example"})  # fmt: skip
    assert form.status in (403, 415)
    put = call(url, "PUT", f"/config/{subject}", raw=b'{"compatibility":"NONE"}',
               headers={"Content-Type": "text/plain"})  # fmt: skip
    assert put.status == 415
    assert call(url, "GET", f"/subjects/{subject}/versions").status == 404  # nothing stored
    assert call(url, "GET", f"/config/{subject}").status == 404


def test_a_post_without_content_type_is_415(url: str, subject: str) -> None:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        # http.client adds no Content-Type of its own: a body with no type at all, as a
        # fetch() of a Blob from another site sends it.
        connection.request("POST", f"/subjects/{subject}/versions", body=b'{"schema":"\\"int\\""}')
        response = connection.getresponse()
        assert response.status == 415
        response.read()
    finally:
        connection.close()


def test_cross_site_writes_are_refused(url: str, subject: str) -> None:
    path = f"/subjects/{subject}/versions"
    for origin in ("https://evil.example", "null", url.replace("127.0.0.1", "localhost")):
        answer = call(url, "POST", path, schema_body("Cross"), headers={"Origin": origin})
        assert answer.status == 403, origin
        assert answer.document["error_code"] == 403
        assert "Access-Control-Allow-Origin" not in answer.headers
    deleting = call(
        url, "DELETE", f"/subjects/{subject}", headers={"Origin": "https://evil.example"}
    )
    assert deleting.status == 403
    assert call(url, "GET", path).status == 404  # nothing was registered
    # The registry's own origin (a page it served) may write; reads are never refused.
    own = call(url, "POST", path, schema_body("Cross"), headers={"Origin": url})
    assert own.status == 200
    read = call(url, "GET", path, headers={"Origin": "https://evil.example"})
    assert read.status == 200 and "Access-Control-Allow-Origin" not in read.headers


# -- authentication and roles, over HTTPS -------------------------------------------------


def test_registry_is_https_and_announces_it(secured: RegistryBroker) -> None:
    assert secured.url.startswith("https://127.0.0.1:")
    # Plain HTTP to the HTTPS port gets no answer a client could mistake for the registry.
    plain = secured.url.replace("https://", "http://")
    try:
        answer = call(plain, "GET", "/subjects", auth=READER)
    except (OSError, ValueError):
        pass
    else:
        assert answer.status >= 400


def test_a_client_not_trusting_the_ca_is_refused(secured: RegistryBroker) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        call(secured.url, "GET", "/subjects", auth=READER, tls=ssl.create_default_context())


def test_authentication_and_roles(secured: RegistryBroker, trusting: ssl.SSLContext) -> None:
    url, subject = secured.url, f"auth-{uuid.uuid4().hex[:8]}"
    path = f"/subjects/{subject}/versions"

    nobody = call(url, "GET", "/subjects", tls=trusting)
    assert (nobody.status, nobody.document["error_code"]) == (401, 401)
    assert nobody.headers["WWW-Authenticate"].startswith('Basic realm="kayak"')
    wrong = call(url, "GET", "/subjects", auth=(READER[0], "not-it"), tls=trusting)
    assert wrong.status == 401
    unknown = call(url, "GET", "/subjects", auth=("mallory", "x"), tls=trusting)
    assert unknown.status == 401
    garbled = call(url, "GET", "/subjects", headers={"Authorization": "Basic !!!"}, tls=trusting)
    assert garbled.status == 401
    nobody_writes = call(url, "POST", path, schema_body("A"), tls=trusting)
    assert nobody_writes.status == 401

    assert call(url, "GET", "/subjects", auth=READER, tls=trusting).status == 200
    refused = call(url, "POST", path, schema_body("A"), auth=READER, tls=trusting)
    assert (refused.status, refused.document["error_code"]) == (403, 40301)
    assert call(url, "PUT", "/config", {"compatibility": "NONE"}, auth=READER,
                tls=trusting).status == 403  # fmt: skip
    assert call(url, "GET", path, auth=WRITER, tls=trusting).status == 404  # still nothing

    written = call(url, "POST", path, schema_body("A"), auth=WRITER, tls=trusting)
    assert written.status == 200 and "id" in written.document
    by_admin = call(url, "POST", f"/subjects/{subject}-admin/versions", schema_body("B"),
                    auth=ADMIN, tls=trusting)  # fmt: skip
    assert by_admin.status == 200  # a super user is a writer
    assert call(url, "GET", path, auth=READER, tls=trusting).document == [1]
    assert call(url, "DELETE", f"/subjects/{subject}", auth=READER, tls=trusting).status == 403
    assert call(url, "DELETE", f"/subjects/{subject}", auth=WRITER, tls=trusting).document == [1]


def test_confluent_client_with_basic_auth_over_https(
    secured: RegistryBroker, tls_files: TlsFiles
) -> None:
    subject = f"confluent-auth-{uuid.uuid4().hex[:8]}"
    schema = Schema(record_schema("Secured", ("id", "string")), "AVRO")
    base = {"url": secured.url, "ssl.ca.location": str(tls_files.ca)}
    writer = ConfluentRegistry({**base, "basic.auth.user.info": ":".join(WRITER)})
    schema_id = writer.register_schema(subject, schema)
    reader = ConfluentRegistry({**base, "basic.auth.user.info": ":".join(READER)})
    assert reader.get_latest_version(subject).schema_id == schema_id
    assert reader.get_schema(schema_id).schema_str is not None
    with pytest.raises(ConfluentError) as denied:
        reader.register_schema(subject + "-other", schema)
    assert denied.value.http_status_code == 403
    with pytest.raises(ConfluentError) as unauthenticated:
        ConfluentRegistry({**base, "basic.auth.user.info": "writer:wrong"}).get_subjects()
    assert unauthenticated.value.http_status_code == 401


def test_kayak_client_with_basic_auth_over_https(
    secured: RegistryBroker, tls_files: TlsFiles
) -> None:
    subject = f"kayak-auth-{uuid.uuid4().hex[:8]}"
    config = {
        "basic.auth.credentials.source": "USER_INFO",
        "basic.auth.user.info": ":".join(WRITER),
        "schema.registry.ssl.ca.location": str(tls_files.ca),
    }
    client = SchemaRegistryClient(secured.url, config=config)
    schema_id = client.register(subject, record_schema("KayakSecured", ("x", "int")))
    assert client.latest_version(subject).schema_id == schema_id
    # Credentials in the URL (source URL), as Confluent's clients also allow.
    host = secured.url.removeprefix("https://")
    in_url = SchemaRegistryClient(
        f"https://{READER[0]}:{READER[1]}@{host}", config={"ssl.ca.location": str(tls_files.ca)}
    )
    assert in_url.schema_by_id(schema_id)["name"] == "KayakSecured"
    with pytest.raises(SchemaRegistryError) as denied:
        in_url.register(subject, record_schema("Other", ("y", "int")))
    assert denied.value.http_status == 403
    with pytest.raises(SchemaRegistryError) as untrusted:
        SchemaRegistryClient(secured.url, config={"basic.auth.user.info": "a:b"}).subjects()
    assert untrusted.value.http_status is None  # no answer: the certificate was refused
    with pytest.raises(SchemaRegistryError) as wrong:
        SchemaRegistryClient(
            secured.url, config={**config, "basic.auth.user.info": "writer:wrong"}
        ).subjects()
    assert wrong.value.http_status == 401


def test_auth_is_on_by_default_with_a_sasl_listener(tmp_path: Path) -> None:
    from kayak.broker.security.listeners import Listener, SecurityProtocol

    add_users(tmp_path)
    listener = Listener(SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", 0)

    async def scenario() -> None:
        async with Broker(tmp_path, listeners=(listener,), schema_registry_port=0) as broker:
            url = broker.schema_registry_url
            assert url is not None and url.startswith("http://")
            assert (await asyncio.to_thread(call, url, "GET", "/subjects")).status == 401
            answer = await asyncio.to_thread(call, url, "GET", "/subjects", auth=READER)
            assert answer.status == 200

    asyncio.run(scenario())


# -- password guessing ------------------------------------------------------------------


def test_password_guessing_is_rate_limited_with_the_sasl_limiter(tmp_path: Path) -> None:
    from kayak.broker.security.listeners import Listener, SecurityProtocol

    add_users(tmp_path)
    listener = Listener(SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", 0)
    guesses = 30

    async def scenario() -> None:
        # Failures are answered late; a faster refill keeps that within the client's timeout.
        async with Broker(
            tmp_path, listeners=(listener,), schema_registry_port=0, login_failures_per_second=4.0
        ) as broker:
            url = broker.schema_registry_url
            assert url is not None
            assert broker.context is not None and broker.context.authenticator is not None
            limiter = broker.context.authenticator.limiter  # the SASL logins' own

            def guess(i: int) -> Answer:
                return call(url, "GET", "/subjects", auth=(READER[0], f"guess-{i}"))

            # The clients' own threads: the default pool is where the broker checks passwords.
            loop = asyncio.get_running_loop()
            started = time.monotonic()
            with ThreadPoolExecutor(guesses) as clients:
                answers = await asyncio.gather(
                    *(loop.run_in_executor(clients, guess, i) for i in range(guesses))
                )
            elapsed = time.monotonic() - started
            checked = [a for a in answers if a.status == 401]
            limited = [a for a in answers if a.status == 429]
            assert len(checked) + len(limited) == guesses
            # A wrong password is answered only as the budget allows: the burst, plus what
            # refilled meanwhile. Guesses that waited too long for a check are refused, 429.
            assert limiter.burst <= len(checked)
            assert len(checked) <= limiter.burst + math.ceil(elapsed * limiter.per_second)
            assert all(int(a.headers["Retry-After"]) >= 1 for a in limited)
            assert all(a.document["error_code"] == 429 for a in limited)
            # The budget (the SASL logins' too) is spent, and the right password is checked
            # and accepted all the same.
            assert limiter.failure_delay("127.0.0.1") > 0
            right = await asyncio.to_thread(call, url, "GET", "/subjects", auth=READER)
            assert right.status == 200
            # Remembered for a while: the next requests are served without another PBKDF2.
            for _ in range(3):
                again = await asyncio.to_thread(call, url, "GET", "/subjects", auth=READER)
                assert again.status == 200

    asyncio.run(scenario())


def test_verified_passwords_expire_are_bounded_and_forgotten_when_users_change() -> None:
    from kayak.broker.web.auth import VerifiedPasswords

    now = [0.0]
    version = [1]
    verified = VerifiedPasswords(
        ttl_s=60, max_entries=2, version=lambda: version[0], clock=lambda: now[0]
    )
    verified.add("alice", "a-secret")
    assert verified.contains("alice", "a-secret")
    assert not verified.contains("alice", "a-secre")
    assert not verified.contains("bob", "a-secret")
    now[0] = 61
    assert not verified.contains("alice", "a-secret")  # expired
    for user in ("alice", "bob", "carol"):
        verified.add(user, "pw")
    assert len(verified) == 2 and not verified.contains("alice", "pw")  # bounded
    assert verified.contains("carol", "pw")
    version[0] = 2  # the credential store changed (a password reset, a user deleted)
    assert not verified.contains("carol", "pw") and len(verified) == 0


# -- idle connections ---------------------------------------------------------------------


def test_thousands_of_idle_connections_do_not_lock_the_registry(tmp_path: Path) -> None:
    idle = 1100
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 2 * idle + 512  # both ends of every socket live in this process, and the broker
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"the file descriptor limit ({hard}) is below {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))

    async def scenario() -> None:
        async with Broker(tmp_path, port=0, schema_registry_port=0) as broker:
            url = broker.schema_registry_url
            assert url is not None
            parts = urlsplit(url)
            writers = []
            try:
                for _ in range(idle):
                    _, writer = await asyncio.open_connection(parts.hostname, parts.port)
                    writers.append(writer)
                answer = await asyncio.to_thread(call, url, "GET", "/schemas/types")
                assert (answer.status, answer.document) == (200, ["AVRO"])
            finally:
                for writer in writers:
                    writer.close()

    try:
        asyncio.run(scenario())
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
