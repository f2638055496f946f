"""The cleaner's worker process: cleanings run here, away from the broker's event loop and GIL.

A child process (``python -c`` running :func:`main`) reads jobs from its stdin and answers
on its stdout, one at a time: an 8-byte big-endian length, then a pickled
:class:`~.rewrite.CleaningJob` (the answer: a pickled ``("ok", CleaningResult)`` or
``("error", message)``). Its own log lines go to stderr, which is the broker's. It is a plain
subprocess rather than a ``multiprocessing`` pool, which would import the embedding
application's ``__main__`` again in the child.

The child stops at the end of its stdin (the broker closed it, or died); a cleaning in
progress also checks now and then that the broker that asked for it is still its parent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import sys
from pathlib import Path

from kayak.broker.log.cleaner.rewrite import CleaningJob, CleaningResult, run_cleaning

log = logging.getLogger(__name__)

_LENGTH = 8
# Not ``-m``: the package's parents import this module first, which runpy warns about.
_CHILD = "from kayak.broker.log.cleaner.worker import main; main()"
_STOP_TIMEOUT = 30.0
CHILD_NICENESS = 10


class CleaningFailed(OSError):
    """The worker could not clean (its message says why) or is gone."""


class WorkerProcess:
    """The broker's side: one worker process, started on first use."""

    def __init__(self) -> None:
        self._process: asyncio.subprocess.Process | None = None

    async def run(self, job: CleaningJob) -> CleaningResult:
        """Run ``job`` in the worker and return its result (raises :class:`CleaningFailed`)."""
        process = await self._started()
        assert process.stdin is not None and process.stdout is not None
        request = pickle.dumps(job)
        try:
            process.stdin.write(len(request).to_bytes(_LENGTH, "big") + request)
            await process.stdin.drain()
            size = int.from_bytes(await process.stdout.readexactly(_LENGTH), "big")
            status, payload = pickle.loads(await process.stdout.readexactly(size))
        except (OSError, asyncio.IncompleteReadError) as exc:
            self._process = None
            raise CleaningFailed(f"the cleaner's worker process is gone: {exc}") from exc
        if status != "ok":
            raise CleaningFailed(str(payload))
        assert isinstance(payload, CleaningResult)
        return payload

    async def _started(self) -> asyncio.subprocess.Process:
        if self._process is None or self._process.returncode is not None:
            env = dict(os.environ)
            # The child imports kayak from where this process did, whatever its sys.path.
            root = str(Path(__file__).resolve().parents[4])
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
            self._process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _CHILD, str(os.getpid()),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
            )  # fmt: skip
        return self._process

    async def close(self) -> None:
        """Let the worker finish and exit (its stdin ends); kill it if it does not."""
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        assert process.stdin is not None
        process.stdin.close()
        try:
            async with asyncio.timeout(_STOP_TIMEOUT):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()


def main() -> None:
    """The child: answer jobs until stdin ends."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Background work: on a machine with few cores the broker's requests come first.
    os.nice(CHILD_NICENESS)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        header = stdin.read(_LENGTH)
        if len(header) < _LENGTH:
            return
        job = pickle.loads(stdin.read(int.from_bytes(header, "big")))
        try:
            answer: tuple[str, object] = ("ok", run_cleaning(job))
        except Exception as exc:  # one failed cleaning is reported, the worker goes on
            log.exception("cleaning %s failed", getattr(job, "directory", "?"))
            answer = ("error", f"{type(exc).__name__}: {exc}")
        data = pickle.dumps(answer)
        try:
            stdout.write(len(data).to_bytes(_LENGTH, "big") + data)
            stdout.flush()
        except BrokenPipeError:
            return  # the broker is gone
