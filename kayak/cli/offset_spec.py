"""``kayak consume -o``: where to start (and stop) reading, spelled as kcat spells it.

``beginning``, ``end``, ``stored`` (the group's committed offset; needs ``-g``), ``N`` (an
absolute offset), ``-N`` (N records before the end), ``s@TS`` (the first record at or after
TS ms since the epoch) and ``e@TS`` (read from the start of the range chosen otherwise,
stopping before the first record at or after TS).
"""

from __future__ import annotations

from dataclasses import dataclass

import click

__all__ = ["OffsetSpec", "parse_offset_spec"]

_NAMED = ("beginning", "end", "stored")


@dataclass(frozen=True)
class OffsetSpec:
    """A parsed ``-o``: ``kind`` is one of beginning, end, stored, absolute, relative,
    timestamp, end_timestamp; ``value`` the number that goes with it."""

    kind: str
    value: int = 0

    @property
    def is_start(self) -> bool:
        """Whether this says where to start (every kind but ``e@TS``)."""
        return self.kind != "end_timestamp"


def parse_offset_spec(text: str) -> OffsetSpec:
    """``-o``'s value as an :class:`OffsetSpec`; ``click.BadParameter`` if it is none."""
    word = text.strip()
    if word in _NAMED:
        return OffsetSpec(word)
    prefix, at, number = word.partition("@")
    if at and prefix in ("s", "e"):
        stamp = _integer(number, word)
        if stamp < 0:
            raise click.BadParameter(
                f"{word!r}: a timestamp is ms since the epoch", param_hint="-o"
            )
        return OffsetSpec("timestamp" if prefix == "s" else "end_timestamp", stamp)
    value = _integer(word, word)
    if word.startswith("-"):
        return OffsetSpec("relative", -value)
    return OffsetSpec("absolute", value)


def _integer(text: str, whole: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(
            f"{whole!r} is not beginning, end, stored, N, -N, s@TS or e@TS", param_hint="-o"
        ) from None
