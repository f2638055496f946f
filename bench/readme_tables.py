"""README's benchmark tables: every Markdown pipe table of a text, with the bench commands
quoted between the heading that introduces it and the table (the chart's footnote)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class MarkdownTable:
    header: tuple[str, ...]
    rows: list[list[str]] = field(default_factory=list)
    command: str = ""  # the bench command(s) written between the table's heading and it


_CODE = re.compile(r"`([^`]+)`")


def markdown_tables(text: str) -> list[MarkdownTable]:
    """Every pipe table of a Markdown text, with the bench commands quoted above it."""
    tables: list[MarkdownTable] = []
    lines = text.splitlines()
    since = 0  # where the text that introduces the next table starts
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith(("#", "**")):
            since = index
        if not (line.startswith("|") and index + 1 < len(lines)
                and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[index + 1].strip())):  # fmt: skip
            index += 1
            continue
        table = MarkdownTable(tuple(_cells(line)), command=_commands(lines[since:index]))
        index += 2
        while index < len(lines) and lines[index].startswith("|"):
            table.rows.append(_cells(lines[index]))
            index += 1
        tables.append(table)
        since = index
    return tables


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _commands(lines: Sequence[str]) -> str:
    spans = _CODE.findall(" ".join(line.strip() for line in lines))
    found = [s for s in spans if s.startswith((".venv/bin/python bench/", "… "))]
    return " and ".join(found)
