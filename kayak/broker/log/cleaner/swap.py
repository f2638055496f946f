"""Putting a cleaned group in place of the segments it replaces, crash-safely, and finishing
or undoing an interrupted replacement at the next start.

The files of a group with base offset ``B`` (as Kafka's ``LocalLog.replaceSegments``):

1. ``B.log.cleaned`` and its ``.index``/``.timeindex``/``.txnindex.cleaned``: written and
   fsynced by the cleaning (:mod:`.rewrite`);
2. :func:`commit`: the companions renamed ``.cleaned`` → ``.swap``, the directory fsynced;
   then ``B.log.cleaned`` → ``B.log.swap``, the directory fsynced. **This rename commits the
   replacement**: from here on a start finishes it, before it a start undoes it;
3. :func:`put_in_place`: the replaced segments other than ``B`` deleted (all their files),
   each ``B.*.swap`` renamed over ``B.*``, and ``B.log.swap`` *linked* over ``B.log``
   (a second name for it, made under a temporary ``.swap`` name and renamed over ``B.log``);
4. :func:`settle`: the directory fsynced, then ``B.log.swap`` removed.

Steps 1 and 2 never touch the replaced segments' files, so they run away from the event loop
while fetches go on reading them (the manager's thread). Step 3 changes those files, so it
runs on the event loop together with the change of the log's list of segments: an old
:class:`~kayak.broker.log.segment.Segment` opens its ``.log`` and index files by path,
lazily (the cache of open files may have closed them), so no fetch may look for them once
they are deleted or renamed over. Step 4 runs in the thread again: until its fsync, a power
loss may bring back a deleted segment beside a ``B.log`` that already covers its offsets, but
``B.log.swap`` (durable since step 2, removed only after that fsync) makes the next start
finish the replacement again, which deletes it; a start that finds ``B.log.swap`` and
``B.log`` one file only drops the second name. So no directory fsync is left on the loop.

At a start (:func:`recover_swaps`, before segments are listed), each ``B.log.swap`` is
finished: every segment with a base offset inside its offsets is deleted, its ``.swap``
files renamed into place. Any ``.cleaned`` file, and any ``.swap`` without a
``B.log.swap``, is what an uncommitted cleaning left, and is deleted: the old segments are
whole. A cleaned group covers exactly the offsets of the segments it replaces (see
:mod:`.batches`), so either way the log's offsets stay continuous.

A committed replacement may also be taken back while the process runs (:func:`undo`), as
long as step 3 has not run: the old segments' files are then exactly as they were.
``B.log.swap`` goes first, durably, and then the companions' ``.swap`` files, so a crash
in between leaves what a start undoes.

``KAYAK_CLEANER_CRASH_AT=<step>`` (a test-only fault) makes the process kill itself with
SIGKILL at that step of :func:`commit_swap`: one of :data:`STEPS`.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
from pathlib import Path

from kayak.broker.log.cleaner.rewrite import CLEANED, COMPANIONS, CleanedGroup, segment_path
from kayak.broker.log.files import fsync_directory, remove_quietly
from kayak.protocol.records.record import BATCH_HEADER, BATCH_HEADER_SIZE, MAGIC_V2

log = logging.getLogger(__name__)

SWAP = ".swap"
_LINK = ".log.link" + SWAP  # B.log.swap's second name until it is renamed over B.log
CRASH_ENV = "KAYAK_CLEANER_CRASH_AT"
STEPS = (
    "cleaned",  # .cleaned files written, nothing renamed
    "companions-swapped",  # index files are .swap, the log still .cleaned
    "log-swapped",  # committed: B.log.swap exists, old segments untouched
    "sources-deleted",  # old segments (but B's) deleted
    "companions-renamed",  # B.index etc. are the new ones; B.log still the old one
    "log-linked",  # B.log is the cleaned file, B.log.swap still a second name of it
    "done",  # everything in place and durable, B.log.swap removed
)
_SEGMENT_FILES = (".log", *COMPANIONS)
# What os.link raises where a filesystem has no hard links.
_NO_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK})


def crash_point(step: str) -> None:
    """The test-only fault: die here if ``KAYAK_CLEANER_CRASH_AT`` names ``step``."""
    if os.environ.get(CRASH_ENV) == step:
        log.warning("%s=%s: killing this process", CRASH_ENV, step)
        os.kill(os.getpid(), signal.SIGKILL)


def commit_swap(directory: Path, group: CleanedGroup) -> None:
    """Steps 2 to 4 of the module doc for ``group``, one after the other (blocking: renames
    and fsyncs), for a caller that changes the list of segments after them (tools, tests)."""
    commit(directory, group)
    put_in_place(directory, group)
    settle(directory, group)


def commit(directory: Path, group: CleanedGroup) -> None:
    """Step 2: the renames that commit the replacement, each durable (blocking). It never
    touches the replaced segments' files: run it in a thread while fetches read them."""
    crash_point("cleaned")
    base = group.base
    for suffix in COMPANIONS:
        cleaned = segment_path(directory, base, suffix + CLEANED)
        if os.path.exists(cleaned):
            os.replace(cleaned, segment_path(directory, base, suffix + SWAP))
    fsync_directory(directory)
    crash_point("companions-swapped")
    os.replace(
        segment_path(directory, base, ".log" + CLEANED),
        segment_path(directory, base, ".log" + SWAP),
    )
    fsync_directory(directory)
    crash_point("log-swapped")


