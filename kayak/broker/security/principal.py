"""Kafka principals: ``User:alice``, as ACLs and ``super.users`` spell them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a connection authenticated as (``ANONYMOUS`` on a plaintext listener)."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        """``"User:alice"`` to a principal; ``ValueError`` naming the text if it has no type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"{text!r} is not a principal; write it as 'User:NAME'")
        return cls(kind, name)

    @classmethod
    def user(cls, name: str) -> Principal:
        return cls("User", name)


ANONYMOUS = Principal("User", "ANONYMOUS")
