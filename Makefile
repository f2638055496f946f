# kayak: two commands matter. `make demo` runs the main job; `make test` runs everything CI runs.
# Both create .venv on first use and reinstall only when pyproject.toml changes.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SPECS  ?= ../shared/kafka-message-specs

.PHONY: demo test lint typecheck pytest generate bench clean system-deps java

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

demo: $(VENV)/.spark-installed java
	$(BIN)/kayak demo

test: $(VENV)/.dev-installed system-deps lint typecheck pytest

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


# Spark runs on Java 17; machines of this kind have it, others get Debian's headless JRE.
java:
	@command -v java >/dev/null 2>&1 || { \
		echo "installing Java 17 (Debian package) for Spark"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check kayak tools tests bench

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy

# pytest exits 5 when it collected nothing; that must fail the build, never pass it.
# Test files are spread over PYTEST_WORKERS processes (pytest-xdist), each file kept whole so
# its module fixtures start once; most tests wait on sockets and subprocesses, not the CPU.
PYTEST_WORKERS ?= 2
pytest: $(VENV)/.dev-installed system-deps
	@$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

generate: $(BIN)/python
	$(BIN)/python tools/generate_protocol.py $(SPECS)

bench: $(VENV)/.dev-installed
	$(BIN)/python bench/record_batch.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info
