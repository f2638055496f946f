"""``kayak cdc run`` against a broker that only speaks SASL_SSL: the admin client that creates
the change topics must log in as the producer does."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kayak.cdc.sqlite import enable
from kayak.client.sync import Admin
from kayak.pipeline.workload import create_orders
from tests.cli.secured_broker import secured_broker
from tests.fixtures.certs import TlsFiles

pytestmark = pytest.mark.timeout(180)


def test_cdc_run_creates_its_topics_on_a_sasl_ssl_broker(
    tmp_path: Path, tls_files: TlsFiles
) -> None:
    db = tmp_path / "shop.db"
    create_orders(str(db), 100)
    enable(str(db), "orders")
    with secured_broker(tmp_path, tls_files) as broker:
        stderr_path = tmp_path / "stderr.txt"
        with open(stderr_path, "wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "kayak", "cdc", "run", f"sqlite:{db}", "orders",
                 "-b", broker.bootstrap_servers, "--format", "json",
                 "--status-interval", "0.5", *broker.x_options(),
                 # A producer property the admin client does not take: it must not get it.
                 "-X", "linger.ms=2"],
                stdout=subprocess.DEVNULL, stderr=stderr,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            # Before the admin client got the security settings, it spoke plaintext to
            # the SASL_SSL listener and the first topic was never created.
            while "capturing: captured 100" not in stderr_path.read_text():
                assert process.poll() is None, stderr_path.read_text()[-3000:]
                assert time.monotonic() < deadline, stderr_path.read_text()[-3000:]
                time.sleep(0.1)
        finally:
            process.send_signal(signal.SIGTERM)
            status = process.wait(30)
        assert status == 0, stderr_path.read_text()[-3000:]
        with Admin(broker.client_config()) as admin:
            topics = admin.list_topics()
        assert [t for t in topics if t.endswith(".orders")], topics
