"""ACLs kept durably in ``DATA_DIR/acls.json``, shared by every shard and the CLI.

Every change is a read-modify-write under an exclusive ``flock`` and lands through an atomic,
fsynced rename, so a crash leaves the old set or the new one and concurrent writers never
lose each other's changes. Readers notice another process's change by the file's identity
(inode, size, modification time): a rename always makes a new inode.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kayak.broker.log.files import exclusive_lock, write_atomically
from kayak.broker.security.acls.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

log = logging.getLogger(__name__)

ACL_FILE = "acls.json"
LOCK_FILE = "acls.lock"
_FORMAT_VERSION = 1

_FileIdentity = tuple[int, int, int]  # inode, size, mtime_ns


class AclStoreError(ValueError):
    """The ACL file exists but cannot be read as ACLs."""


class AclStore:
    """The ACL set on disk and the copy last read from it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._bindings: tuple[AclBinding, ...] = ()
        self._identity: _FileIdentity | None = None

    @classmethod
    def open(cls, data_dir: Path) -> AclStore:
        """The store of ``data_dir`` with its ACLs loaded (AclStoreError if unreadable)."""
        store = cls(Path(data_dir))
        store.reload(strict=True)
        return store

    @property
    def path(self) -> Path:
        return self.data_dir / ACL_FILE

    @property
    def bindings(self) -> tuple[AclBinding, ...]:
        """Every ACL as last read."""
        return self._bindings

    # -- reading ------------------------------------------------------------------------

    def reload(self, strict: bool = False) -> bool:
        """Reread the file if it changed since the last read; True if the ACLs were replaced.

        A file that cannot be parsed raises with ``strict`` (opening); otherwise the last
        good ACLs stay in force and one error line is logged.
        """
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            if self._identity is None and not self._bindings:
                return False
            self._bindings, self._identity = (), None
            return True
        identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if identity == self._identity:
            return False
        try:
            bindings = _parse(self.path.read_text())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            message = f"{self.path} holds no valid ACLs: {exc}"
            if strict:
                raise AclStoreError(message) from exc
            log.error("%s; keeping the ACLs read before", message)
            self._identity = identity
            return False
        self._bindings, self._identity = bindings, identity
        return True

    def matching(self, wanted: AclBindingFilter) -> list[AclBinding]:
        return [binding for binding in self._bindings if wanted.matches(binding)]

    # -- changes ------------------------------------------------------------------------

    def add(self, bindings: Iterable[AclBinding]) -> None:
        """Store ``bindings`` (one already stored is left as it is)."""
        wanted = list(dict.fromkeys(bindings))
        if not wanted:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(self.data_dir / LOCK_FILE):
            self.reload(strict=True)
            current = list(self._bindings)
            known = set(current)
            added = [b for b in wanted if b not in known]
            if not added:
                return
            self._save(current + added)
        for binding in added:
            log.info("ACL added: %s", binding)

    def remove(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Delete every ACL any filter matches; per filter, the ACLs it matched."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(self.data_dir / LOCK_FILE):
            self.reload(strict=True)
            matched = [self.matching(f) for f in filters]
            doomed = {binding for found in matched for binding in found}
            if doomed:
                self._save([b for b in self._bindings if b not in doomed])
        for binding in doomed:
            log.info("ACL removed: %s", binding)
        return matched

    def _save(self, bindings: list[AclBinding]) -> None:
        document = {"version": _FORMAT_VERSION, "acls": [_to_json(b) for b in bindings]}
        write_atomically(self.path, json.dumps(document, indent=1) + "\n")
        stat = os.stat(self.path)
        self._bindings = tuple(bindings)
        self._identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _to_json(binding: AclBinding) -> dict[str, str]:
    pattern, entry = binding.pattern, binding.entry
    return {
        "resource_type": pattern.resource_type.name,
        "resource_name": pattern.name,
        "pattern_type": pattern.pattern_type.name,
        "principal": entry.principal,
        "host": entry.host,
        "operation": entry.operation.name,
        "permission_type": entry.permission.name,
    }


def _parse(text: str) -> tuple[AclBinding, ...]:
    document: Any = json.loads(text)
    if not isinstance(document, dict) or document.get("version") != _FORMAT_VERSION:
        raise ValueError(f"expected an object with version {_FORMAT_VERSION}")
    return tuple(_from_json(entry) for entry in document["acls"])


def _from_json(entry: dict[str, str]) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            ResourceType[entry["resource_type"]],
            str(entry["resource_name"]),
            PatternType[entry["pattern_type"]],
        ),
        AccessControlEntry(
            str(entry["principal"]),
            str(entry["host"]),
            AclOperation[entry["operation"]],
            AclPermissionType[entry["permission_type"]],
        ),
    )
