"""Decides whether a principal may do an operation on a resource, as Kafka's ACL authorizer.

The rules, in order:

1. A super user (``super.users``) may do everything.
2. The ACLs that apply to the resource are those on its exact name, on ``*``, and every
   PREFIXED pattern the name starts with, whoever they are for.
3. If there are none, ``allow.everyone.if.no.acl.found`` decides.
4. A DENY for the principal (or ``User:*``) from its host (or ``*``) for the operation (or
   ALL) refuses: DENY wins over ALLOW.
5. Otherwise an ALLOW for the operation or ALL admits, and so does an ALLOW for an
   operation that implies it (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS
   implies DESCRIBE_CONFIGS).

With no ACL stored at all the answer costs a clock read and a truth test; answers are cached
per (principal, host, operation, resource) until the ACLs change.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from kayak.broker.security.acls.model import (
    IMPLIED_BY,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kayak.broker.security.acls.store import AclStore
from kayak.broker.security.principal import ANONYMOUS

if TYPE_CHECKING:
    from kayak.broker.config import BrokerConfig
    from kayak.broker.security.session import ConnectionSession

# How often (seconds) the ACL file is checked for changes made by other processes (other
# shards, ``kayak acls``); changes made through this broker apply at once.
RELOAD_INTERVAL = 0.25
_CACHE_LIMIT = 100_000
_ALLOW, _DENY = AclPermissionType.ALLOW, AclPermissionType.DENY

_CacheKey = tuple[str, str, AclOperation, ResourceType, str]


class Authorizer:
    """ACL decisions for one broker process, over an :class:`AclStore`."""

    def __init__(
        self, store: AclStore, super_users: Iterable[str] = (), allow_everyone: bool = False
    ) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone = allow_everyone
        self._next_reload = 0.0
        self._cache: dict[_CacheKey, bool] = {}
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[ResourceType, list[AclBinding]] = {}
        self._index()

    @classmethod
    def open(cls, data_dir: Path, config: BrokerConfig) -> Authorizer:
        """The authorizer for a broker: its data directory's ACLs and its settings."""
        return cls(
            AclStore.open(Path(data_dir)),
            super_users=config.super_users,
            allow_everyone=config.allow_everyone_without_acls,
        )

    # -- decisions ----------------------------------------------------------------------

    def authorize(
        self,
        session: ConnectionSession | None,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether the session's principal, from its host, may do ``operation`` on the resource."""
        if session is None:
            return self.allowed(str(ANONYMOUS), "", operation, resource_type, name)
        return self.allowed(
            str(session.principal), session.client_host, operation, resource_type, name
        )

    def allowed(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the resource."""
        self._maybe_reload()
        if not self.store.bindings:
            return self.allow_everyone or principal in self.super_users
        key = (principal, host, operation, resource_type, name)
        found = self._cache.get(key)
        if found is None:
            found = self._decide(principal, host, operation, resource_type, name)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = found
        return found

    def allowed_on_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``operation`` is allowed on at least one resource of the type (Kafka's
        ``authorizeByResourceType``, used for IDEMPOTENT_WRITE through WRITE on any topic).

        True when some ALLOW pattern for the principal is not wholly covered by its DENYs.
        """
        # A name no ACL is about: answers for super users and for "no ACLs, open".
        if self.allowed(principal, host, operation, resource_type, "\x00kayak-any"):
            return True
        allow_literal: set[str] = set()
        allow_prefix: set[str] = set()
        deny_literal: set[str] = set()
        deny_prefix: set[str] = set()
        for binding in self.store.bindings:
            entry, pattern = binding.entry, binding.pattern
            if pattern.resource_type is not resource_type or not entry.applies_to(principal, host):
                continue
            if entry.operation is not operation and entry.operation is not AclOperation.ALL:
                continue
            prefixed = pattern.pattern_type is PatternType.PREFIXED
            if entry.permission is _DENY:
                (deny_prefix if prefixed else deny_literal).add(pattern.name)
            else:
                (allow_prefix if prefixed else allow_literal).add(pattern.name)
        if WILDCARD in deny_literal:
            return False

        def covered(name: str) -> bool:
            return any(name.startswith(prefix) for prefix in deny_prefix)

        if any(n not in deny_literal and not covered(n) for n in allow_literal):
            return True
        return any(not covered(prefix) for prefix in allow_prefix)

    def _decide(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        acls = self._applying(resource_type, name)
        if not acls:
            return self.allow_everyone
        mine = [b.entry for b in acls if b.entry.applies_to(principal, host)]
        everything = AclOperation.ALL
        if any(e.permission is _DENY and e.operation in (operation, everything) for e in mine):
            return False
        granting = IMPLIED_BY.get(operation, frozenset({operation})) | {everything}
        return any(e.permission is _ALLOW and e.operation in granting for e in mine)

    def _applying(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        acls = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            acls.extend(self._literal.get((resource_type, WILDCARD), ()))
        acls.extend(
            b for b in self._prefixed.get(resource_type, ()) if name.startswith(b.pattern.name)
        )
        return acls

    # -- the ACLs -----------------------------------------------------------------------

    def acls(self, wanted: AclBindingFilter | None = None) -> list[AclBinding]:
        """The stored ACLs ``wanted`` selects (every one without a filter)."""
        self.refresh()
        return self.store.matching(wanted or AclBindingFilter())

    def create(self, bindings: Iterable[AclBinding]) -> None:
        """Store ACLs; they apply at once here and within RELOAD_INTERVAL in other shards."""
        self.store.add(bindings)
        self._index()

    def delete(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Delete what the filters match; per filter, the ACLs it deleted."""
        matched = self.store.remove(filters)
        self._index()
        return matched

    def refresh(self) -> None:
        """Pick up changes another process made to the ACL file now."""
        if self.store.reload():
            self._index()
        self._next_reload = time.monotonic() + RELOAD_INTERVAL

    def _maybe_reload(self) -> None:
        if time.monotonic() >= self._next_reload:
            self.refresh()

    def _index(self) -> None:
        self._cache.clear()
        self._literal.clear()
        self._prefixed.clear()
        for binding in self.store.bindings:
            pattern = binding.pattern
            if pattern.pattern_type is PatternType.PREFIXED:
                self._prefixed.setdefault(pattern.resource_type, []).append(binding)
            else:
                self._literal.setdefault((pattern.resource_type, pattern.name), []).append(binding)
