"""Supervise the broker processes of ``kayak broker --shards N``.

The supervisor starts one broker process per shard and keeps the cluster whole:

- a shard that exits although nobody asked it to stop is restarted with the same node id and
  port, after a delay that doubles from 0.5 s up to 10 s while it keeps crashing;
- a shard that crashes more than five times within 60 s is not restarted again: the other
  shards are stopped cleanly and the supervisor exits non-zero, so a service manager notices;
- SIGTERM and SIGINT are forwarded to every shard and the supervisor waits for them; it exits
  0 only if every shard then stopped cleanly;
- shards run with ``--exit-with-parent``: if the supervisor itself is killed (``kill -9``),
  each shard shuts down cleanly within about a second instead of holding its port forever.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field, replace

from kayak.broker.security.listeners import Listener

log = logging.getLogger(__name__)

FIRST_RESTART_DELAY_S = 0.5
MAX_RESTART_DELAY_S = 10.0
CRASH_LIMIT = 5  # crashes tolerated within CRASH_WINDOW_S; one more and the supervisor gives up
CRASH_WINDOW_S = 60.0
STOP_TIMEOUT_S = 60.0  # then shards still running are killed
POLL_INTERVAL_S = 0.1

EXIT_OK = 0
EXIT_FAILED = 1


@dataclass
class Shard:
    """One broker process of the cluster and its crash history."""

    node_id: int
    port: int
    command: list[str]
    process: subprocess.Popen[bytes] | None = None
    restart_at: float | None = None  # monotonic time of the next start while it is down
    crashes: deque[float] = field(default_factory=deque)  # monotonic times, within the window

    def start(self) -> None:
        self.process = subprocess.Popen(self.command)
        self.restart_at = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def record_crash(self, now: float) -> None:
        self.crashes.append(now)
        while self.crashes and self.crashes[0] <= now - CRASH_WINDOW_S:
            self.crashes.popleft()

    @property
    def restart_delay(self) -> float:
        """0.5 s after the first crash in the window, doubling with each further one."""
        doublings = max(len(self.crashes) - 1, 0)
        return float(min(FIRST_RESTART_DELAY_S * 2**doublings, MAX_RESTART_DELAY_S))


def describe_exit(code: int) -> str:
    """``status 1`` or ``killed by SIGKILL`` for a Popen return code."""
    if code >= 0:
        return f"status {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


class ShardSupervisor:
    """Runs the shards until a signal asks it to stop or a shard keeps crashing."""

    def __init__(self, shards: list[Shard]) -> None:
        self.shards = shards
        self._stop_signal: int | None = None

    def run(self) -> int:
        """Start every shard, keep them running; the process exit status to use."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._request_stop)
        for shard in self.shards:
            shard.start()
            log.info("shard %d started (pid %d, port %d)", shard.node_id, _pid(shard), shard.port)
        while self._stop_signal is None:
            failing = self._tend(time.monotonic())
            if failing is not None:
                log.error(
                    "shard %d crashed %d times within %.0fs (last: %s); giving up: stopping the "
                    "other shards and exiting with status %d",
                    failing.node_id, len(failing.crashes), CRASH_WINDOW_S,
                    describe_exit(_returncode(failing)), EXIT_FAILED,
                )  # fmt: skip
                self._stop_all(signal.SIGTERM)
                return EXIT_FAILED
            time.sleep(POLL_INTERVAL_S)
        log.info("received %s; stopping %d shards", signal.Signals(self._stop_signal).name,
                 len(self.shards))  # fmt: skip
        return EXIT_OK if self._stop_all(self._stop_signal) else EXIT_FAILED

    def _request_stop(self, signum: int, _frame: object) -> None:
        # Only noted here: the main loop forwards it, so a shard exiting at the same moment
        # is never restarted after the stop was asked for.
        if self._stop_signal is None:
            self._stop_signal = signum

    def _tend(self, now: float) -> Shard | None:
        """Restart shards that are due; the shard that crashed too often, if any."""
        for shard in self.shards:
            if shard.restart_at is not None:
                if now >= shard.restart_at:
                    shard.start()
                    log.warning("shard %d restarted (pid %d, port %d)",
                                shard.node_id, _pid(shard), shard.port)  # fmt: skip
                continue
            assert shard.process is not None
            code = shard.process.poll()
            if code is None:
                continue
            shard.record_crash(now)
            if len(shard.crashes) > CRASH_LIMIT:
                return shard
            shard.restart_at = now + shard.restart_delay
            log.error(
                "shard %d (pid %d, port %d) exited unexpectedly (%s); restarting it in %.1fs "
                "(crash %d of %d tolerated within %.0fs)",
                shard.node_id, shard.process.pid, shard.port, describe_exit(code),
                shard.restart_delay, len(shard.crashes), CRASH_LIMIT, CRASH_WINDOW_S,
            )  # fmt: skip
        return None

    def _stop_all(self, signum: int) -> bool:
        """Forward ``signum`` to every running shard and wait; True if all stopped cleanly."""
        clean = True
        for shard in self.shards:
            if shard.restart_at is not None:
                log.error("shard %d was down (crashed) when the stop began", shard.node_id)
                clean = False
            elif shard.running:
                assert shard.process is not None
                shard.process.send_signal(signum)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for shard in self.shards:
            if shard.restart_at is None and not self._wait_stopped(shard, deadline):
                clean = False
        return clean

    @staticmethod
    def _wait_stopped(shard: Shard, deadline: float) -> bool:
        process = shard.process
        assert process is not None
        try:
            code = process.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            log.error("shard %d did not stop within %.0fs; killing it",
                      shard.node_id, STOP_TIMEOUT_S)  # fmt: skip
            process.kill()
            process.wait()
            return False
        if code != 0:
            log.error("shard %d stopped uncleanly (%s)", shard.node_id, describe_exit(code))
            return False
        return True


