"""README's code blocks marked runnable are run as written, against a real broker.

Marker convention: an HTML comment on the line right before a fenced block (blank lines
between are allowed), invisible on GitHub::

    <!-- runnable -->                run the block; it must exit 0
    <!-- runnable: background -->    start the block (a shell block that runs a server, e.g.
                                     `kayak broker`) and keep it running for later blocks

Only shell fences (``sh``, ``bash``, ``shell``) and ``python`` fences can be marked; a marker
before any other block fails the test. Unmarked blocks are not run. The blocks run in README
order, in one temporary working directory, as a new user would type them: ``.venv/bin``
first on ``PATH`` (so ``kayak`` is the installed command) and ``python`` fences with this
interpreter. So that the run does not
depend on free well-known ports, the broker listens on a free port: the address
``127.0.0.1:9092`` (or ``localhost:9092``) in a block is replaced by it, ``8081`` by the
registry's port, ``KAYAK_BOOTSTRAP_SERVER`` points at it, and ``kayak broker`` run from a
block gets ``--port`` and ``--schema-registry-port`` (through a ``kayak`` wrapper first on
``PATH``). Nothing else of a block is changed. If no background block started a broker
before a runnable block, the test starts ``kayak broker`` itself.

The README read is ``$KAYAK_README`` if set (to try a draft), else the repository's.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_MARKER = re.compile(r"^<!--\s*runnable(?::\s*(?P<mode>[\w-]+))?\s*-->\s*$")
_FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
_SHELL = {"sh", "bash", "shell"}
BLOCK_TIMEOUT_S = 240  # the pipeline block starts Spark

pytestmark = pytest.mark.timeout(600)


@dataclass(frozen=True)
class Block:
    """One marked code block: its fence's line (1-based), language, mode and text."""

    line: int
    lang: str
    mode: str
    text: str


def readme_path() -> Path:
    return Path(os.environ.get("KAYAK_README") or ROOT / "README.md")


def marked_blocks(text: str) -> list[Block]:
    """Every fenced block preceded by a runnable marker, in order."""
    lines = text.splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        marker = _MARKER.match(lines[index].strip())
        index += 1
        if marker is None:
            continue
        while index < len(lines) and not lines[index].strip():
            index += 1
        fence = _FENCE.match(lines[index].strip()) if index < len(lines) else None
        if fence is None:
            raise AssertionError(f"README line {index}: a runnable marker not before a ``` block")
        start = index + 1
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        lang = fence["lang"].lower()
        if lang not in _SHELL | {"python"}:
            raise AssertionError(f"README line {start}: cannot run a {lang or 'plain'} block")
        text = "\n".join(lines[start:end])
        blocks.append(Block(start, lang, marker["mode"] or "run", text))  # start: fence's line
        index = end + 1
    return blocks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port} after {timeout}s")


class ReadmeSession:
    """The temporary directory, ports and processes the blocks of one README share."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port = _free_port()
        self.registry_port = _free_port()
        self.background: list[subprocess.Popen[bytes]] = []
        self.broker_started = False
        self.bin = work / ".readme-bin"
        self.bin.mkdir()
        real = Path(sys.executable).parent / "kayak"
        wrapper = self.bin / "kayak"
        wrapper.write_text(
            "#!/bin/sh\n"
            'if [ "$1" = broker ]; then shift; exec '
            f'"{real}" broker --port {self.port} --schema-registry-port {self.registry_port} '
            '"$@"; fi\n'
            f'exec "{real}" "$@"\n'
        )
        wrapper.chmod(0o755)
        self.env = {
            **os.environ,
            "PATH": f"{self.bin}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "KAYAK_BOOTSTRAP_SERVER": f"127.0.0.1:{self.port}",
            "PYTHONUNBUFFERED": "1",
        }

    def localise(self, text: str) -> str:
        """The block with the well-known addresses replaced by this session's."""
        for host in ("127.0.0.1", "localhost"):
            text = text.replace(f"{host}:9092", f"127.0.0.1:{self.port}")
            text = text.replace(f"{host}:8081", f"127.0.0.1:{self.registry_port}")
        return text

    def _spawn(self, argv: list[str], log_name: str) -> subprocess.Popen[bytes]:
        log = open(self.work / log_name, "wb")  # noqa: SIM115 - the child keeps it
        process = subprocess.Popen(
            argv, cwd=self.work, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self.background.append(process)
        return process

    def ensure_broker(self) -> None:
        if not self.broker_started:
            self._spawn([str(self.bin / "kayak"), "broker", "--data-dir", "readme-broker"],
                        "readme-broker.log")  # fmt: skip
            self.broker_started = True
        _wait_for_port(self.port)

    def run(self, block: Block) -> None:
        text = self.localise(block.text)
        if block.mode == "background":
            assert block.lang in _SHELL, f"line {block.line}: only shell blocks run in background"
            self._spawn(["bash", "-c", text], f"background-{block.line}.log")
            if "kayak broker" in text:
                self.broker_started = True
                _wait_for_port(self.port)
            return
        self.ensure_broker()
        if block.lang == "python":
            argv = [sys.executable, "-c", text]
        else:
            argv = ["bash", "-e", "-o", "pipefail", "-c", text]
        done = subprocess.run(
            argv, cwd=self.work, env=self.env, capture_output=True, timeout=BLOCK_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, (
            f"README block at line {block.line} exited {done.returncode}:\n{text}\n"
            f"--- stdout\n{done.stdout.decode(errors='replace')}\n"
            f"--- stderr\n{done.stderr.decode(errors='replace')}"
        )

    def close(self) -> None:
        for process in reversed(self.background):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.background:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[ReadmeSession]:
    if shutil.which("bash") is None:
        pytest.skip("bash is needed to run README's shell blocks")
    running = ReadmeSession(tmp_path)
    try:
        yield running
    finally:
        running.close()


def test_marker_convention_is_parsed() -> None:
    text = (
        "intro\n<!-- runnable -->\n```sh\necho hi\n```\n```python\nnot marked\n```\n"
        "<!-- runnable: background -->\n\n```bash\nkayak broker\n```\n"
    )
    assert marked_blocks(text) == [
        Block(3, "sh", "run", "echo hi"),
        Block(11, "bash", "background", "kayak broker"),
    ]
    with pytest.raises(AssertionError, match="not before"):
        marked_blocks("<!-- runnable -->\ntext\n")


def test_readme_runnable_blocks(session: ReadmeSession) -> None:
    path = readme_path()
    blocks = marked_blocks(path.read_text(encoding="utf-8"))
    if not blocks:
        pytest.skip(f"{path} marks no block <!-- runnable -->")
    for block in blocks:
        session.run(block)
