"""The base every generated Kafka message derives from.

Generated modules (``kayak.protocol.messages``) hold one class per request, response, header
or data record, plus straight-line writer and reader functions for each distinct wire layout.
The classes are plain slotted classes with a generated ``__init__``, not dataclasses: a
dataclass is built by ``exec`` at import, about 1 ms each, and the broker imports hundreds
of them at every start. ``Struct`` gives them what the dataclass did (equality, repr,
``replace``); ``Message`` only dispatches on version and turns low-level failures into kayak
errors.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, ClassVar, TypeVar

from kayak.errors import EncodeError, MalformedMessageError, UnsupportedVersionError

Buffer = bytes | bytearray | memoryview
Writer = Callable[[bytearray, Any], None]
Reader = Callable[[Buffer, int], tuple[Any, int]]
M = TypeVar("M", bound="Message")
S = TypeVar("S", bound="Struct")

# What straight-line code raises when handed bytes that lie about themselves or values that do
# not fit their wire types; the generated readers and writers do not check each step.
_DECODE_FAILURES = (struct.error, ValueError, IndexError, OverflowError)
_ENCODE_FAILURES = (struct.error, TypeError, AttributeError, OverflowError, UnicodeEncodeError)


class Default(Enum):
    """The default of a field whose default is a new list or struct. Not None: None is a
    value of its own where the field is nullable (a null array is "every topic" in a
    MetadataRequest), and an encoding error where it is not."""

    FRESH = 0


class Struct:
    """A generated struct: its fields are ``FIELDS``, compared and printed by value."""

    __slots__ = ()

    FIELDS: ClassVar[tuple[str, ...]] = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.FIELDS)

    # Mutable, as the dataclasses were: equal by value, so not hashable.
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"{type(self).__name__}({values})"

    def replace(self: S, **changes: Any) -> S:
        """A copy with ``changes`` applied (the other fields shared, not copied)."""
        unknown = changes.keys() - set(self.FIELDS)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        values = {name: getattr(self, name) for name in self.FIELDS}
        values.update(changes)
        return type(self)(**values)


class Message(Struct):
    """A Kafka protocol message: encode at a version, decode from bytes at a version."""

    __slots__ = ()

    NAME: ClassVar[str]
    API_KEY: ClassVar[int]
    MESSAGE_TYPE: ClassVar[str]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    FLEXIBLE_VERSION: ClassVar[int | None]
    _WRITERS: ClassVar[Mapping[int, Writer]]
    _READERS: ClassVar[Mapping[int, Reader]]

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        """Whether ``version`` uses compact encodings and tagged fields (KIP-482)."""
        return cls.FLEXIBLE_VERSION is not None and version >= cls.FLEXIBLE_VERSION

    @classmethod
    def _unsupported(cls, version: int) -> UnsupportedVersionError:
        return UnsupportedVersionError(
            f"{cls.NAME} has no version {version} (valid: {cls.MIN_VERSION}-{cls.MAX_VERSION})"
        )

    def write(self, out: bytearray, version: int) -> None:
        """Append this message's encoding at ``version`` to ``out``."""
        writer = self._WRITERS.get(version)
        if writer is None:
            raise self._unsupported(version)
        try:
            writer(out, self)
        except _ENCODE_FAILURES as exc:
            raise EncodeError(f"cannot encode {self.NAME} v{version}: {exc}") from exc

    def encode(self, version: int) -> bytes:
        """Return this message's encoding at ``version``."""
        out = bytearray()
        self.write(out, version)
        return bytes(out)

    @classmethod
    def read(cls: type[M], buf: Buffer, pos: int, version: int) -> tuple[M, int]:
        """Decode one message at ``version`` starting at ``pos``; returns it and the end."""
        reader = cls._READERS.get(version)
        if reader is None:
            raise cls._unsupported(version)
        try:
            msg, end = reader(buf, pos)
        except _DECODE_FAILURES as exc:
            raise MalformedMessageError(f"cannot decode {cls.NAME} v{version}: {exc}") from exc
        return msg, end

    @classmethod
    def decode(cls: type[M], data: Buffer, version: int) -> M:
        """Decode a whole buffer holding one message at ``version``."""
        msg, _ = cls.read(data, 0, version)
        return msg
