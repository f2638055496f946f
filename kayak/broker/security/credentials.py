"""SCRAM credentials, stored as Kafka stores them, in one durable file under the data dir.

``security/credentials.json`` holds, per user and mechanism (SCRAM-SHA-256, SCRAM-SHA-512),
the salt, the iteration count, StoredKey and ServerKey: never the password, nothing a client
could log in with. PLAIN and HTTP basic authentication check a password against the same
credential by salting it again with the stored salt and iterations.

Every process using a data directory shares the file: the broker's shards and the
``kayak users`` command, possibly while a broker runs. Writers re-read, change and replace it
under an exclusive ``flock`` (``credentials.lock``); the replacement is atomic and fsynced,
so a crash leaves the old or the new content. Readers notice a new file by its inode, size
and modification time and load it again, so a user added by the CLI or another shard can log
in without a restart.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kayak.broker.log.files import exclusive_lock, fsync_directory, write_atomically
from kayak.errors import KayakError
from kayak.protocol.sasl.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramCredential,
    credential_from_salted_password,
    password_matches,
    scram_credential,
)

log = logging.getLogger(__name__)

SECURITY_DIR = "security"
CREDENTIALS_FILE = "credentials.json"
_LOCK_FILE = "credentials.lock"
_FORMAT_VERSION = 1

# Kafka's AlterUserScramCredentials codes for the mechanisms (0 is UNKNOWN).
MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {code: name for name, code in MECHANISM_TYPES.items()}

_Users = dict[str, dict[str, ScramCredential]]


class CredentialFileError(KayakError):
    """The credentials file exists but cannot be read as one; names the file and the fault."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"credentials file {path} is damaged: {problem}")
        self.path = path


@dataclass(frozen=True, slots=True)
class UserChange:
    """Everything one AlterUserScramCredentials request does to one user: applied together
    or not at all."""

    user: str
    upsertions: tuple[ScramCredential, ...] = ()
    deletions: tuple[str, ...] = ()  # mechanisms


