"""The Java client as a peer in bench/produce.py and bench/consume.py.

``ProducerBench.java`` and ``ConsumerBench.java`` (beside this file) drive Kafka's own
``KafkaProducer`` and ``KafkaConsumer`` (the jars ``make jvm`` fetched into ``.jvm/kafka``) the
way the Python clients are driven, and speak the READY / go / result protocol of
``measured_clients.run_measured``. They are compiled with ``javac`` on first use into a cache
directory named by a digest of their sources and of the jars' names (so a new Kafka version or
an edited source compiles afresh), and run with the JVM options of Kafka's own performance
scripts.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kafka_peer import TOOL_JVM_OPTIONS

from tests.fixtures.jvm import JVM_LIB, classpath, java_command

SOURCES = Path(__file__).resolve().parent
PRODUCER, CONSUMER = "ProducerBench", "ConsumerBench"
_COMPILE_TIMEOUT = 300.0


def cache_root() -> Path:
    """``$KAYAK_BENCH_JAVA_CACHE``, else ``$XDG_CACHE_HOME/kayak/bench-java`` (~/.cache)."""
    explicit = os.environ.get("KAYAK_BENCH_JAVA_CACHE")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "kayak" / "bench-java"


def _digest() -> str:
    digest = hashlib.sha256()
    for source in sorted(SOURCES.glob("*.java")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    for jar in sorted((JVM_LIB / "kafka").glob("*.jar")):
        digest.update(jar.name.encode() + b"\0")
    return digest.hexdigest()[:16]


def compiled_classes() -> Path:
    """The directory holding the compiled bench classes, compiling them if it is missing.

    Compiles into a scratch directory and renames it into place, so that two benches
    starting at once never see half a build (the loser of the race drops its copy).
    """
    target = cache_root() / _digest()
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="build-", dir=target.parent))
    try:
        sources = [str(source) for source in sorted(SOURCES.glob("*.java"))]
        command = ["javac", "-d", str(scratch), "-cp", classpath("kafka"), *sources]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT, check=False
            )
        except FileNotFoundError as exc:
            raise RuntimeError(
                "no javac: the Java clients need a JDK (make java installs openjdk-17-jdk-headless)"
            ) from exc
        if done.returncode != 0:
            raise RuntimeError(f"javac failed: {done.stderr[-3000:]}")
        try:
            scratch.rename(target)
        except OSError:  # another bench compiled the same sources first
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def java_client_command(main_class: str, args: Sequence[object]) -> list[str]:
    """The command that runs one of the bench's Java clients (``args`` as strings)."""
    return java_command(
        main_class,
        [str(arg) for arg in args],
        jvm_options=TOOL_JVM_OPTIONS,
        extra_classpath=[str(compiled_classes())],
    )
