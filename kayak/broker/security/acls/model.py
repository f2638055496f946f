"""Kafka's ACL model: who (principal, host) may or may not do what (operation) to which
resource (type, name, pattern). Numeric codes are Kafka's, as they travel on the wire."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Self

CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
WILDCARD = "*"  # any resource name (LITERAL pattern), any host
WILDCARD_PRINCIPAL = "User:*"


class _Named(IntEnum):
    """An enum parsed from its Kafka name in any case, with or without underscores."""

    @classmethod
    def parse(cls, text: str) -> Self:
        """``"Read"``, ``"read"`` or ``"READ"`` to the member; ``ValueError`` naming the choices."""
        wanted = text.strip().replace("-", "").replace("_", "").upper()
        for member in cls:
            if member.name.replace("_", "") == wanted:
                return member
        choices = ", ".join(m.name for m in cls if m.value > 1)
        raise ValueError(f"{text!r} is not one of {choices}")

    @classmethod
    def from_code(cls, code: int) -> Self:
        """The member with wire code ``code``; UNKNOWN (0) for a code Kafka does not define."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1  # filters: any pattern type, name compared literally
    MATCH = 2  # filters: every pattern that would match the name
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


# An ALLOW for any of these also allows the key (Kafka's implied operations).
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({
        AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
        AclOperation.DELETE, AclOperation.ALTER,
    }),
    AclOperation.DESCRIBE_CONFIGS: frozenset({
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    }),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """The resources an ACL applies to: one name (LITERAL, ``*`` for all) or a prefix."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this pattern covers the resource ``resource_type``/``name``."""
        if resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD

    def __str__(self) -> str:
        return f"{self.resource_type.name}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who, from where, may (ALLOW) or may not (DENY) do one operation."""

    principal: str  # "User:alice", or "User:*"
    host: str  # an IP address, or "*"
    operation: AclOperation
    permission: AclPermissionType

    def applies_to(self, principal: str, host: str) -> bool:
        return (self.principal == principal or self.principal == WILDCARD_PRINCIPAL) and (
            self.host == host or self.host == WILDCARD
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        e = self.entry
        return (
            f"{e.permission.name} {e.principal} from {e.host} {e.operation.name} on {self.pattern}"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select; None and ANY match everything.

    Pattern type MATCH selects every ACL that applies to the named resource: the literal
    name, the ``*`` wildcard, and every prefix of it.
    """

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding.pattern) and self._matches_entry(binding.entry)

    def _matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not (
            pattern.resource_type
        ):
            return False
        if self.pattern_type is PatternType.MATCH:
            return self.name is None or pattern.matches(pattern.resource_type, self.name)
        if self.pattern_type is not PatternType.ANY and self.pattern_type is not (
            pattern.pattern_type
        ):
            return False
        return self.name is None or self.name == pattern.name

    def _matches_entry(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and (self.operation is AclOperation.ANY or self.operation is entry.operation)
            and (self.permission is AclPermissionType.ANY or self.permission is entry.permission)
        )


def validate_binding(binding: AclBinding) -> str | None:
    """Why Kafka would refuse to store ``binding`` (INVALID_REQUEST), or None."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"invalid resource type {pattern.resource_type.name}"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"invalid pattern type {pattern.pattern_type.name}: use LITERAL or PREFIXED"
    if not pattern.name:
        return "invalid empty resource name"
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"invalid operation {entry.operation.name}"
    if entry.permission in (AclPermissionType.UNKNOWN, AclPermissionType.ANY):
        return f"invalid permission type {entry.permission.name}"
    kind, sep, name = entry.principal.partition(":")
    if not sep or not kind or not name:
        return f"invalid principal {entry.principal!r}: write it as 'User:NAME'"
    if not entry.host:
        return "invalid empty host: use '*' for every host"
    return None