@dataclass(eq=False)
class CredentialStore:
    """The SCRAM users of one data directory; see the module docstring.

    Reads come from memory, refreshed when the file changed (one ``stat`` per lookup).
    Writes take the cross-process lock, so call them off the event loop in the broker
    (``asyncio.to_thread``): they fsync.
    """

    directory: Path
    _users: _Users = field(default_factory=dict, repr=False)
    _seen: tuple[int, int, int] | None = field(default=None, repr=False)
    _damaged: tuple[int, int, int] | None = field(default=None, repr=False)
    _mutex: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def path(self) -> Path:
        return self.directory / CREDENTIALS_FILE

    @classmethod
    def open(cls, data_dir: str | Path) -> CredentialStore:
        """The store of ``data_dir`` (empty if no user was ever added).

        Raises ``CredentialFileError`` if the file is damaged, and ``FileNotFoundError`` if
        ``data_dir`` itself does not exist.
        """
        data_dir = Path(data_dir)
        if not data_dir.is_dir():
            raise FileNotFoundError(f"data directory {data_dir} does not exist")
        store = cls(data_dir / SECURITY_DIR)
        store._refresh(strict=True)
        return store

    # -- reading --------------------------------------------------------------------------

    def scram(self, user: str, mechanism: str) -> ScramCredential | None:
        """``user``'s credential for ``mechanism`` (None: no such user or mechanism)."""
        self._refresh()
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, list[tuple[str, int]]]:
        """Every user with its mechanisms and iteration counts, sorted by name."""
        self._refresh()
        return {
            user: [(m, c.iterations) for m, c in sorted(creds.items())]
            for user, creds in sorted(self._users.items())
        }

    def verify_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (for SASL PLAIN and HTTP basic).

        Checked against the strongest SCRAM credential the user has. Costs one PBKDF2 run
        (milliseconds): call it off the event loop.
        """
        self._refresh()
        credentials = self._users.get(user, {})
        credential = credentials.get("SCRAM-SHA-512") or credentials.get("SCRAM-SHA-256")
        if credential is None:
            password_matches(_decoy(), password)  # as long as a real check: no user oracle
            return False
        return password_matches(credential, password)

    # -- writing --------------------------------------------------------------------------

    def upsert(
        self,
        user: str,
        mechanism: str,
        *,
        password: str | None = None,
        salt: bytes | None = None,
        salted_password: bytes | None = None,
        iterations: int = MIN_ITERATIONS,
    ) -> None:
        """Add or replace ``user``'s credential for ``mechanism``, durably.

        Give ``password`` (salted here, with ``salt`` or a fresh random one), or ``salt``
        and ``salted_password`` (what AlterUserScramCredentials carries). ``ValueError`` for
        an empty user name, an unknown mechanism, or iterations outside 4096..16384.
        """
        credential = make_credential(
            user,
            mechanism,
            password=password,
            salt=salt,
            salted_password=salted_password,
            iterations=iterations,
        )
        self.apply([UserChange(user, upsertions=(credential,))])

    def delete(self, user: str, mechanism: str) -> bool:
        """Remove ``user``'s ``mechanism`` credential; False if there was none."""
        return not self.apply([UserChange(user, deletions=(mechanism,))])

    def apply(self, changes: Iterable[UserChange]) -> set[str]:
        """Apply several users' changes in one durable write.

        A user whose change deletes a credential it does not have is left untouched; those
        users are returned. The others' changes all take effect.
        """
        changes = list(changes)
        self._make_directory()
        with exclusive_lock(self.directory / _LOCK_FILE):
            with self._mutex:
                self._load_locked()
                users = {user: dict(creds) for user, creds in self._users.items()}
            missing: set[str] = set()
            for change in changes:
                current = dict(users.get(change.user, {}))
                if any(mechanism not in current for mechanism in change.deletions):
                    missing.add(change.user)
                    continue
                for mechanism in change.deletions:
                    del current[mechanism]
                for credential in change.upsertions:
                    current[credential.mechanism] = credential
                if current:
                    users[change.user] = current
                else:
                    users.pop(change.user, None)
            if len(missing) < len(changes):
                self._write_locked(users)
        return missing

    # -- the file -------------------------------------------------------------------------

    def _make_directory(self) -> None:
        """``security/``, private to the broker's user; its creation made durable too."""
        if self.directory.is_dir():
            return
        self.directory.mkdir(mode=0o700, exist_ok=True)
        fsync_directory(self.directory.parent)

    def _refresh(self, strict: bool = False) -> None:
        with self._mutex:
            try:
                self._load_locked()
            except CredentialFileError as exc:
                if strict:
                    raise
                # A running broker keeps the users it had rather than locking everyone out
                # or letting everyone in; writers refuse until the file is repaired.
                if self._damaged != self._stat_key():
                    self._damaged = self._stat_key()
                    log.error("%s; keeping the SCRAM credentials loaded before", exc)

    def _stat_key(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def _load_locked(self) -> None:
        seen = self._stat_key()
        if seen is None:
            self._users, self._seen = {}, None
            return
        if seen == self._seen:
            return
        try:
            text = self.path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CredentialFileError(self.path, str(exc)) from exc
        self._users, self._seen = _decode(self.path, text), seen

    def _write_locked(self, users: _Users) -> None:
        text = json.dumps(_encode(users), indent=2, sort_keys=True) + "\n"
        write_atomically(self.path, text)  # fsyncs the file and the directory
        os.chmod(self.path, 0o600)
        with self._mutex:
            self._users, self._seen = users, self._stat_key()


@functools.cache
def _decoy() -> ScramCredential:
    return scram_credential("SCRAM-SHA-512", "decoy", salt=b"kayak-decoy-salt")


def make_credential(
    user: str,
    mechanism: str,
    *,
    password: str | None = None,
    salt: bytes | None = None,
    salted_password: bytes | None = None,
    iterations: int = MIN_ITERATIONS,
) -> ScramCredential:
    """The stored form of a password or salted password; ``ValueError`` saying what is wrong."""
    if not user:
        raise ValueError("the user name must not be empty")
    if mechanism not in SCRAM_MECHANISMS:
        raise ValueError(f"{mechanism!r} is not one of {', '.join(SCRAM_MECHANISMS)}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, not {iterations}"
        )
    if password is not None:
        if salted_password is not None:
            raise ValueError("give a password or a salted password, not both")
        if not password:
            raise ValueError("the password must not be empty")
        return scram_credential(mechanism, password, salt=salt, iterations=iterations)
    if not salt or not salted_password:
        raise ValueError("a credential needs a password, or a salt and a salted password")
    expected = _digest_size(mechanism)
    if len(salted_password) != expected:
        raise ValueError(
            f"a {mechanism} salted password is {expected} bytes, not {len(salted_password)}"
        )
    return credential_from_salted_password(mechanism, salted_password, salt, iterations)


def _digest_size(mechanism: str) -> int:
    return 32 if mechanism == "SCRAM-SHA-256" else 64


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _encode(users: _Users) -> dict[str, Any]:
    return {
        "version": _FORMAT_VERSION,
        "users": {
            user: {
                mechanism: {
                    "salt": _b64(c.salt),
                    "iterations": c.iterations,
                    "stored_key": _b64(c.stored_key),
                    "server_key": _b64(c.server_key),
                }
                for mechanism, c in creds.items()
            }
            for user, creds in users.items()
        },
    }


def _decode(path: Path, text: str) -> _Users:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise CredentialFileError(path, f"not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("version") != _FORMAT_VERSION:
        raise CredentialFileError(path, f"not a version {_FORMAT_VERSION} credentials document")
    entries = document.get("users")
    if not isinstance(entries, dict):
        raise CredentialFileError(path, "'users' is not an object")
    users: _Users = {}
    for user, creds in entries.items():
        if not isinstance(creds, dict) or not user:
            raise CredentialFileError(path, f"user {user!r} is not an object of mechanisms")
        users[user] = {
            mechanism: _decode_credential(path, user, mechanism, entry)
            for mechanism, entry in creds.items()
        }
    return users


def _decode_credential(path: Path, user: str, mechanism: str, entry: Any) -> ScramCredential:
    where = f"user {user!r} {mechanism}"
    if mechanism not in SCRAM_MECHANISMS:
        raise CredentialFileError(path, f"{where}: unknown mechanism")
    if not isinstance(entry, dict):
        raise CredentialFileError(path, f"{where} is not an object")
    iterations = entry.get("iterations")
    if not isinstance(iterations, int) or iterations < MIN_ITERATIONS:
        raise CredentialFileError(path, f"{where}: bad iteration count {iterations!r}")
    values: dict[str, bytes] = {}
    for name in ("salt", "stored_key", "server_key"):
        raw = entry.get(name)
        try:
            if not isinstance(raw, str):
                raise ValueError
            values[name] = base64.b64decode(raw, validate=True)
        except (ValueError, binascii.Error):
            raise CredentialFileError(path, f"{where}: {name} is not base64") from None
    size = _digest_size(mechanism)
    if len(values["stored_key"]) != size or len(values["server_key"]) != size:
        raise CredentialFileError(path, f"{where}: keys are not {size} bytes")
    return ScramCredential(
        mechanism, values["salt"], iterations, values["stored_key"], values["server_key"]
    )
