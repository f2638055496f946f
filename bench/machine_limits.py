"""The machine's own limits and facts, for the broker benchmarks (not one itself).

* what the machine is: Python, CPU model and count, the file system holding the data;
* the CPU time a process has used so far (from /proc);
* the ``fdatasync`` rate of small appends, and ``os.sendfile`` from a file into a loopback TCP
  socket read with ``recv_into``: the most a durable broker, or one serving fetches with
  sendfile, could do here.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from pathlib import Path

from peers import HOST, MiB

_SENDER_TIMEOUT = 60.0  # the sendfile thread has sent everything once the receiver has it


def filesystem_of(path: Path) -> str:
    """``fstype device mountpoint`` of the mount holding ``path`` (from /proc/mounts)."""
    path = path.resolve()
    best = ("?", "?", "/")
    with contextlib.suppress(OSError), open("/proc/mounts") as mounts:
        for line in mounts:
            device, mount, fstype, *_ = line.split()
            if (path == Path(mount) or Path(mount) in path.parents) and len(mount) >= len(best[2]):
                best = (fstype, device, mount)
    return f"{best[0]} ({best[1]} on {best[2]})"


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} x {os.cpu_count()}"
    return f"{os.cpu_count()} CPUs"


def machine_notes(data_root: Path) -> str:
    return (
        f"Python {sys.version.split()[0]} on {cpu_model()}; {data_root}: {filesystem_of(data_root)}"
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process (all its threads) has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fdatasync_rate(directory: Path, value_size: int, seconds: float) -> float:
    """Appends/second of a tight ``write(value_size) + fdatasync`` loop on a fresh file."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"fdatasync-probe-{os.getpid()}"
    block = os.urandom(value_size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        count = 0
        start = time.perf_counter()
        deadline = start + seconds
        while (now := time.perf_counter()) < deadline:
            os.write(fd, block)
            os.fdatasync(fd)
            count += 1
        return count / (now - start)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def sendfile_loopback_rate(path: Path, recv_buffer: int = 4 * MiB) -> float:
    """Bytes/second of ``os.sendfile`` of the whole file into a loopback TCP connection,
    read by ``recv_into`` one preallocated buffer (the receiver's clock is the one timed)."""
    size = path.stat().st_size
    with socket.create_server((HOST, 0)) as server:
        port = server.getsockname()[1]
        sender = threading.Thread(target=_sendfile_all, args=(path, server), daemon=True)
        sender.start()
        with socket.create_connection((HOST, port)) as sock:
            buffer = bytearray(recv_buffer)
            view = memoryview(buffer)
            received = 0
            start = time.perf_counter()
            while received < size:
                n = sock.recv_into(view)
                if n == 0:
                    raise ConnectionError(f"sender stopped after {received} of {size} bytes")
                received += n
            elapsed = time.perf_counter() - start
        sender.join(_SENDER_TIMEOUT)
    return size / elapsed


def _sendfile_all(path: Path, server: socket.socket) -> None:
    conn, _ = server.accept()
    with conn, open(path, "rb") as file:
        fd, offset, size = file.fileno(), 0, os.fstat(file.fileno()).st_size
        while offset < size:
            sent = os.sendfile(conn.fileno(), fd, offset, size - offset)
            if sent == 0:
                break
            offset += sent