def put_in_place(directory: Path, group: CleanedGroup) -> None:
    """Step 3, after :func:`commit`: deletions and renames only, no fsync (see the module doc
    for why none is needed here). It deletes and renames over the replaced segments' files:
    run it on the event loop, with the change of the list of segments."""
    base = group.base
    for source in group.sources[1:]:
        _delete_segment_files(directory, source)
    crash_point("sources-deleted")
    for suffix in COMPANIONS:
        swap = segment_path(directory, base, suffix + SWAP)
        if os.path.exists(swap):
            os.replace(swap, segment_path(directory, base, suffix))
    crash_point("companions-renamed")
    swap, link = segment_path(directory, base, ".log" + SWAP), segment_path(directory, base, _LINK)
    remove_quietly(Path(link))
    try:
        os.link(swap, link)
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
        # No second name to keep on this filesystem: make the deletions durable before
        # B.log changes (blocking), then step 4 has nothing left to do.
        fsync_directory(directory)
        os.replace(swap, segment_path(directory, base, ".log"))
    else:
        os.replace(link, segment_path(directory, base, ".log"))
    crash_point("log-linked")


def settle(directory: Path, group: CleanedGroup) -> None:
    """Step 4, after :func:`put_in_place`: make it durable, then drop ``B.log.swap``
    (blocking; it touches no file a fetch may open, so it runs in a thread)."""
    swap = segment_path(directory, group.base, ".log" + SWAP)
    if os.path.exists(swap):
        fsync_directory(directory)
        os.unlink(swap)
        # No fsync: a B.log.swap a power loss brings back is B.log's second name, which
        # the next start drops (and the next cleaning's commit fsyncs the directory first).
    crash_point("done")


def undo(directory: Path, group: CleanedGroup) -> None:
    """Take back a :func:`commit` that :func:`put_in_place` did not follow (blocking): the
    replaced segments' files are untouched, and are the log again (see the module doc)."""
    remove_quietly(Path(segment_path(directory, group.base, ".log" + SWAP)))
    fsync_directory(directory)
    for suffix in _SEGMENT_FILES:
        remove_quietly(Path(segment_path(directory, group.base, suffix + SWAP)))
    discard_cleaned(directory, group)


def discard_cleaned(directory: Path, group: CleanedGroup) -> None:
    """Delete a group's ``.cleaned`` files (the log changed under it: it is not used)."""
    for suffix in _SEGMENT_FILES:
        remove_quietly(Path(segment_path(directory, group.base, suffix + CLEANED)))


def recover_swaps(directory: Path) -> int:
    """Finish committed replacements and undo the others (module doc); returns how many
    replacements were finished."""
    names = os.listdir(directory)
    if not any(n.endswith((CLEANED, SWAP)) for n in names):
        return 0  # the common start: nothing was being cleaned (one listing, not two)
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
        swap, target = segment_path(directory, base, ".log" + SWAP), segment_path(directory, base)
        if os.path.exists(target) and os.path.samefile(swap, target):
            os.unlink(swap)  # step 3 had linked it over B.log: only its second name is left
        else:
            os.replace(swap, target)
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
