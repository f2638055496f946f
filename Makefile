# kayak: two commands matter. `make demo` runs the main job; `make test` runs everything CI runs.
# Both create .venv on first use and reinstall only when pyproject.toml changes.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SPECS  ?= ../shared/kafka-message-specs

.PHONY: demo test lint typecheck pytest generate bench clean system-deps java jvm bytecode spark-archive

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.core-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	@touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@ $(VENV)/.core-installed $(VENV)/.spark-installed

$(VENV)/.spark-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[spark]'
	@touch $@ $(VENV)/.core-installed

demo: $(VENV)/.spark-installed java jvm bytecode
	$(BIN)/kayak demo

# kayak's compiled bytecode, written ahead: where PYTHONDONTWRITEBYTECODE is set (these machines'
# shells set it) Python never writes it, and every broker, CLI and Spark worker process would
# compile kayak from source as it starts (a broker: 1.9 s of CPU to its first connection, not
# 0.7). compileall skips what is up to date, and Python ignores a .pyc older than its source.
bytecode: | $(BIN)/python
	@$(BIN)/python -m compileall -q -j 0 kayak

# Lint, the type check and the Spark class archive run side by side (each mostly one core),
# then the tests.
test: $(VENV)/.dev-installed system-deps jvm
	@$(MAKE) --no-print-directory --output-sync=target -j2 lint typecheck spark-archive bytecode
	@$(MAKE) --no-print-directory pytest

# Third-party tools the tests drive as real peers, from Debian's packages: kcat, chromium (the
# console's browser tests), and
# PostgreSQL (the tests start their own throwaway cluster with wal_level=logical).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-deps: java
	@command -v kcat >/dev/null 2>&1 || { \
		echo "installing kcat (Debian package) for the interop tests"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq kcat >/dev/null; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
		echo "installing PostgreSQL (Debian package) for the CDC tests"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null; }
	@command -v chromedriver >/dev/null 2>&1 || { \
		echo "installing chromium and chromium-driver (Debian packages) for the console tests"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver >/dev/null; }


# The JVM peers kayak is tested and measured against (Apache Kafka, its tools, Connect, Streams,
# Debezium's PostgreSQL connector, Spark's Kafka connector): one pinned list in tools/jvm/pom.xml,
# fetched with the machine's mvn into $(JVM_LIB), one directory per classpath, and fetched again
# only when a pom changes (Maven's own ~/.m2 caches the downloads).
JVM_LIB ?= .jvm
JVM_POMS := tools/jvm/pom.xml $(wildcard tools/jvm/*/pom.xml)
jvm: $(JVM_LIB)/.fetched
$(JVM_LIB)/.fetched: $(JVM_POMS) | java
	@command -v mvn >/dev/null 2>&1 || { \
		echo "installing Maven (Debian package) for the JVM peers"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq maven >/dev/null; }
	rm -rf $(JVM_LIB)/kafka $(JVM_LIB)/spark-kafka $(JVM_LIB)/connect-plugins $(JVM_LIB)/.markers \
		$(JVM_LIB)/kafka-tools.jsa
	mvn -q -B -Dstyle.color=never -f tools/jvm/pom.xml -Djvm.lib=$(abspath $(JVM_LIB)) package
	@touch $@

# A class-data-sharing archive of the classes a Spark driver loads, from one small job
# (tools/jvm/spark_class_archive.py), which the tests' Spark drivers map (tests/conftest.py):
# that job's JVM takes 16 CPU-s with it, 23 without. The script holds the JVM options. Made
# again when the venv is reinstalled; if the JVM writes none, Spark simply starts without it.
SPARK_ARCHIVE := $(JVM_LIB)/spark-driver.jsa
spark-archive: $(SPARK_ARCHIVE)
$(SPARK_ARCHIVE): $(VENV)/.dev-installed tools/jvm/spark_class_archive.py | java
	@mkdir -p $(JVM_LIB)
	@echo "archiving a Spark driver's classes into $@"
	@rm -f $@ $@.partial
	@$(BIN)/python tools/jvm/spark_class_archive.py $@.partial 2>$(JVM_LIB)/spark-archive.log \
		|| echo "the Spark class archive's job failed: see $(JVM_LIB)/spark-archive.log"
	@if [ -f $@.partial ]; then mv $@.partial $@; \
	else echo "no Spark class archive was written: the tests' Spark starts without it"; fi

# Spark runs on Java 17; machines of this kind have it, others get Debian's headless JRE.
java:
	@command -v java >/dev/null 2>&1 || { \
		echo "installing Java 17 (Debian package) for Spark and the JVM peers"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openjdk-17-jdk-headless >/dev/null; }

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check kayak tools tests bench

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy

# pytest exits 5 when it collected nothing; that must fail the build, never pass it.
# Test files are spread over PYTEST_WORKERS processes (pytest-xdist), each file kept whole so
# its module fixtures start once. Three on two cores: tests also wait on sockets, fsyncs and
# processes starting, and a third worker fills that time (pytest 30:48 on two workers; 25:57,
# 28:24 and 26:42 on three, with a tenth of the CPU idle). A fourth is no faster (25:12 and
# 28:11, 5-6 % idle) and runs one more Spark session. Files are handed out longest first
# (tests/durations.json, refreshed by tools/test_durations.py), not by their count of tests.
PYTEST_WORKERS ?= 3
pytest: $(VENV)/.dev-installed system-deps bytecode spark-archive
	@$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

generate: $(BIN)/python
	$(BIN)/python tools/generate_protocol.py $(SPECS)

bench: $(VENV)/.dev-installed jvm
	$(BIN)/python bench/record_batch.py

clean:
	rm -rf $(VENV) $(JVM_LIB) tools/jvm/target tools/jvm/*/target .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info
