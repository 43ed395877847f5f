"""The web console in a real browser: Debian's headless Chromium driven by Playwright
against a real ``floe up`` (one broker and one browser for the module).

The flow a user takes: create a topic in the UI, enable its table topic with one click
(string values, 1 s commits), produce records with confluent-kafka, watch the table
status reach them, query the table on the SQL page and read the grid. Screenshots of
the main pages go to the test's tmp dir; with ``FLOE_SCREENSHOTS=1`` (``make screenshots``)
they also replace ``docs/img/console-*.png``, so ``make test`` leaves the tree clean.

Playwright never downloads a browser here: it launches ``/usr/bin/chromium``
(``scripts/ensure-system-deps.sh test``, run by ``make test``, installs it); without it the
test fails and says so, like the Spark tests without Java.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.broker import Broker
from helpers.clients import confluent_produce
from helpers.module_broker import module_broker
from helpers.records import Record, recent_ts

pytestmark = pytest.mark.timeout(300)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
TOPIC = "clicks"
COUNT = 40
TABLE_DEADLINE_MS = 150_000
SQL_DEADLINE_MS = 120_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    # the charts sample every second (10 s by default)
    settings = {"admin.history.interval.ms": "1000"}
    with module_broker(tmp_path_factory.mktemp("console") / "data", settings) as b:
        yield b


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    assert CHROMIUM.exists(), "no /usr/bin/chromium: run scripts/ensure-system-deps.sh test"
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 860},
        )
        try:
            tab = context.new_page()
            errors: list[str] = []
            tab.on("pageerror", lambda exc: errors.append(str(exc)))
            tab.page_errors = errors
            yield tab
        finally:
            context.close()


def shot(page: Any, tmp_path: Path, name: str) -> None:
    """Save a full-page screenshot as a test artifact (and as the docs' one on request)."""
    out = tmp_path / f"console-{name}.png"
    page.screenshot(path=str(out), full_page=True)
    if os.environ.get("FLOE_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, DOCS_IMG / f"console-{name}.png")


def test_console_flow(broker: Broker, page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    base = broker.admin_url
    with urllib.request.urlopen(f"{base}/static/console.css", timeout=10) as resp:
        assert resp.status == 200  # packaged assets, served locally

    # create a topic in the UI
    page.goto(f"{base}/topics")
    page.fill('input[name="name"]', TOPIC)
    page.fill('input[name="partitions"]', "2")
    page.click("text=Create topic")
    row = page.locator(f'#topic-list tr[data-topic="{TOPIC}"]')
    expect(row).to_be_visible()

    # a bad config is refused with the config error's message
    page.fill('input[name="name"]', "bad-topic")
    page.fill('input[name="configs"]', "retention.ms=soon")
    page.click("text=Create topic")
    expect(page.locator("#flash")).to_contain_text("retention.ms")

    # one click enables the table topic with the mode and interval shown in the row
    row.locator('select[name="mode"]').select_option("string")
    row.locator('input[name="interval"]').fill("1000")
    row.locator("text=Enable table topic").click()
    expect(row.locator("text=Disable table topic")).to_be_visible()
    expect(row.locator('select[name="mode"]')).to_have_value("string")
    expect(row.locator('input[name="interval"]')).to_have_value("1000")
    shot(page, tmp_path, "topics")

    base_ts = recent_ts()
    records = [
        Record(f"user-{i % 7}".encode(), f"click {i}".encode(), (), base_ts + i, i % 2)
        for i in range(COUNT)
    ]
    confluent_produce(broker.bootstrap, TOPIC, records)

    # the topic page follows the table until it holds every record (live refresh)
    page.goto(f"{base}/topics/{TOPIC}")
    expect(page.locator("#tb-committed")).to_have_text(str(COUNT), timeout=TABLE_DEADLINE_MS)
    expect(page.locator("#tb-lag")).to_have_text("0", timeout=30_000)
    expect(page.locator("#tb-status")).to_have_text("ok")
    expect(page.locator("#tb-timeline li").first).to_contain_text("append")
    expect(page.locator("#sample-grid tbody tr").first).to_be_visible(timeout=30_000)
    expect(page.locator("#message-grid")).to_contain_text(f"click {COUNT - 1}")
    # its charts: the burst of records in, and the table's lag line
    expect(page.locator('#ch-records polyline[data-series="records in"]')).to_have_count(1)
    expect(page.locator("#ch-records .chart-max")).not_to_have_text("max 0")
    expect(page.locator('#ch-table-lag polyline[data-series="lag"]')).to_have_count(1)
    shot(page, tmp_path, "topic")

    page.goto(base + "/")
    expect(page.locator(f'#ov-table-list tr[data-topic="{TOPIC}"] [data-f="lag"]')).to_have_text(
        "0"
    )
    # a rate once the overview refreshed twice
    expect(page.locator("#ov-in")).not_to_have_text("\u2013", timeout=15_000)
    expect(page.locator(f'#ch-records polyline[data-series="{TOPIC}"]')).to_have_count(1)
    expect(page.locator(f'#ch-table-lag polyline[data-series="{TOPIC}"]')).to_have_count(1)
    shot(page, tmp_path, "overview")

    # SQL: a read-only query lands in the grid; a write is refused with a message
    page.goto(f"{base}/sql")
    page.fill(
        'textarea[name="statement"]',
        f"SELECT count(*) AS n, count(DISTINCT _kafka_key) AS users FROM floe.default.{TOPIC}",
    )
    page.click("#sql-run")
    cells = page.locator("#sql-grid tbody tr").first.locator("td")
    expect(cells.nth(0)).to_have_text(str(COUNT), timeout=SQL_DEADLINE_MS)
    expect(cells.nth(1)).to_have_text("7")
    expect(page.locator("#sql-grid thead th").nth(0)).to_have_text("n")
    shot(page, tmp_path, "sql")
    page.fill('textarea[name="statement"]', f"DROP TABLE floe.default.{TOPIC}")
    page.click("#sql-run")
    expect(page.locator("#sql-error")).to_contain_text("not a read-only query: DropTable")

    # schemas: two versions of a subject, and their diff
    register_versions(broker.registry_url, "clicks-value")
    page.goto(f"{base}/schemas")
    page.click("text=clicks-value")
    expect(page.locator("#diff")).to_contain_text('+      "name": "page"')
    shot(page, tmp_path, "schemas")

    # groups: a consumer that committed part of the topic shows its lag
    consume_some(broker.bootstrap, "dashboard", 10)
    page.goto(f"{base}/groups")
    expect(page.locator('#group-list tr[data-group="dashboard"] [data-f="lag"]')).to_have_text(
        str(COUNT - 10)
    )
    page.click("text=dashboard")
    expect(page.locator("#gr-lag")).to_have_text(str(COUNT - 10))
    shot(page, tmp_path, "groups")

    # its consumer is gone: a preview changes nothing, a reset (confirmed) moves it back
    page.select_option('#reset-form select[name="topic"]', TOPIC)
    page.select_option('#reset-form select[name="to"]', "earliest")
    page.click("#reset-preview")
    expect(page.locator("#reset-grid")).to_contain_text("would be")
    expect(page.locator("#gr-lag")).to_have_text(str(COUNT - 10))
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#reset-apply")
    expect(page.locator("#flash")).to_contain_text("Reset 2 partition(s).")
    expect(page.locator("#gr-lag")).to_have_text(str(COUNT))
    assert page.page_errors == []


def register_versions(registry_url: str, subject: str) -> None:
    """Two Avro versions of ``subject`` through the registry's Confluent HTTP API."""
    fields = [{"name": "user", "type": "string"}]
    for extra in ([], [{"name": "page", "type": "string", "default": "/"}]):
        record = {"type": "record", "name": "Click", "fields": fields + extra}
        body = json.dumps({"schema": json.dumps(record)}).encode()
        request = urllib.request.Request(
            f"{registry_url}/subjects/{subject}/versions",
            data=body,
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 200


def consume_some(bootstrap: str, group: str, count: int) -> None:
    """Consume ``count`` records of one partition-ordered read and commit them."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "broker.address.family": "v4",
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got = 0
        deadline = time.monotonic() + 30
        while got < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got += 1
        assert got == count
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, count)], asynchronous=False)
        consumer.commit(offsets=[TopicPartition(TOPIC, 1, 0)], asynchronous=False)
    finally:
        consumer.close()
