"""Shared fixtures: where Kafka's message specs are, and the project's own generator."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

# Fixtures for real external services, shared across test folders: a throwaway PostgreSQL
# cluster and one local[2] SparkSession per run (each started only when a test asks).
pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.spark",
    "tests.fixtures.spark_cluster",
    "tests.fixtures.certs",
    "tests.fixtures.jvm",
]

REPO = Path(__file__).resolve().parent.parent

SPEC_DIR = Path(os.environ.get("KAYAK_SPEC_DIR", REPO.parent / "shared" / "kafka-message-specs"))


# Seconds per test file in a recent run (tools/test_durations.py writes it). Files are
# collected longest first, so pytest-xdist (--dist loadfile --no-loadscope-reorder) starts
# the long ones early and the short ones fill the end, not one long file running alone.
_DURATIONS = REPO / "tests" / "durations.json"
_NEW_FILE_S = 10  # a file the table does not know yet: most files are short


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seconds: dict[str, int] = json.loads(_DURATIONS.read_text()) if _DURATIONS.exists() else {}

    def weight(item: pytest.Item) -> int:
        return -seconds.get(item.nodeid.split("::", 1)[0], _NEW_FILE_S)

    items.sort(key=weight)  # stable: a file's tests keep their order


def load_tool(path: str) -> ModuleType:
    """Import a script under tools/ (not part of the package), such as generate_protocol.py."""
    name = Path(path).stem
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_generator() -> ModuleType:
    """Import tools/generate_protocol.py."""
    return load_tool("generate_protocol.py")


# Spark's JVMs in tests live for seconds to a minute, where tiered compilation's C2 costs more
# CPU than it saves: with the C1 compiler alone tests/cli/test_cli_pipeline.py took 60
# CPU-seconds instead of 82. The suite is CPU-bound on two cores. (spark-submit adds
# SPARK_SUBMIT_OPTS to the driver's JVM, which runs local[N] executors too.) The drivers also
# map the class-data-sharing archive `make spark-archive` writes (a small job: 23 -> 16
# CPU-s); the JVM ignores an archive that no longer matches its jars.
_spark_archive = load_tool("jvm/spark_class_archive.py")
_SPARK_ARCHIVE = Path(os.environ.get("KAYAK_JVM_LIB", REPO / ".jvm")) / "spark-driver.jsa"
_SPARK_JVM_OPTIONS = _spark_archive.JVM_OPTIONS
if _SPARK_ARCHIVE.exists():
    _SPARK_JVM_OPTIONS += f" {_spark_archive.QUIET_CDS} -XX:SharedArchiveFile={_SPARK_ARCHIVE}"
os.environ.setdefault("SPARK_SUBMIT_OPTS", _SPARK_JVM_OPTIONS)


@pytest.fixture(scope="session")
def spec_dir() -> Path:
    if not SPEC_DIR.is_dir():
        pytest.skip(f"Kafka message specs not found at {SPEC_DIR} (set KAYAK_SPEC_DIR)")
    return SPEC_DIR


@pytest.fixture(scope="session")
def generator() -> ModuleType:
    return load_generator()
