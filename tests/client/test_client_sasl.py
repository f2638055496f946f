"""kayak's own clients with SASL against kayak's broker: PLAIN, SCRAM-SHA-256/512 and
OAUTHBEARER over SASL_PLAINTEXT and SASL_SSL, asyncio and blocking; wrong passwords and
mechanisms failing at once; a broker that cannot prove it knows the SCRAM credential
(a fake one, sending a wrong server signature); re-authentication (KIP-368) while producing;
and Spark's ``kafka.sasl.*`` options.

Against Apache Kafka too (its ``SASL_SSL`` listener: SCRAM-SHA-256/512 only, a user made at
format time, sessions of one second): authenticating, wrong passwords and mechanisms, and
re-authentication. OAUTHBEARER, the CLI and Spark are tested against kayak's broker alone:
the client underneath is the one tested against both.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kayak.broker.security.credentials import CredentialStore
from kayak.broker.security.listeners import parse_listeners
from kayak.broker.server import Broker
from kayak.client import Admin, Consumer, Producer, TopicPartition, sync
from kayak.errors import SaslAuthenticationFailedError, UnsupportedSaslMechanismError
from kayak.protocol import ServerConnection
from kayak.protocol.events import RequestReceived
from kayak.protocol.messages import (
    ApiVersionsResponse,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
)
from kayak.protocol.messages.api_versions_response import ApiVersion
from kayak.protocol.sasl import ScramServer, scram_credential, unsecured_token
from tests.fixtures.certs import TlsFiles
from tests.fixtures.jvm import SASL_SESSION_MS, SCRAM_PASSWORD, SCRAM_USER, SecuredApacheKafka
from tests.security.threaded_broker import ThreadedBroker

pytestmark = pytest.mark.timeout(90)

USER, PASSWORD = SCRAM_USER, SCRAM_PASSWORD  # the user Apache Kafka was formatted with too
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Long: a client retrying an authentication failure would outlast the test's timeout.
PATIENT = {"request.timeout.ms": 100_000}


def sasl_broker(path: Path, files: TlsFiles, **extra: Any) -> ThreadedBroker:
    path.mkdir(parents=True, exist_ok=True)
    store = CredentialStore.open(path)
    for mechanism in SCRAM:
        store.upsert(USER, mechanism, password=PASSWORD)
    settings: dict[str, Any] = {
        "listeners": parse_listeners("SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"),
        "ssl_certificate_location": files.server_cert,
        "ssl_key_location": files.server_key,
        "sasl_enabled_mechanisms": ("PLAIN", *SCRAM, "OAUTHBEARER"),
        "sasl_oauthbearer_unsecured": True,
        "allow_everyone_if_no_acl_found": True,  # ACLs are not what these tests are about
    }
    return ThreadedBroker(path, **{**settings, **extra})


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles) -> Iterator[Broker]:
    with sasl_broker(tmp_path_factory.mktemp("sasl-broker"), tls_files) as running:
        yield running


@dataclass
class SaslTarget:
    """Where a SASL client connects: an address per security protocol, the CA to trust."""

    kind: str
    servers: dict[str, str]
    ca: Path
    broker: Broker | None = None  # kayak's, to ask for its sessions

    def bootstrap_servers_for(self, protocol: str) -> str:
        return self.servers[protocol]


def kayak_target(broker: Broker, files: TlsFiles) -> SaslTarget:
    servers = {p: broker.bootstrap_servers_for(p) for p in ("SASL_PLAINTEXT", "SASL_SSL")}
    return SaslTarget("kayak", servers, files.ca, broker)


def sasl_target(request: pytest.FixtureRequest, kind: str) -> SaslTarget:
    """The module's kayak broker, or the run's secured Apache Kafka (SASL_SSL only)."""
    if kind == "apache-kafka":
        kafka: SecuredApacheKafka = request.getfixturevalue("apache_kafka_secured")
        assert kafka.tls is not None
        return SaslTarget(kind, {"SASL_SSL": kafka.bootstrap_servers_for("SASL_SSL")}, kafka.tls.ca)
    return kayak_target(request.getfixturevalue("broker"), request.getfixturevalue("tls_files"))


@pytest.fixture(params=["kayak", "apache-kafka"])
def target(request: pytest.FixtureRequest) -> SaslTarget:
    return sasl_target(request, request.param)


def sasl_config(
    target: SaslTarget, protocol: str, mechanism: str, **extra: object
) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": target.bootstrap_servers_for(protocol),
        "security.protocol": protocol,
        "sasl.mechanism": mechanism,
    }
    if protocol == "SASL_SSL":
        config["ssl.ca.location"] = str(target.ca)
    if mechanism != "OAUTHBEARER":
        config |= {"sasl.username": USER, "sasl.password": PASSWORD}
    return {**config, **extra}


async def round_trip(config: dict[str, object]) -> list[bytes]:
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    async with Admin(config) as admin:
        await admin.create_topics([topic])
    async with Producer(config) as producer:
        for i in range(3):
            await producer.send_and_wait(topic, b"value-%d" % i)
    async with Consumer(config, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        found: list[bytes] = []
        while len(found) < 3:
            batches = await consumer.getmany(timeout_ms=5_000)
            found += [r.value for records in batches.values() for r in records if r.value]
    return found


@pytest.mark.parametrize(
    ("kind", "protocol", "mechanism"),
    [
        ("kayak", "SASL_PLAINTEXT", "PLAIN"),
        ("kayak", "SASL_SSL", "SCRAM-SHA-256"),
        ("kayak", "SASL_PLAINTEXT", "SCRAM-SHA-512"),
        ("apache-kafka", "SASL_SSL", "SCRAM-SHA-256"),
        ("apache-kafka", "SASL_SSL", "SCRAM-SHA-512"),
    ],
)
def test_async_clients_authenticate(
    request: pytest.FixtureRequest, kind: str, protocol: str, mechanism: str
) -> None:
    config = sasl_config(sasl_target(request, kind), protocol, mechanism)
    assert asyncio.run(round_trip(config)) == [b"value-0", b"value-1", b"value-2"]


def test_sync_clients_with_a_jaas_config_over_sasl_ssl(target: SaslTarget) -> None:
    config = sasl_config(target, "SASL_SSL", "SCRAM-SHA-512")
    del config["sasl.username"], config["sasl.password"]
    config["sasl.jaas.config"] = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";'
    )
    topic = f"sasl-sync-{uuid.uuid4().hex[:8]}"
    with sync.Admin(config) as admin:
        admin.create_topics([topic])
    with sync.Producer(config) as producer:
        producer.send_and_wait(topic, b"jaas")
    with sync.Consumer(config, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert consumer.getone().value == b"jaas"
        if target.broker is not None:  # kayak's broker says who it took us for
            principals = {str(s.principal) for s in target.broker.connection_sessions()}
            assert f"User:{USER}" in principals


@pytest.mark.kayak_only("Apache Kafka's SASL_SSL listener here enables SCRAM only")
def test_oauthbearer_token_callback(broker: Broker, tls_files: TlsFiles) -> None:
    calls: list[str] = []

    async def token(config: str) -> tuple[str, float]:
        calls.append(config)
        return unsecured_token(USER, 60_000), time.time() + 60

    config = sasl_config(
        kayak_target(broker, tls_files),
        "SASL_SSL",
        "OAUTHBEARER",
        oauth_cb=token,
        **{"sasl.oauthbearer.config": "scope=kafka"},
    )
    assert asyncio.run(round_trip(config)) == [b"value-0", b"value-1", b"value-2"]
    assert calls and set(calls) == {"scope=kafka"}  # once per connection


@pytest.mark.parametrize(
    ("kind", "protocol", "mechanism"),
    [
        ("kayak", "SASL_PLAINTEXT", "PLAIN"),
        ("kayak", "SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("apache-kafka", "SASL_SSL", "SCRAM-SHA-256"),
    ],
)
def test_a_wrong_password_fails_at_once_naming_broker_and_mechanism(
    request: pytest.FixtureRequest, kind: str, protocol: str, mechanism: str
) -> None:
    target = sasl_target(request, kind)
    config = sasl_config(target, protocol, mechanism, **PATIENT, **{"sasl.password": "nope"})
    with pytest.raises(SaslAuthenticationFailedError) as info:
        sync.Producer(config)
    message = str(info.value)
    assert target.bootstrap_servers_for(protocol) in message and mechanism in message
    assert "nope" not in message

    async def consume() -> None:
        async with Consumer(config, group_id="g"):
            pass

    with pytest.raises(SaslAuthenticationFailedError):
        asyncio.run(consume())


def test_a_mechanism_the_broker_does_not_enable_is_named(
    tmp_path: Path, tls_files: TlsFiles
) -> None:
    with sasl_broker(tmp_path / "data", tls_files, sasl_enabled_mechanisms=("PLAIN",)) as only:
        config = sasl_config(
            kayak_target(only, tls_files), "SASL_PLAINTEXT", "SCRAM-SHA-512", **PATIENT
        )
        with pytest.raises(UnsupportedSaslMechanismError, match="it enables: PLAIN"):
            sync.Admin(config)


def test_a_mechanism_apache_kafka_does_not_enable_is_named(
    request: pytest.FixtureRequest,
) -> None:
    config = sasl_config(sasl_target(request, "apache-kafka"), "SASL_SSL", "PLAIN", **PATIENT)
    with pytest.raises(UnsupportedSaslMechanismError, match="it enables: SCRAM") as info:
        sync.Admin(config)
    assert "SCRAM-SHA-256" in str(info.value) and "SCRAM-SHA-512" in str(info.value)


# --------------------------------------------------------------------------------------------
# A broker that does not know the credential cannot pass the client's SCRAM check
# --------------------------------------------------------------------------------------------


class _FakeScramBroker:
    """Answers ApiVersions and SCRAM honestly, except for a forged server signature (the
    injected fault): what a man in the middle without the stored key would have to send."""

    def __init__(self) -> None:
        credential = scram_credential("SCRAM-SHA-256", PASSWORD)
        self.scram = ScramServer("SCRAM-SHA-256", lambda user: credential)
        self.proofs_checked = 0

    def answer(self, event: RequestReceived) -> Any:
        key = event.api_key
        if key == 18:
            supported = [(18, 0, 3), (17, 0, 1), (36, 0, 2), (3, 0, 12)]
            return ApiVersionsResponse(api_keys=[ApiVersion(*k) for k in supported])
        if key == 17:
            return SaslHandshakeResponse(mechanisms=["SCRAM-SHA-256"])
        data = bytes(event.request.auth_bytes)  # type: ignore[attr-defined]
        if self.scram.username == "":
            return SaslAuthenticateResponse(auth_bytes=self.scram.server_first(data))
        self.scram.server_final(data)  # the client's proof is right...
        self.proofs_checked += 1
        forged = b"v=" + base64.b64encode(bytes(32))  # ...but the signature is not
        return SaslAuthenticateResponse(auth_bytes=forged)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = ServerConnection()
        while data := await reader.read(65536):
            connection.receive_data(data)
            while (event := connection.next_event()) is not None:
                assert isinstance(event, RequestReceived)
                frame = connection.send_response(
                    event.header.correlation_id,
                    event.api_key,
                    event.api_version,
                    self.answer(event),
                )
                writer.write(bytes(frame))
        writer.close()


def test_a_forged_scram_server_signature_fails_the_connection() -> None:
    fake = _FakeScramBroker()

    async def main() -> None:
        server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        config = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
            **PATIENT,
        }
        try:
            with pytest.raises(SaslAuthenticationFailedError, match="signature is wrong") as info:
                async with Admin(config):
                    pass
            assert f"127.0.0.1:{port}" in str(info.value)
        finally:
            server.close()

    asyncio.run(main())
    assert fake.proofs_checked == 1  # it got that far, once: no retrying


# --------------------------------------------------------------------------------------------
# KIP-368 re-authentication
# --------------------------------------------------------------------------------------------


def _jaas(password: str) -> str:
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{password}";'
    )


class _Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.kayak_only("counts re-authentications in kayak's broker's log; see the next test")
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "OAUTHBEARER"])
def test_producing_across_many_session_lifetimes_reauthenticates(
    tmp_path: Path, tls_files: TlsFiles, mechanism: str
) -> None:
    lifetime_ms = 500
    tokens: list[str] = []

    def token() -> tuple[str, float]:
        tokens.append(unsecured_token(USER, 60_000))
        return tokens[-1], time.time() + 60

    counter = _Counter()
    authenticator = logging.getLogger("kayak.broker.security.authenticator")
    authenticator.addHandler(counter)
    authenticator.setLevel(logging.INFO)
    try:
        with sasl_broker(
            tmp_path / "data", tls_files, connections_max_reauth_ms=lifetime_ms
        ) as reauth:
            extra = {"oauth_cb": token} if mechanism == "OAUTHBEARER" else {}
            config = sasl_config(kayak_target(reauth, tls_files), "SASL_SSL", mechanism, **extra)
            sent = asyncio.run(_produce_for(config, seconds=5 * lifetime_ms / 1000))
    finally:
        authenticator.removeHandler(counter)
    assert sent > 0
    first = [line for line in counter.lines if " authentication as " in line]
    again = [line for line in counter.lines if "re-authentication as" in line]
    assert len(again) >= 3, counter.lines
    assert not any("failed" in line for line in counter.lines)
    if mechanism == "OAUTHBEARER":
        assert len(tokens) == len(first) + len(again)  # a fresh token each time


def test_producing_across_apache_kafkas_session_lifetimes_reauthenticates(
    request: pytest.FixtureRequest,
) -> None:
    """Apache Kafka closes a connection whose session expired (KIP-368) at its next request:
    only re-authenticating in time keeps one connection going (``_produce_for`` raises on
    any failed send and counts the authentications on the connections it used)."""
    config = sasl_config(sasl_target(request, "apache-kafka"), "SASL_SSL", "SCRAM-SHA-512")
    assert asyncio.run(_produce_for(config, seconds=3.5 * SASL_SESSION_MS / 1000)) > 0


async def _produce_for(config: dict[str, object], seconds: float) -> int:
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    async with Admin(config) as admin:
        await admin.create_topics([topic])
    sent = 0
    async with Producer(config, linger_ms=0) as producer:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await producer.send_and_wait(topic, b"still here")  # raises on any failure
            sent += 1
            await asyncio.sleep(0.02)
        connections = list(producer._cluster._connections.values())
        assert connections and max(c.authentications for c in connections) >= 3
    return sent


# --------------------------------------------------------------------------------------------
# Spark
# --------------------------------------------------------------------------------------------


@pytest.mark.kayak_only("a Spark session: the client beneath is tested against both above")
def test_spark_reads_with_kafka_sasl_options(
    spark: Any, broker: Broker, tls_files: TlsFiles
) -> None:
    config = sasl_config(kayak_target(broker, tls_files), "SASL_PLAINTEXT", "SCRAM-SHA-256")
    topic = f"sasl-spark-{uuid.uuid4().hex[:8]}"
    with sync.Admin(config) as admin:
        admin.create_topics([topic])
    with sync.Producer(config) as producer:
        for i in range(5):
            producer.send(topic, b"row-%d" % i)
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";'
    )
    frame = (
        spark.read.format("kayak")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers_for("SASL_PLAINTEXT"))
        .option("kafka.security.protocol", "SASL_PLAINTEXT")
        .option("kafka.sasl.mechanism", "SCRAM-SHA-256")
        .option("kafka.sasl.jaas.config", jaas)
        .option("subscribe", topic)
        .load()
    )
    values = sorted(bytes(row.value) for row in frame.select("value").collect())
    assert values == [b"row-%d" % i for i in range(5)]


# --------------------------------------------------------------------------------------------
# The CLI: -X and --command-config, the same for every client command
# --------------------------------------------------------------------------------------------


@pytest.mark.kayak_only("kayak's CLI: the client beneath is tested against both above")
def test_cli_commands_take_security_properties(
    broker: Broker, tls_files: TlsFiles, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from kayak.cli.main import cli

    secrets = tmp_path / "client.properties"
    secrets.write_text(
        "# the password stays out of the command line\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="{USER}" password="{PASSWORD}";\n'
    )
    security = [
        "-b", broker.bootstrap_servers_for("SASL_SSL"),
        "-X", "security.protocol=SASL_SSL",
        "-X", "sasl.mechanism=SCRAM-SHA-256",
        "-X", f"ssl.ca.location={tls_files.ca}",
        "--command-config", str(secrets),
    ]  # fmt: skip
    topic = f"sasl-cli-{uuid.uuid4().hex[:8]}"
    runner = CliRunner()
    steps = [
        (["topics", *security, "create", topic], None),
        (["produce", topic, *security], "one\ntwo\n"),
        (["consume", topic, *security, "--from-beginning", "--exit-at-end"], None),
        (["groups", *security, "list"], None),
    ]
    results = [runner.invoke(cli, args, input=stdin) for args, stdin in steps]
    for result in results:
        assert result.exit_code == 0, result.output
    assert results[2].output.splitlines() == ["one", "two"]
    # -X overrides the file: the user name stays, the password is wrong.
    wrong = runner.invoke(
        cli, ["topics", *security, "-X", f"sasl.jaas.config={_jaas('nope')}", "list"]
    )
    assert wrong.exit_code == 1
    assert "SASL_AUTHENTICATION_FAILED" in wrong.output and "nope" not in wrong.output
