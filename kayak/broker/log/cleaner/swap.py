"""Putting a cleaned group in place of the segments it replaces, crash-safely, and finishing
or undoing an interrupted replacement at the next start.

The files of a group with base offset ``B`` (as Kafka's ``LocalLog.replaceSegments``):

1. ``B.log.cleaned`` and its ``.index``/``.timeindex``/``.txnindex.cleaned``: written and
   fsynced by the cleaning (:mod:`.rewrite`);
2. the companions renamed ``.cleaned`` → ``.swap``, the directory fsynced; then
   ``B.log.cleaned`` → ``B.log.swap``, the directory fsynced. **This rename commits the
   replacement**: from here on a start finishes it, before it a start undoes it;
3. the replaced segments other than ``B`` deleted (all their files), the directory fsynced;
4. each ``B.*.swap`` renamed over ``B.*``, ``B.log.swap`` last.

At a start (:func:`recover_swaps`, before segments are listed), each ``B.log.swap`` is
finished: every segment with a base offset inside its offsets is deleted, its ``.swap``
files renamed into place. Any ``.cleaned`` file, and any ``.swap`` without a
``B.log.swap``, is what an uncommitted cleaning left, and is deleted: the old segments are
whole. A cleaned group covers exactly the offsets of the segments it replaces (see
:mod:`.batches`), so either way the log's offsets stay continuous.

``KAYAK_CLEANER_CRASH_AT=<step>`` (a test-only fault) makes the process kill itself with
SIGKILL at that step of :func:`commit_swap`: one of :data:`STEPS`.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

from kayak.broker.log.cleaner.rewrite import CLEANED, COMPANIONS, CleanedGroup, segment_path
from kayak.broker.log.files import fsync_directory, remove_quietly
from kayak.protocol.records.record import BATCH_HEADER, BATCH_HEADER_SIZE, MAGIC_V2

log = logging.getLogger(__name__)

SWAP = ".swap"
CRASH_ENV = "KAYAK_CLEANER_CRASH_AT"
STEPS = (
    "cleaned",  # .cleaned files written, nothing renamed
    "companions-swapped",  # index files are .swap, the log still .cleaned
    "log-swapped",  # committed: B.log.swap exists, old segments untouched
    "sources-deleted",  # old segments (but B's) deleted
    "companions-renamed",  # B.index etc. are the new ones; B.log.swap not yet renamed
    "done",  # everything in place
)
_SEGMENT_FILES = (".log", *COMPANIONS)


def crash_point(step: str) -> None:
    """The test-only fault: die here if ``KAYAK_CLEANER_CRASH_AT`` names ``step``."""
    if os.environ.get(CRASH_ENV) == step:
        log.warning("%s=%s: killing this process", CRASH_ENV, step)
        os.kill(os.getpid(), signal.SIGKILL)


def commit_swap(directory: Path, group: CleanedGroup) -> None:
    """Steps 2 to 4 of the module doc for ``group`` (blocking: renames and fsyncs)."""
    crash_point("cleaned")
    base = group.base
    companions = [
        s for s in COMPANIONS if os.path.exists(segment_path(directory, base, s + CLEANED))
    ]
    for suffix in companions:
        os.replace(
            segment_path(directory, base, suffix + CLEANED),
            segment_path(directory, base, suffix + SWAP),
        )
    fsync_directory(directory)
    crash_point("companions-swapped")
    os.replace(
        segment_path(directory, base, ".log" + CLEANED),
        segment_path(directory, base, ".log" + SWAP),
    )
    fsync_directory(directory)
    crash_point("log-swapped")
    for source in group.sources[1:]:
        _delete_segment_files(directory, source)
    if len(group.sources) > 1:
        # Durable before B.log changes: a power loss must not bring back a replaced segment
        # beside a B.log that already covers its offsets.
        fsync_directory(directory)
    crash_point("sources-deleted")
    for suffix in companions:
        os.replace(
            segment_path(directory, base, suffix + SWAP), segment_path(directory, base, suffix)
        )
    crash_point("companions-renamed")
    os.replace(segment_path(directory, base, ".log" + SWAP), segment_path(directory, base, ".log"))
    # No fsync: renames a power loss takes back leave ``.swap`` files, which the next start
    # renames again (and the next roll's directory fsync makes them durable anyway).
    crash_point("done")


def discard_cleaned(directory: Path, group: CleanedGroup) -> None:
    """Delete a group's ``.cleaned`` files (the log changed under it: it is not used)."""
    for suffix in _SEGMENT_FILES:
        remove_quietly(Path(segment_path(directory, group.base, suffix + CLEANED)))


def recover_swaps(directory: Path) -> int:
    """Finish committed replacements and undo the others (module doc); returns how many
    replacements were finished."""
    names = os.listdir(directory)
    swaps = sorted(int(n.split(".")[0]) for n in names if _is_file_of(n, ".log" + SWAP))
    bases = {int(n.split(".")[0]) for n in names if n.split(".")[0].isdigit()}
    for base in swaps:
        end = _end_offset(segment_path(directory, base, ".log" + SWAP), base)
        for other in sorted(b for b in bases if base < b < end):
            _delete_segment_files(directory, other)
        for suffix in COMPANIONS:
            swap = segment_path(directory, base, suffix + SWAP)
            if os.path.exists(swap):
                os.replace(swap, segment_path(directory, base, suffix))
        os.replace(
            segment_path(directory, base, ".log" + SWAP), segment_path(directory, base, ".log")
        )
        log.warning(
            "%s: finished replacing segments %d to %d by their cleaned copy",
            directory,
            base,
            end - 1,
        )
    leftovers = [n for n in os.listdir(directory) if n.endswith((CLEANED, SWAP))]
    for name in leftovers:
        remove_quietly(directory / name)
    if leftovers:
        log.warning("%s: removed %d files of an unfinished cleaning", directory, len(leftovers))
    if swaps or leftovers:
        fsync_directory(directory)
    return len(swaps)


def _is_file_of(name: str, suffix: str) -> bool:
    stem, dot, rest = name.partition(".")
    return bool(dot) and stem.isdigit() and "." + rest == suffix


def _delete_segment_files(directory: Path, base: int) -> None:
    for suffix in _SEGMENT_FILES:
        remove_quietly(Path(segment_path(directory, base, suffix)))


def _end_offset(path: str, base: int) -> int:
    """The offset after the last whole batch of a (cleaned) segment file: a header walk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size, position, end = os.fstat(fd).st_size, 0, base
        while position + BATCH_HEADER_SIZE <= size:
            raw = os.pread(fd, BATCH_HEADER_SIZE, position)
            fields = BATCH_HEADER.unpack(raw)
            if fields[3] != MAGIC_V2:
                break
            end = fields[0] + fields[6] + 1
            position += 12 + fields[1]
        return end
    finally:
        os.close(fd)
