"""The SCRAM credential store: what it keeps (never a password), durability across a killed
broker, sharing with other processes (the CLI, shards), and a damaged file."""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kayak.broker.security.credentials import (
    CREDENTIALS_FILE,
    SECURITY_DIR,
    CredentialFileError,
    CredentialStore,
    UserChange,
)
from kayak.broker.server import Broker
from kayak.protocol.sasl.scram import ScramClient, ScramServer
from tests.broker.conftest import BrokerProcess

pytestmark = pytest.mark.timeout(60)

PASSWORD = "correct horse battery staple"


def credentials_path(data_dir: Path) -> Path:
    return data_dir / SECURITY_DIR / CREDENTIALS_FILE


def scram_login(store: CredentialStore, mechanism: str, user: str, password: str) -> bool:
    """A whole SCRAM exchange against the store's credential (no network)."""
    client = ScramClient(mechanism, user, password)
    server = ScramServer(mechanism, lambda name: store.scram(name, mechanism))
    try:
        final = server.server_final(
            client.final_message(server.server_first(client.first_message()))
        )
        client.check_server_final(final)
    except Exception:
        return False
    return True


def test_stores_salted_keys_never_the_password(tmp_path: Path) -> None:
    store = CredentialStore.open(tmp_path)
    store.upsert("alice", "SCRAM-SHA-256", password=PASSWORD)
    store.upsert("alice", "SCRAM-SHA-512", password=PASSWORD, iterations=8192)
    text = credentials_path(tmp_path).read_text()
    assert PASSWORD not in text
    entry = json.loads(text)["users"]["alice"]
    assert set(entry) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert set(entry["SCRAM-SHA-512"]) == {"salt", "iterations", "stored_key", "server_key"}
    assert stat.S_IMODE(credentials_path(tmp_path).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / SECURITY_DIR).stat().st_mode) == 0o700

    reopened = CredentialStore.open(tmp_path)
    assert reopened.users() == {"alice": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)]}
    assert reopened.verify_password("alice", PASSWORD)
    assert not reopened.verify_password("alice", PASSWORD + "!")
    assert not reopened.verify_password("bob", PASSWORD)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        assert scram_login(reopened, mechanism, "alice", PASSWORD)
        assert not scram_login(reopened, mechanism, "alice", "wrong")


def test_delete_and_refusals(tmp_path: Path) -> None:
    store = CredentialStore.open(tmp_path)
    store.upsert("alice", "SCRAM-SHA-256", password=PASSWORD)
    with pytest.raises(ValueError, match="iterations"):
        store.upsert("alice", "SCRAM-SHA-256", password=PASSWORD, iterations=1000)
    with pytest.raises(ValueError, match="SCRAM-SHA-1"):
        store.upsert("alice", "SCRAM-SHA-1", password=PASSWORD)
    with pytest.raises(ValueError, match="empty"):
        store.upsert("", "SCRAM-SHA-256", password=PASSWORD)
    assert not store.delete("alice", "SCRAM-SHA-512")
    assert store.delete("alice", "SCRAM-SHA-256")
    assert store.users() == {}
    assert not store.verify_password("alice", PASSWORD)
    # A change deleting a credential the user lacks leaves that user as it was.
    store.upsert("bob", "SCRAM-SHA-256", password=PASSWORD)
    missing = store.apply([UserChange("bob", deletions=("SCRAM-SHA-256", "SCRAM-SHA-512"))])
    assert missing == {"bob"}
    assert store.verify_password("bob", PASSWORD)


def test_missing_data_dir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        CredentialStore.open(tmp_path / "nowhere")


def test_a_damaged_file_is_a_clear_error_never_an_empty_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = CredentialStore.open(tmp_path)
    store.upsert("alice", "SCRAM-SHA-256", password=PASSWORD)
    path = credentials_path(tmp_path)
    good = path.read_text()
    path.write_text(good[: len(good) // 2])  # torn by hand: writes are atomic
    with pytest.raises(CredentialFileError, match=str(path)):
        CredentialStore.open(tmp_path)
    # A store already open keeps what it had and says why, once.
    with caplog.at_level(logging.ERROR):
        assert store.verify_password("alice", PASSWORD)
        assert store.scram("alice", "SCRAM-SHA-256") is not None
    assert sum(str(path) in r.getMessage() for r in caplog.records) == 1
    # ... and never overwrites the damaged file with what it remembers.
    with pytest.raises(CredentialFileError):
        store.upsert("bob", "SCRAM-SHA-256", password=PASSWORD)
    entry = json.loads(good)
    entry["users"]["alice"]["SCRAM-SHA-256"]["stored_key"] = "not base64!"
    path.write_text(json.dumps(entry))
    with pytest.raises(CredentialFileError, match="stored_key"):
        CredentialStore.open(tmp_path)


def test_a_broker_refuses_to_start_on_a_damaged_file(tmp_path: Path) -> None:
    credentials_path(tmp_path).parent.mkdir(parents=True)
    credentials_path(tmp_path).write_text("{not json")

    async def start() -> None:
        broker = Broker(tmp_path, port=0, schema_registry_port=None)
        try:
            await broker.start()
        finally:
            await broker.stop()

    with pytest.raises(CredentialFileError, match=CREDENTIALS_FILE):
        asyncio.run(start())


def _add_users(data_dir: str, prefix: str, count: int) -> None:
    store = CredentialStore.open(data_dir)
    for i in range(count):
        store.upsert(f"{prefix}{i}", "SCRAM-SHA-256", password=f"pw-{prefix}{i}")


def test_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_add_users, args=(str(tmp_path), p, 8)) for p in "abcd"]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(30)
        assert writer.exitcode == 0
    users = CredentialStore.open(tmp_path).users()
    assert sorted(users) == sorted(f"{p}{i}" for p in "abcd" for i in range(8))


def alter_over_the_wire(bootstrap: str, user: str, password: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, password.encode())]
    )
    for future in futures.values():
        future.result(15)


def described(bootstrap: str) -> dict[str, list[tuple[str, int]]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.describe_user_scram_credentials().result(15)
    return {
        user: sorted((i.mechanism.name, i.iterations) for i in d.scram_credential_infos)
        for user, d in result.items()
    }


def test_credentials_survive_a_killed_broker(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        alter_over_the_wire(broker.bootstrap_servers, "alice", PASSWORD)
        assert broker.stop(signal.SIGKILL) == -signal.SIGKILL
        store = CredentialStore.open(tmp_path / "data")
        assert store.verify_password("alice", PASSWORD)
        broker.restart()
        assert described(broker.bootstrap_servers) == {"alice": [("SCRAM_SHA_512", 4096)]}
    finally:
        if broker.process is not None:
            broker.stop()


def test_a_running_broker_sees_users_the_cli_adds(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        assert described(broker.bootstrap_servers) == {}
        added = subprocess.run(
            [sys.executable, "-m", "kayak", "users", "add", "carol", "--password-stdin",
             "--mechanism", "SCRAM-SHA-256", "--data-dir", str(tmp_path / "data")],
            input=PASSWORD + "\n", capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert described(broker.bootstrap_servers) == {"carol": [("SCRAM_SHA_256", 4096)]}
        # ... and the broker's own writes keep the CLI's user.
        alter_over_the_wire(broker.bootstrap_servers, "dave", PASSWORD)
        assert set(CredentialStore.open(tmp_path / "data").users()) == {"carol", "dave"}
    finally:
        broker.stop()
