"""SCRAM users over the wire: confluent-kafka's AdminClient adds, describes and deletes them,
the new credential logs in at once; Kafka's per-user error codes; and only principals allowed
ALTER/DESCRIBE on the cluster may do it."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from kayak.broker.security.credentials import CredentialStore
from kayak.broker.security.listeners import parse_listeners
from kayak.broker.server import Broker
from kayak.protocol.messages.alter_user_scram_credentials_request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kayak.protocol.messages.alter_user_scram_credentials_response import (
    AlterUserScramCredentialsResponse,
)
from kayak.protocol.messages.describe_user_scram_credentials_request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kayak.protocol.messages.describe_user_scram_credentials_response import (
    DescribeUserScramCredentialsResponse,
)
from kayak.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from kayak.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from kayak.protocol.sasl import encode_plain
from tests.broker.wire import WireClient
from tests.security.threaded_broker import ThreadedBroker

pytestmark = pytest.mark.timeout(60)

SASL = "SASL_PLAINTEXT"
SHA256, SHA512 = 1, 2  # the protocol's mechanism codes


@pytest.fixture
def secured_broker(tmp_path: Path) -> Iterator[Broker]:
    """A SASL broker enforcing ACLs (none defined): only the super user ``admin`` may act."""
    data = tmp_path / "data"
    data.mkdir()
    store = CredentialStore.open(data)
    for user in ("admin", "bob"):
        store.upsert(user, "SCRAM-SHA-512", password=f"{user}-secret")
    settings: dict[str, Any] = {
        "listeners": parse_listeners(f"{SASL}://127.0.0.1:0"),
        "super_users": ("User:admin",),
        "connection_failed_authentication_delay_ms": 0,
    }
    with ThreadedBroker(data, **settings) as broker:
        yield broker


def admin_client(broker: Broker, user: str) -> AdminClient:
    return AdminClient({
        "bootstrap.servers": broker.bootstrap_servers_for(SASL),
        "security.protocol": SASL, "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user, "sasl.password": f"{user}-secret",
    })  # fmt: skip


def describe_all(admin: AdminClient) -> dict[str, list[tuple[str, int]]]:
    result = admin.describe_user_scram_credentials().result(15)
    return {
        user: sorted((i.mechanism.name, i.iterations) for i in d.scram_credential_infos)
        for user, d in result.items()
    }


def logs_in(broker: Broker, mechanism: str, user: str, password: str) -> bool:
    """Whether confluent-kafka logs in (and fetches metadata) with these credentials."""
    refusals: list[Any] = []
    admin = AdminClient({
        "bootstrap.servers": broker.bootstrap_servers_for(SASL),
        "security.protocol": SASL, "sasl.mechanism": mechanism,
        "sasl.username": user, "sasl.password": password, "error_cb": refusals.append,
    })  # fmt: skip
    deadline = time.monotonic() + 10
    while not refusals and time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.2)
            return True
        except KafkaException:
            admin.poll(0.05)  # serves error_cb
    assert refusals, "neither logged in nor refused"
    assert refusals[0].code() == KafkaError._AUTHENTICATION, refusals[0]
    return False


def test_admin_client_adds_describes_and_deletes_users(secured_broker: Broker) -> None:
    admin = admin_client(secured_broker, "admin")
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"carol-pw"
        ),
        UserScramCredentialUpsertion(
            "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dave-pw", b"salt"
        ),
    ])  # fmt: skip
    for future in futures.values():
        assert future.result(15) is None
    assert describe_all(admin) == {
        "admin": [("SCRAM_SHA_512", 4096)],
        "bob": [("SCRAM_SHA_512", 4096)],
        "carol": [("SCRAM_SHA_256", 8192)],
        "dave": [("SCRAM_SHA_512", 4096)],
    }
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(15)
    assert described.scram_credential_infos[0].iterations == 8192
    with pytest.raises(KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(15)

    assert logs_in(secured_broker, "SCRAM-SHA-256", "carol", "carol-pw")
    assert logs_in(secured_broker, "PLAIN", "dave", "dave-pw")
    assert not logs_in(secured_broker, "SCRAM-SHA-256", "carol", "wrong")

    deleted = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)]
    )
    assert deleted["carol"].result(15) is None
    assert "carol" not in describe_all(admin)
    assert not logs_in(secured_broker, "SCRAM-SHA-256", "carol", "carol-pw")
    with pytest.raises(KafkaException, match="does not exist"):
        admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)]
        )["carol"].result(15)


def test_only_principals_allowed_on_the_cluster_may_describe_or_alter(
    secured_broker: Broker,
) -> None:
    bob = admin_client(secured_broker, "bob")
    # Per user, not top-level: librdkafka cannot survive a top-level error here.
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        bob.describe_user_scram_credentials().result(15)
    with pytest.raises(KafkaException, match="not allowed"):
        bob.describe_user_scram_credentials(["bob"])["bob"].result(15)
    futures = bob.alter_user_scram_credentials([
        UserScramCredentialUpsertion(
            "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"new-password"
        )
    ])  # fmt: skip
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        futures["bob"].result(15)
    assert logs_in(secured_broker, "SCRAM-SHA-512", "bob", "bob-secret")  # unchanged


# -- Kafka's per-user answers, through the raw protocol ---------------------------------------


def logged_in_as_admin(broker: Broker) -> WireClient:
    client = WireClient(broker.bootstrap_servers_for(SASL))
    assert client.request(SaslHandshakeRequest("PLAIN"), 1).error_code == 0  # type: ignore[attr-defined]
    answer = client.request(SaslAuthenticateRequest(encode_plain("admin", "admin-secret")), 2)
    assert answer.error_code == 0  # type: ignore[attr-defined]
    return client


def upsertion(
    name: str, mechanism: int = SHA256, iterations: int = 4096
) -> ScramCredentialUpsertion:
    salt = os.urandom(16)
    hash_name = "sha256" if mechanism != SHA512 else "sha512"
    salted = hashlib.pbkdf2_hmac(hash_name, b"pw", salt, max(iterations, 1))
    return ScramCredentialUpsertion(name, mechanism, iterations, salt, salted)


def test_per_user_error_codes_as_kafka_answers(secured_broker: Broker) -> None:
    client = logged_in_as_admin(secured_broker)
    request = AlterUserScramCredentialsRequest(
        deletions=[
            ScramCredentialDeletion("ghost", SHA256),  # RESOURCE_NOT_FOUND
            ScramCredentialDeletion("twice", SHA256),  # with the upsertion below: DUPLICATE
        ],
        upsertions=[
            upsertion("few", iterations=1000),  # UNACCEPTABLE_CREDENTIAL
            upsertion("many", iterations=20000),  # UNACCEPTABLE_CREDENTIAL
            upsertion("sha1", mechanism=0),  # UNSUPPORTED_SASL_MECHANISM
            upsertion("twice"),
            upsertion("good"),
            upsertion("good", mechanism=SHA512),
            upsertion(""),  # UNACCEPTABLE_CREDENTIAL
        ],
    )
    response = client.request(request, 0)
    assert isinstance(response, AlterUserScramCredentialsResponse)
    codes = {r.user: r.error_code for r in response.results}
    assert codes == {
        "ghost": 91, "twice": 92, "few": 93, "many": 93, "sha1": 33, "good": 0, "": 93,
    }  # fmt: skip
    assert all(r.error_message for r in response.results if r.error_code)
    users = CredentialStore.open(secured_broker.config.data_dir).users()
    assert users["good"] == [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096)]
    assert not {"ghost", "twice", "few", "many", "sha1"} & set(users)

    # One user's changes apply together or not at all: the deletion fails, so does the upsert.
    request = AlterUserScramCredentialsRequest(
        deletions=[ScramCredentialDeletion("good", SHA512), ScramCredentialDeletion("x", SHA512)],
        upsertions=[upsertion("x")],
    )
    response = client.request(request, 0)
    assert isinstance(response, AlterUserScramCredentialsResponse)
    assert {r.user: r.error_code for r in response.results} == {"good": 0, "x": 91}
    users = CredentialStore.open(secured_broker.config.data_dir).users()
    assert users["good"] == [("SCRAM-SHA-256", 4096)] and "x" not in users

    described = client.request(
        DescribeUserScramCredentialsRequest(
            users=[UserName("good"), UserName("good"), UserName("nope")]
        ),
        0,
    )
    assert isinstance(described, DescribeUserScramCredentialsResponse)
    assert [(r.user, r.error_code) for r in described.results] == [("good", 92), ("nope", 91)]
    client.close()
