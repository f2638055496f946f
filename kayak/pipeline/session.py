"""A local Spark session set up for kayak's pipeline (``local[2]`` by default), and its stop.

The session's JVM is launched by this process (pyspark's own ``launch_gateway``) in a session
of its own: a Ctrl-C in a terminal signals the terminal's foreground process group, and the
JVM and the Python workers it forks must not get it; the CLI gets it alone and stops them in
order (:func:`stop_spark`). The JVM's output can go to a file, so Spark's stack traces never
reach the terminal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["is_alive", "local_spark", "parent_of", "process_tree", "stop_spark"]

log = logging.getLogger(__name__)

_LOG4J = Path(__file__).with_name("log4j2.properties")


def local_spark(
    master: str = "local[2]", app_name: str = "kayak-pipeline", *, output: Path | None = None,
    ui: bool = False, kafka_connector: bool = True, **settings: str,
) -> Any:  # fmt: skip
    """A SparkSession on this machine with kayak's data source registered.

    Spark's workers run this interpreter (so they import the same kayak); its console
    logging is reduced to errors, its UI is off unless ``ui`` (its address is then
    ``spark.sparkContext.uiWebUrl``), two shuffle partitions, Python workers
    reused between tasks, UTC session time zone. ``settings`` are more Spark properties
    (``spark.driver.memory``, ...). ``output``: a file the JVM's (and so its Python
    workers') stdout and stderr are appended to, instead of this process's.
    ``kafka_connector``: add Spark's own Kafka source and sink (``format("kafka")``) to
    ``spark.jars`` when its jars are found (:mod:`kayak.pipeline.spark_kafka`); without
    them the session starts all the same, without ``format("kafka")``.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    import kayak.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    java_options = f"-Dlog4j2.configurationFile=file:{_LOG4J}"
    config = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        # The apply runs one task per shuffle partition (by table and key): adaptive
        # execution must not fold a micro-batch's keys into one task, one executor.
        "spark.sql.adaptive.coalescePartitions.enabled": "false",
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": java_options,
        "spark.executor.extraJavaOptions": java_options,
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        **settings,
    }
    if kafka_connector:
        _add_kafka_connector(config)
    if SparkContext._active_spark_context is None:
        conf = SparkConf().setAll(list(config.items()))
        _launch_context(conf, output)
    builder = SparkSession.builder
    for name, value in config.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kayak.spark.register(spark)
    return spark


def _add_kafka_connector(config: dict[str, str]) -> None:
    """Spark's Kafka connector jars, when found, appended to ``config``'s ``spark.jars``."""
    from kayak.pipeline.spark_kafka import connector_jars_or_reason

    jars = connector_jars_or_reason()
    if isinstance(jars, str):
        # The pipeline's choose_reader says so, once; a session is fine without them.
        log.debug("%s", jars)
        return
    given = [jar for jar in config.get("spark.jars", "").split(",") if jar]
    config["spark.jars"] = ",".join([*given, *(str(jar) for jar in jars if str(jar) not in given)])
    log.debug("Spark's Kafka connector: %s", config["spark.jars"])


def _launch_context(conf: Any, output: Path | None) -> None:
    """Start the JVM through pyspark's ``launch_gateway`` (its documented ``popen_kwargs``
    hook) in a new session, then the SparkContext on that gateway (its ``gateway``
    parameter), so the session builder finds it active. The SIGINT handler stays the
    caller's."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    popen_kwargs: dict[str, Any] = {"start_new_session": True}
    out = None
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        out = open(output, "ab")  # noqa: SIM115 - the child holds its own copy once started
        popen_kwargs.update(stdout=out, stderr=out)
    try:
        gateway = launch_gateway(conf, popen_kwargs=popen_kwargs)  # type: ignore[no-untyped-call]
    finally:
        if out is not None:
            out.close()
    # SparkContext replaces the SIGINT handler with one that cancels every job: keep the
    # caller's (the CLI's Ctrl-C means "catch up, then stop", which needs the jobs).
    on_interrupt = signal.getsignal(signal.SIGINT)
    try:
        SparkContext(conf=conf, gateway=gateway)
    except BaseException:
        _end_gateway(gateway, timeout_s=10.0)
        raise
    finally:
        if threading.current_thread() is threading.main_thread() and on_interrupt is not None:
            signal.signal(signal.SIGINT, on_interrupt)


def stop_spark(spark: Any, timeout_s: float = 30.0) -> None:
    """Stop ``spark``'s session and, when this process launched its JVM, end the JVM and
    wait (up to ``timeout_s`` each) for it and every process it started (the Python
    workers) to exit; what is still running then is killed. Safe to call twice."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    helpers = process_tree(proc.pid) - {proc.pid} if proc is not None else set()
    try:
        spark.stop()
    except Exception:
        log.exception("while stopping the Spark session")
    if gateway is not None and proc is not None:
        _end_gateway(gateway, timeout_s)
        # A later local_spark launches a new JVM instead of talking to the ended one.
        SparkContext._gateway = None
        SparkContext._jvm = None
    _wait_gone(helpers, timeout_s)


def _end_gateway(gateway: Any, timeout_s: float) -> None:
    """Close the gateway's connections, then its JVM's stdin: Spark's gateway server exits
    (running its shutdown hooks) at end of input. Kill it if it does not in time."""
    proc: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception:
        log.debug("while closing the py4j gateway", exc_info=True)
    if proc is None:
        return
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        log.warning("Spark JVM %d did not exit in %.0f s; killing it", proc.pid, timeout_s)
        proc.kill()
        proc.wait()


def process_tree(root: int) -> set[int]:
    """``root`` and its descendants now living (from ``/proc``; only ``root`` elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {root}
    for entry in entries:
        if not entry.isdigit():
            continue
        ppid = parent_of(int(entry))
        if ppid is not None:
            children.setdefault(ppid, []).append(int(entry))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, ()))
    return tree


def parent_of(pid: int) -> int | None:
    """The parent of process ``pid`` (from ``/proc``), None if it is gone or unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or ')'.
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


def is_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (from ``/proc``; a zombie, exited but not reaped by its
    parent yet, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] != b"Z"


def _wait_gone(pids: Iterable[int], timeout_s: float) -> None:
    pending = set(pids)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        pending = {pid for pid in pending if is_alive(pid)}
        if pending:
            time.sleep(0.05)
    for pid in pending:
        log.warning("Spark's process %d did not exit with its JVM; killing it", pid)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