def _returncode(shard: Shard) -> int:
    assert shard.process is not None and shard.process.returncode is not None
    return shard.process.returncode


def _pid(shard: Shard) -> int:
    assert shard.process is not None
    return shard.process.pid


def supervise_shards(
    shards: int,
    host: str,
    port: int,
    schema_registry_port: int | None,
    listeners: tuple[Listener, ...] = (),
    advertised_listeners: tuple[Listener, ...] = (),
) -> int:
    """Run one broker process per shard under a :class:`ShardSupervisor`; its exit status.

    Shard ``i`` listens on ``port + i`` (with ``listeners``: on each listener's port + i, and
    advertises each advertised listener's port + i). With port 0 the supervisor picks free
    ports once, so a restarted shard comes back at the address clients and the other shards
    already know; the same goes for the schema registry port of shard 0.
    """
    ports = [port + node if port else free_port(host) for node in range(shards)]
    base = _without_option(sys.argv[1:], "--shards")
    base = _without_option(base, "--port")
    base = _without_option(base, "--listeners")
    base = _without_option(base, "--advertised-listeners")
    if listeners:
        own = [_shard_listeners(node, listeners, advertised_listeners) for node in range(shards)]
        ports = [shard_listeners[0].port for shard_listeners, _ in own]
        per_shard = [_listener_args(*pair) for pair in own]
    else:
        per_shard = [["--port", str(ports[node])] for node in range(shards)]
    if schema_registry_port == 0:
        base = _without_option(base, "--schema-registry-port")
        base += ["--schema-registry-port", str(free_port(host))]
    if "--exit-with-parent" not in base:
        base.append("--exit-with-parent")
    members = [
        Shard(node, ports[node], [sys.executable, "-m", "kayak", *base, *per_shard[node],
                                  "--node-id", str(node), "--shard-count", str(shards)])
        for node in range(shards)
    ]  # fmt: skip
    return ShardSupervisor(members).run()


def _shard_listeners(
    node: int, listeners: tuple[Listener, ...], advertised: tuple[Listener, ...]
) -> tuple[list[Listener], list[Listener]]:
    """Shard ``node``'s listeners and advertised listeners: every port + node (a free port,
    picked once, for port 0; an advertised port 0 stays 0: the port listened on)."""
    own = [replace(x, port=x.port + node if x.port else free_port(x.host)) for x in listeners]
    shifted = [replace(x, port=x.port + node if x.port else 0) for x in advertised]
    return own, shifted


def _listener_args(listeners: list[Listener], advertised: list[Listener]) -> list[str]:
    args = ["--listeners", ",".join(map(str, listeners))]
    if advertised:
        args += ["--advertised-listeners", ",".join(map(str, advertised))]
    return args


def free_port(host: str) -> int:
    """A TCP port nothing listens on at ``host`` right now."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    with socket.socket(family, kind, proto) as probe:
        probe.bind(address)
        return int(probe.getsockname()[1])


def _without_option(args: list[str], name: str) -> list[str]:
    """``args`` without the option ``name`` and its value (``--name V`` or ``--name=V``)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == name:
            skip = True
        elif not arg.startswith(name + "="):
            out.append(arg)
    return out
