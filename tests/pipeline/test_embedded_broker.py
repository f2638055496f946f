"""The embedded broker is a child process: it must not outlive a killed parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PARENT = """
import sys, time
from pathlib import Path
from kayak.pipeline.embedded import EmbeddedBroker
broker = EmbeddedBroker(Path(sys.argv[1])).start()
print(broker.bootstrap_servers, broker.registry_url, broker.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_broker_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(data_dir)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert parent.stdout is not None
    bootstrap, registry, pid = parent.stdout.readline().split()
    assert bootstrap.startswith("127.0.0.1:") and registry.startswith("http://127.0.0.1:")
    child = int(pid)
    assert alive(child)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child), "the embedded broker outlived its parent"
    log = (tmp_path / "broker-broker.log").read_text()
    assert "parent process" in log  # a clean shutdown, not a kill
