"""``kayak users``: add (password from the option, stdin or a prompt), list, delete, and the
one-line errors (unknown user, bad mechanism, missing data directory, damaged file)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kayak.broker.security.credentials import CREDENTIALS_FILE, SECURITY_DIR, CredentialStore
from kayak.cli.main import cli
from tests.cli.conftest import table_rows

pytestmark = pytest.mark.timeout(60)


def users(data_dir: Path, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["users", *args, "--data-dir", str(data_dir)], input=stdin)


def one_line_error(result: Result) -> str:
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


def test_add_list_delete(tmp_path: Path) -> None:
    assert users(tmp_path, "list").output.strip() == "no users"
    added = users(
        tmp_path, "add", "alice", "--password", "pw-alice", "--mechanism", "SCRAM-SHA-512"
    )
    assert added.exit_code == 0, added.output
    stdin = users(
        tmp_path, "add", "bob", "--password-stdin", "--iterations", "8192", stdin="pw-bob\n"
    )
    assert stdin.exit_code == 0, stdin.output
    prompted = users(tmp_path, "add", "carol", stdin="pw-carol\npw-carol\n")
    assert prompted.exit_code == 0, prompted.output
    assert "pw-carol" not in prompted.output  # hidden input

    listed = users(tmp_path, "list")
    assert listed.exit_code == 0
    assert "pw-" not in listed.output
    assert table_rows(listed.output) == [
        ["alice", "SCRAM-SHA-512", "4096"],
        ["bob", "SCRAM-SHA-256, SCRAM-SHA-512", "8192, 8192"],
        ["carol", "SCRAM-SHA-256, SCRAM-SHA-512", "4096, 4096"],
    ]
    store = CredentialStore.open(tmp_path)
    assert store.verify_password("bob", "pw-bob") and store.verify_password("carol", "pw-carol")
    assert not store.verify_password("alice", "pw-bob")

    # A second add changes the password.
    assert (
        users(
            tmp_path, "add", "alice", "--password", "new", "--mechanism", "scram-sha-512"
        ).exit_code
        == 0
    )
    assert store.verify_password("alice", "new") and not store.verify_password("alice", "pw-alice")

    assert users(tmp_path, "delete", "bob", "--mechanism", "SCRAM-SHA-256").exit_code == 0
    assert users(tmp_path, "delete", "carol").exit_code == 0
    assert table_rows(users(tmp_path, "list").output) == [
        ["alice", "SCRAM-SHA-512", "4096"],
        ["bob", "SCRAM-SHA-512", "8192"],
    ]


def test_errors_are_one_line(tmp_path: Path) -> None:
    assert users(tmp_path, "add", "alice", "--password", "pw").exit_code == 0
    assert "no user 'nobody'" in one_line_error(users(tmp_path, "delete", "nobody"))
    assert users(tmp_path, "delete", "alice", "--mechanism", "SCRAM-SHA-256").exit_code == 0
    again = users(tmp_path, "delete", "alice", "--mechanism", "SCRAM-SHA-256")
    assert "has no SCRAM-SHA-256" in one_line_error(again)
    bad = users(tmp_path, "add", "alice", "--password", "pw", "--mechanism", "SCRAM-SHA-1")
    assert bad.exit_code == 2 and "SCRAM-SHA-1" in bad.output
    few = users(tmp_path, "add", "alice", "--password", "pw", "--iterations", "100")
    assert few.exit_code == 2 and "4096" in few.output
    assert "empty" in one_line_error(users(tmp_path, "add", "dave", "--password-stdin", stdin="\n"))

    missing = tmp_path / "nowhere"
    for args in (("list",), ("add", "x", "--password", "pw"), ("delete", "x")):
        assert "does not exist" in one_line_error(users(missing, *args))
    assert not missing.exists()

    (tmp_path / SECURITY_DIR / CREDENTIALS_FILE).write_text("[]")
    for args in (("list",), ("add", "x", "--password", "pw"), ("delete", "alice")):
        assert CREDENTIALS_FILE in one_line_error(users(tmp_path, *args))
