"""Kafka's tools with ``--command-config`` on kayak's SASL_SSL listener (SCRAM-SHA-512 over
TLS, the CA given to Java as a PEM truststore), ACLs enforced: kafka-acls grants and takes
away, the application user is held to them, kafka-configs manages SCRAM users, and a wrong
password is refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures.certs import TlsFiles
from tests.fixtures.jvm import KafkaTools
from tests.jvm.kayak_brokers import SecuredKayak

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles
) -> Iterator[SecuredKayak]:
    broker = SecuredKayak(tmp_path_factory.mktemp("tools-secured"), tls_files).start()
    yield broker
    broker.stop()


def as_user(kafka_tools: KafkaTools, secured: SecuredKayak, user: str, tool: str, *args: str,
            input: str | None = None, password: str | None = None) -> str:  # fmt: skip
    """A tool run as ``user`` over SASL_SSL: exit status, stdout and stderr in one text."""
    done = kafka_tools.run(
        tool, "--bootstrap-server", secured.sasl_ssl,
        "--command-config", str(secured.properties(user, password)), *args,
        input=input, check=False, timeout=90,
    )  # fmt: skip
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def test_acls_hold_the_application_to_its_grants(
    kafka_tools: KafkaTools, secured: SecuredKayak
) -> None:
    admin = lambda *a, **k: as_user(kafka_tools, secured, "admin", *a, **k)  # noqa: E731
    app = lambda *a, **k: as_user(kafka_tools, secured, "app", *a, **k)  # noqa: E731
    assert admin("kafka-topics", "--create", "--topic", "orders", "--partitions", "2").startswith(
        "exit 0\nCreated topic orders."
    )
    added = admin("kafka-acls", "--add", "--allow-principal", "User:app", "--producer",
                  "--consumer", "--topic", "orders", "--group", "billing")  # fmt: skip
    assert added.startswith("exit 0")
    listed = admin("kafka-acls", "--list", "--topic", "orders")
    for operation in ("READ", "WRITE", "DESCRIBE", "CREATE"):
        assert (
            f"(principal=User:app, host=*, operation={operation}, permissionType=ALLOW)" in listed
        )
    assert "operation=READ, permissionType=ALLOW" in admin(
        "kafka-acls", "--list", "--group", "billing"
    )

    produced = app("kafka-console-producer", "--topic", "orders", input="one\ntwo\nthree\n")
    assert produced.startswith("exit 0"), produced
    consumed = app("kafka-console-consumer", "--topic", "orders", "--group", "billing",
                   "--from-beginning", "--max-messages", "3")  # fmt: skip
    assert sorted(consumed.split("\n")[1:4]) == ["one", "three", "two"], consumed
    other_group = app(
        "kafka-console-consumer", "--topic", "orders", "--group", "other", "--from-beginning",
        "--max-messages", "1", "--timeout-ms", "20000",
    )  # fmt: skip
    assert "GroupAuthorizationException: Not authorized to access group: other" in other_group
    assert app("kafka-topics", "--list").split("\n")[1:] == ["orders", ""]  # only what it may see
    lag = admin("kafka-consumer-groups", "--describe", "--group", "billing")
    assert lag.count("billing         orders") == 2, lag

    removed = admin("kafka-acls", "--remove", "--allow-principal", "User:app", "--operation",
                    "Read", "--topic", "orders", "--force")  # fmt: skip
    assert removed.startswith("exit 0")
    refused = app(
        "kafka-console-consumer", "--topic", "orders", "--partition", "0", "--offset",
        "earliest", "--max-messages", "1", "--timeout-ms", "20000",
    )  # fmt: skip
    assert "TopicAuthorizationException: Not authorized to access topics: [orders]" in refused


def test_scram_users_through_kafka_configs(kafka_tools: KafkaTools, secured: SecuredKayak) -> None:
    admin = lambda *a, **k: as_user(kafka_tools, secured, "admin", *a, **k)  # noqa: E731
    bob = ("--entity-type", "users", "--entity-name", "bob")
    added = admin("kafka-configs", "--alter", *bob, "--add-config",
                  "SCRAM-SHA-512=[iterations=8192,password=bob-secret]")  # fmt: skip
    assert "Completed updating config for user bob." in added
    # Describing users asks for their quotas too (DescribeClientQuotas: kayak has none).
    described = admin("kafka-configs", "--describe", *bob)
    assert ("SCRAM credential configs for user-principal 'bob' are "
            "SCRAM-SHA-512=iterations=8192") in described, described  # fmt: skip
    everyone = admin("kafka-configs", "--describe", "--entity-type", "users")
    assert "user-principal 'bob'" in everyone and "user-principal 'app'" in everyone
    # bob logs in with the new credential (and sees no topic: no ACL names him).
    logged_in = as_user(
        kafka_tools, secured, "bob", "kafka-topics", "--list", password="bob-secret"
    )
    assert logged_in.strip() == "exit 0", logged_in
    wrong = as_user(kafka_tools, secured, "bob", "kafka-topics", "--list", password="not-bob")
    assert not wrong.startswith("exit 0") and "SaslAuthenticationException" in wrong
    assert "Completed updating config for user bob." in admin(
        "kafka-configs", "--alter", *bob, "--delete-config", "SCRAM-SHA-512"
    )
    assert "user-principal 'bob'" not in admin(
        "kafka-configs", "--describe", "--entity-type", "users"
    )
