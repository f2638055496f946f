"""The web console in a real headless browser (Debian's chromium + chromium-driver, selenium).

One broker (in-process, on its own loop thread) with the schema registry's web server; data
produced by kayak's own client: Avro values registered in the registry, JSON values with keys
and headers, a group with committed offsets and no members, and a group with a live member.
Each page is loaded in chromium and must show that data; each action is done through the
page's forms. Screenshots go to docs/screenshots/ (README shows them).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kayak.broker import Broker
from kayak.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from kayak.console import mount_console
from kayak.serde import AvroSerializer
from tests.security.threaded_broker import ThreadedBroker

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import TimeoutException, WebDriverException  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (make system-deps installs them)",
)

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
PAYMENT_SCHEMA = {
    "type": "record",
    "name": "Payment",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount_cents", "type": "long"},
    ],
}
T0 = 1_764_000_000_000  # record timestamps of "events": T0, T0 + 1000, ...


@dataclass
class Console:
    broker: Broker
    threaded: ThreadedBroker
    url: str
    browser: WebDriver
    live_member: Consumer

    def open(self, path: str) -> None:
        self.browser.get(self.url + path)

    def text(self, element_id: str) -> str:
        return self.browser.find_element(By.ID, element_id).text

    def screenshot(self, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.browser.save_screenshot(str(SCREENSHOTS / f"{name}.png"))

    def submit(self, form_id: str, **fields: str) -> str:
        """Fill and send an action form; the result message shown after it ran."""
        form = self.browser.find_element(By.ID, form_id)
        for name, value in fields.items():
            element = form.find_element(By.NAME, name)
            if element.tag_name == "select":
                Select(element).select_by_value(value)
            else:
                element.clear()
                element.send_keys(value)
        self.browser.execute_script("document.getElementById('result').className = '';")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait = WebDriverWait(self.browser, 15, poll_frequency=0.05)
        try:
            wait.until(lambda d: _result_class(d) in ("ok", "error"))
        except TimeoutException:
            pytest.fail(f"no result shown for {form_id}: {self.text('result')!r}")
        assert _result_class(self.browser) == "ok", self.text("result")
        return self.text("result")


def _result_class(driver: WebDriver) -> str:
    """The result area's class; "" while a page is being replaced (no element references
    are kept across the navigation an action causes)."""
    try:
        return str(driver.execute_script(
            "const box = document.getElementById('result'); return box ? box.className : '';"
        ))
    except WebDriverException:
        return ""


def _produce_data(threaded: ThreadedBroker, broker: Broker) -> Consumer:
    """Avro payments, JSON events, an empty group with committed offsets, a live member."""
    registry = broker.schema_registry_url
    assert registry is not None
    serializer = AvroSerializer(registry)  # blocking: runs here, not on the broker's loop
    payments = [
        serializer.serialize("payments-value", PAYMENT_SCHEMA,
                             {"id": i, "customer": f"customer-{i}", "amount_cents": 1000 + i})
        for i in range(4)
    ]  # fmt: skip
    bootstrap = broker.bootstrap_servers

    async def produce() -> Consumer:
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic("payments", 2), NewTopic("events", 1)])
        async with Producer(bootstrap_servers=bootstrap) as producer:
            for i, value in enumerate(payments):
                await producer.send("payments", value, key=f"p-{i}".encode(), partition=i % 2)
            for i in range(5):
                event = json.dumps({"event": "click", "n": i}).encode()
                await producer.send("events", event, key=f"user-{i}".encode(),
                                    headers=[("source", b"web"), ("trace", bytes([0, 255]))],
                                    partition=0, timestamp=T0 + i * 1000)  # fmt: skip
            await producer.flush()
        billing = Consumer(bootstrap_servers=bootstrap, group_id="billing")
        await billing.start()
        billing.assign([TopicPartition("events", 0)])
        await billing.commit({TopicPartition("events", 0): 3})
        await billing.close()
        member = Consumer(bootstrap_servers=bootstrap, group_id="live-readers",
                          auto_offset_reset="earliest")  # fmt: skip
        await member.start()
        member.subscribe(["payments"])
        for _ in range(50):
            if member.assignment():
                break
            await member.getmany(timeout_ms=100)
        await member.commit()
        return member

    return threaded.run(produce())


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    threaded = ThreadedBroker(
        tmp_path_factory.mktemp("console"), port=0, schema_registry_port=0,
        web_mounts=(mount_console,),
    )  # fmt: skip
    broker = threaded.__enter__()
    browser = None
    member = None
    try:
        member = _produce_data(threaded, broker)
        options = Options()
        assert CHROMIUM is not None and CHROMEDRIVER is not None
        options.binary_location = CHROMIUM
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                         "--disable-gpu", "--window-size=1280,900"):  # fmt: skip
            options.add_argument(argument)
        browser = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
        browser.implicitly_wait(5)
        url = broker.schema_registry_url
        assert url is not None
        yield Console(broker, threaded, url, browser, member)
    finally:
        if browser is not None:
            browser.quit()
        if member is not None:
            threaded.run(member.close())
        threaded.__exit__(None, None, None)


def _rows(console: Console, table_id: str) -> list[list[str]]:
    """The cells' text of a table's body rows (one round trip to the browser)."""
    console.browser.find_element(By.ID, table_id)  # waits for the page to have it
    rows: list[list[str]] = console.browser.execute_script(
        "return Array.from(document.getElementById(arguments[0]).tBodies[0].rows,"
        " row => Array.from(row.cells, cell => cell.innerText));",
        table_id,
    )
    return rows


def test_root_leads_to_the_cluster_page(console: Console) -> None:
    console.open("/")
    assert console.browser.current_url.endswith("/console/")
    brokers = _rows(console, "brokers")
    assert len(brokers) == 1
    node, address, _, role, health, listeners = brokers[0]
    assert node == "0" and address == console.broker.bootstrap_servers
    assert role == "controller" and "accepts connections" in health
    assert f"PLAINTEXT://{console.broker.bootstrap_servers}" in listeners
    assert "Broker up for" in console.browser.page_source
    console.screenshot("cluster")


def test_topic_list_and_topic_page_show_partitions_watermarks_sizes_and_configs(
    console: Console,
) -> None:
    console.open("/console/topics")
    rows = {row[0]: row for row in _rows(console, "topics")}
    assert set(rows) >= {"payments", "events"}
    assert rows["events"][1:3] == ["1", "5"]  # partitions, records
    assert rows["payments"][1:3] == ["2", "4"]
    assert rows["events"][3].endswith("B") and rows["events"][4] == "0: 0-5"
    console.screenshot("topics")

    console.browser.find_element(By.LINK_TEXT, "payments").click()
    partitions = _rows(console, "partitions")
    assert [(p[0], p[4], p[5]) for p in partitions] == [("0", "0", "2"), ("1", "0", "2")]
    configs = {row[0]: row for row in _rows(console, "configs")}
    assert "retention.ms" in configs and "cleanup.policy" in configs
    console.browser.find_element(By.ID, "records-chart")
    console.screenshot("topic")


def test_message_browser_decodes_avro_json_and_text_from_offset_time_and_end(
    console: Console,
) -> None:
    console.open("/console/topics/payments/messages?partition=1&from=beginning")
    records = _rows(console, "records")
    assert [r[0] for r in records] == ["0", "1"]
    assert '"customer": "customer-1"' in records[0][4]
    assert "avro (schema 1)" in records[0][4]
    assert records[0][2].startswith("p-1")

    console.open("/console/topics/events/messages?partition=0&from=end&limit=2")
    records = _rows(console, "records")
    assert [r[0] for r in records] == ["3", "4"]
    assert '"n": 4' in records[1][4] and "json" in records[1][4]
    assert "source: web" in records[1][3] and "trace: 00 ff" in records[1][3]
    assert "user-4" in records[1][2]

    at = T0 + 2000
    console.open(f"/console/topics/events/messages?partition=0&from=timestamp&timestamp={at}")
    assert [r[0] for r in _rows(console, "records")] == ["2", "3", "4"]
    console.open("/console/topics/events/messages?partition=0&from=offset&offset=1&limit=1")
    assert [r[0] for r in _rows(console, "records")] == ["1"]

    console.open("/console/topics/events/messages?partition=0&from=end&format=hex")
    assert "7b 22" in _rows(console, "records")[0][4]  # '{"' in hex

    # Live tail: a record produced while the page polls shows up in the table.
    console.open("/console/topics/events/messages?partition=0&from=end")
    console.browser.find_element(By.ID, "tail").click()

    async def produce_one() -> None:
        async with Producer(bootstrap_servers=console.broker.bootstrap_servers) as producer:
            await producer.send_and_wait("events", b"tailed <b>text</b>", key=b"late", partition=0)

    console.threaded.run(produce_one())
    WebDriverWait(console.browser, 10, poll_frequency=0.1).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#records tr[data-offset='5']")
    )
    tailed = console.browser.find_element(By.CSS_SELECTOR, "#records tr[data-offset='5']")
    assert "tailed <b>text</b>" in tailed.text  # shown as text, not markup
    console.screenshot("messages")
    console.browser.find_element(By.ID, "tail").click()  # stop polling


def test_groups_show_state_members_lag_and_reset_offsets_of_an_empty_group(
    console: Console,
) -> None:
    console.open("/console/groups")
    groups = {row[0]: row for row in _rows(console, "groups")}
    # 3 committed of the 5 or 6 "events" (the live tail test may have added one)
    assert groups["billing"][1] == "Empty" and groups["billing"][4] in ("2", "3")
    assert groups["live-readers"][1] == "Stable" and groups["live-readers"][3] == "1"
    console.screenshot("groups")

    console.browser.find_element(By.LINK_TEXT, "live-readers").click()
    members = _rows(console, "members")
    assert len(members) == 1 and "payments-0" in members[0][4] and "payments-1" in members[0][4]
    assert console.browser.find_elements(By.ID, "reset-unavailable")  # it has a member

    console.open("/console/groups")
    console.browser.find_element(By.LINK_TEXT, "billing").click()
    offsets = _rows(console, "offsets")
    lag_before = [(o[0], o[1], o[2], o[3]) for o in offsets]
    assert lag_before[0][:3] == ("events", "0", "3")
    message = console.submit("reset-offsets", to="earliest")
    assert "events-0→0" in message
    offsets = _rows(console, "offsets")
    assert offsets[0][2] == "0" and offsets[0][4] == offsets[0][3]  # committed 0, lag = end
    console.screenshot("group")
    message = console.submit("reset-offsets", to="offset", value="2")
    assert _rows(console, "offsets")[0][2] == "2"
    message = console.submit("reset-offsets", to="latest")
    assert _rows(console, "offsets")[0][4] == "0"


def test_schema_registry_pages_show_subjects_versions_and_compatibility(
    console: Console,
) -> None:
    console.open("/console/schemas")
    subjects = {row[0]: row for row in _rows(console, "subjects")}
    assert subjects["payments-value"][1:] == ["1", "1", "BACKWARD"]
    console.screenshot("schemas")
    console.browser.find_element(By.LINK_TEXT, "payments-value").click()
    schema: Any = json.loads(console.text("schema"))
    assert schema["name"] == "Payment" and schema["namespace"] == "shop"


def test_topic_actions_create_add_partitions_edit_config_and_delete(console: Console) -> None:
    console.open("/console/topics")
    message = console.submit("create-topic", name="audit", partitions="1",
                             configs="retention.ms=3600000")  # fmt: skip
    assert "created topic audit" in message
    assert console.browser.current_url.endswith("/console/topics/audit")
    assert len(_rows(console, "partitions")) == 1
    assert _config(console, "retention.ms")[1:] == ["3600000", "dynamic_topic_config", "override"]

    assert "now has 3 partitions" in console.submit("add-partitions", total="3")
    assert [p[0] for p in _rows(console, "partitions")] == ["0", "1", "2"]

    console.submit("edit-config", name="retention.ms", value="7200000")
    assert _config(console, "retention.ms")[1] == "7200000"
    console.submit("edit-config", name="retention.ms", value="")
    assert _config(console, "retention.ms")[3] == ""  # back to the default

    assert "deleted topic audit" in console.submit("delete-topic", confirm="audit")
    assert console.browser.current_url.endswith("/console/topics")
    assert "audit" not in {row[0] for row in _rows(console, "topics")}


def _config(console: Console, name: str) -> list[str]:
    return next(row for row in _rows(console, "configs") if row[0] == name)


def test_pipeline_page_and_broker_metrics_charts(console: Console) -> None:
    """A pipeline's own page (its server, fed by real counters without Spark) shows its table
    and charts; the broker's "Pipeline & metrics" page links to it and draws its charts."""
    from types import SimpleNamespace

    from kayak.cdc.capture import CaptureStats
    from kayak.console.pipeline import PipelineConsole
    from kayak.pipeline.job import ReplicationStats
    from kayak.pipeline.metrics import TableVerification, VerificationRecord

    capture = CaptureStats(changes=120, by_table={"main.orders": 120})
    stats = ReplicationStats(batches=4, changes=120, applied=118, last_batch_behind_ms=850.0)
    stats.latency.extend([40] * 100 + [900] * 18)
    pipeline = SimpleNamespace(
        capture=SimpleNamespace(stats=capture), job=SimpleNamespace(stats=stats, query=None),
        last_verification=VerificationRecord(T0 / 1000, (TableVerification("main.orders", True,
                                                                           118),)),
    )  # fmt: skip
    server = PipelineConsole(pipeline, tables=["main.orders"], interval_s=0.1, window_s=2,
                             link_dir=console.broker.config.data_dir,
                             broker_console=f"{console.url}/console/")  # fmt: skip
    with server:
        for step in range(12):  # changes flowing while the page samples them
            capture.changes += 30 + 10 * (step % 4)
            capture.by_table["main.orders"] = capture.changes
            stats.applied = capture.changes - 5
            stats.applied_by_table = {"main.orders": stats.applied}
            stats.latency.extend([40 + 5 * step] * 30 + [300 + 20 * step] * 2)
            time.sleep(0.1)
        console.open("/console/pipeline")
        console.browser.find_element(By.ID, "chart-requests")
        console.browser.find_element(By.ID, "chart-fsync")
        console.screenshot("metrics")
        console.browser.find_element(By.CSS_SELECTOR, "#pipeline-link a").click()
        rows = _rows(console, "pipeline-tables")
        assert rows[0][0] == "main.orders" and rows[0][1] == f"{capture.changes:,}"
        assert "equal" in rows[0][4] and "118 rows" in rows[0][4]
        chart = console.browser.find_element(By.ID, "chart-changes")
        assert chart.find_elements(By.CSS_SELECTOR, "polyline")  # the samples, drawn
        console.browser.find_element(By.ID, "chart-latency")
        console.screenshot("pipeline")
