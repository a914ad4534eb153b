"""The on-call dashboard in Chromium: the overview lists a table after a real compaction,
the table page's file-size histogram agrees with pyiceberg, cancel and retry work from
their buttons, a revert is dry-run then applied, a viewer sees no action button, and no
page logs a console error (checked for every page by `open_page`). One compaction (real
Spark) for the module.

Chromium is Debian's (/usr/bin/chromium) driven by Playwright; the API is real uvicorn on a
free port, on the Spark tests' database. Each test gets a fresh browser context (its own
cookies); a failed test leaves a screenshot of each page it opened in test-artifacts/."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from conftest import leading_scheduler
from helpers import (
    append_batches,
    bearer,
    issue_token,
    make_table,
    manage,
    run_one,
    task_of,
)
from sqlalchemy import text

from lakewarden import process
from lakewarden.alerts import store
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from services.api.app import serve_in_thread
from services.scheduler.health_watch import measure_due_tables
from services.worker.main import Worker

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Error, Page
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@dataclass
class Console:
    """What a page said on its console as errors, and the errors it raised."""

    errors: list[str] = field(default_factory=list)

    def watch(self, page: Page) -> None:
        page.on("console", self._console)
        page.on("pageerror", self._uncaught)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"{message.text} ({message.location.get('url')})")

    def _uncaught(self, error: Error) -> None:
        self.errors.append(f"uncaught: {error}")


@pytest.fixture
def open_page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Any]:
    """`open_page(base_url)`: a page in a fresh context (no cookies). After the test: no
    console errors on any page it opened, and a screenshot of each if the test failed."""
    pages: list[Page] = []
    console = Console()
    contexts = []
    failed_before = request.session.testsfailed  # the call's report is counted before teardown

    def open_one(base_url: str) -> Page:
        context = browser.new_context(base_url=base_url, viewport={"width": 1400, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        console.watch(page)
        pages.append(page)
        return page

    yield open_one
    if request.session.testsfailed > failed_before:
        ARTIFACTS.mkdir(exist_ok=True)
        for i, page in enumerate(pages):
            shot = ARTIFACTS / f"{request.node.name}-{i}.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot of {page.url}: {shot}")
    for context in contexts:
        context.close()
    assert console.errors == [], f"console errors: {console.errors}"


def login(page: Page, token: str) -> None:
    """Log in through the login form, as a person does."""
    page.goto("/ui/login")
    page.fill("input[name=token]", token)
    page.click("form.login button[type=submit]")
    page.wait_for_url("**/ui/")


# docs/operations.md's screenshot: written to docs/ when LAKEWARDEN_UPDATE_SCREENSHOT=1 (so a plain
# test run leaves the checkout clean), else to test-artifacts/.
DOCS_SCREENSHOT = (
    Path(__file__).resolve().parents[2] / "docs" / "overview.png"
    if os.environ.get("LAKEWARDEN_UPDATE_SCREENSHOT") == "1"
    else ARTIFACTS / "overview.png"
)
MIB = 1024 * 1024
# health's file_size_buckets: <1, 1-8, 8-32, 32-128, 128-512, >512 MB (lower bound inclusive)
BUCKET_FLOORS = (0, 1 * MIB, 8 * MIB, 32 * MIB, 128 * MIB, 512 * MIB)
TABLE = "sales.ui_orders"


@dataclass(frozen=True)
class World:
    url: str
    rt: Runtime
    admin: str
    viewer: str
    compaction_task: int
    # The alert this module fired: the session's database may hold other tests' alerts (in
    # whatever order the tests ran), so the tests look at this one only.
    alert_id: int

    def table_page(self, name: str = "ui_orders") -> str:
        return f"/ui/t/{self.rt.settings.catalog_name}/sales/{name}"


@pytest.fixture(scope="module")
def world(spark_rt: Runtime, spark: SparkSession) -> Iterator[World]:
    """sales.ui_orders compacted by a real Spark job, sales.ui_events registered with small
    files (its compaction waiting), both measured; a heartbeat and a firing alert; the API
    on a free port; an admin's and a viewer's token."""
    rt = spark_rt
    with leading_scheduler(rt, spark) as scheduler:
        append_batches(make_table(rt, name="ui_orders"), 6, rows=20, regions=("a", "b", "c"))
        task_id = manage(
            rt,
            "ui_orders",
            # the default (the Arrow path): its driver CPU is the run's cost the page plots
            {"compaction": {"min_small_files": 5, "min_input_files": 5}},
        )
        assert Worker(rt).run_once()
        assert run_one(scheduler) == "succeeded"
        append_batches(make_table(rt, name="ui_events"), 8)
        admin, viewer = (
            issue_token(rt, name="ui-admin"),
            issue_token(rt, "viewer", name="ui-viewer"),
        )
        with serve_in_thread(rt) as url:
            register = httpx.post(
                f"{url}/api/v1/tables",
                json={"namespace": "sales", "name": "ui_events"},
                headers=bearer(admin),
            )
            assert register.status_code == 201, register.text
            measure_due_tables(rt, datetime.now(UTC))
            process.beat(rt)
            with transaction(rt.engine) as s:
                store.fire(
                    s,
                    "table_unhealthy",
                    "lake/sales.ui_events",
                    severity="warning",
                    summary="sales.ui_events is below its health SLO",
                    details=store.table_details(rt.settings.catalog_name, "sales", "ui_events"),
                    runbook="docs/operations.md#alerts",
                )
                alert_id = s.execute(
                    text(
                        "SELECT id FROM alerts WHERE rule = 'table_unhealthy'"
                        " AND key = 'lake/sales.ui_events' AND state <> 'resolved'"
                    )
                ).scalar_one()
            yield World(url, rt, admin, viewer, task_id, alert_id)


def file_size_buckets(sizes: list[int]) -> list[int]:
    counts = [0] * len(BUCKET_FLOORS)
    for size in sizes:
        counts[max(i for i, floor in enumerate(BUCKET_FLOORS) if size >= floor)] += 1
    return counts


def test_the_overview_lists_the_compacted_table(world: World, open_page: Any) -> None:
    page = open_page(world.url)
    login(page, world.admin)
    row = page.locator(f"tr.table-row[data-table='{TABLE}']")
    row.wait_for()
    assert "compaction" in row.inner_text()  # its last success, per kind
    assert page.locator("tr.table-row").count() == 2
    # The signals the health watch stored: the waiting table's small files fire (the reason
    # in the tooltip), the compacted table's no longer do.
    waiting = page.locator("tr.table-row[data-table='sales.ui_events'] .signal")
    assert waiting.all_inner_texts() == ["compaction: reducible files"]
    assert "min_small_files" in (waiting.get_attribute("title") or "")
    assert row.locator(".signal").count() == 0
    page.wait_for_load_state("networkidle")
    DOCS_SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(DOCS_SCREENSHOT), full_page=True)
    print(f"overview screenshot: {DOCS_SCREENSHOT}")
    # Filtered on the server: a namespace glob that matches neither table.
    page.fill("input[name=namespace]", "nothing_*")
    page.press("input[name=namespace]", "Enter")
    page.locator("p.count", has_text="0 tables match").wait_for()


def test_the_costs_page_plots_what_the_compaction_cost(world: World, open_page: Any) -> None:
    """The world's compaction recorded its cost (on the Arrow path, the driver's CPU): the
    costs page plots its CPU per kind, lists it, and its CSV link serves the same rows."""
    page = open_page(world.url)
    login(page, world.admin)
    page.goto("/ui/costs?by=kind")
    bar = page.locator("#cost-plot rect.bar[data-label='compaction']")
    bar.wait_for()
    assert float(bar.get_attribute("data-value") or 0) > 0
    row = page.locator("tr[data-key='compaction']")
    assert row.count() == 1 and "compaction" in row.inner_text()
    csv_text = page.request.get("/ui/costs.csv?by=kind").text()
    assert csv_text.splitlines()[0].startswith("kind,runs,") and "compaction," in csv_text


def test_the_histogram_has_one_bar_per_bucket_matching_pyiceberg(
    world: World, open_page: Any
) -> None:
    page = open_page(world.url)
    login(page, world.admin)
    page.goto(world.table_page())
    bars = page.locator("#histogram svg rect.bar")
    bars.first.wait_for()
    table = world.rt.catalog.load_table(TABLE)
    sizes = [task.file.file_size_in_bytes for task in table.scan().plan_files()]
    assert len(sizes) == 3  # one file per region after the compaction
    assert bars.count() == len(BUCKET_FLOORS)
    shown = [int(bars.nth(i).get_attribute("data-value") or -1) for i in range(bars.count())]
    assert shown == file_size_buckets(sizes)
    # ... and one bar per partition for the partitions' file counts
    assert page.locator("#partition-files svg rect.bar").count() == 3
    page.locator("#explain table.explain").wait_for()
    # Branches and tags (after the page, from GET …/refs); no readiness panel: it is off.
    main = page.locator("#refs tr.ref[data-ref='main']")
    main.wait_for()
    current = table.current_snapshot()
    assert current is not None and f"{current.snapshot_id} (current)" in main.inner_text()
    assert page.locator("table.readiness").count() == 0
    # The compaction's run says what its post-rewrite validation found.
    page.goto(f"/ui/tasks/{world.compaction_task}")
    assert "validation passed" in page.locator("p.validation").inner_text()


def test_cancel_and_retry_work_from_their_buttons(world: World, open_page: Any) -> None:
    page = open_page(world.url)
    login(page, world.admin)
    page.goto(world.table_page())
    page.select_option("select[name=kind]", "compaction")
    with page.expect_navigation():
        page.click("form[action$='/trigger'] button")
    task_id = int(re.sub(r".*/ui/tasks/(\d+)$", r"\1", page.url))
    assert task_of(world.rt, task_id).state == "pending"

    with page.expect_navigation():
        page.click("#cancel")
    assert page.locator("#task-state").inner_text() == "cancelled"
    assert task_of(world.rt, task_id).state == "cancelled"

    with page.expect_navigation():
        page.click("#retry")
    assert "retried" in page.locator(".flash").inner_text(), page.content()
    again = int(re.sub(r".*/ui/tasks/(\d+)$", r"\1", page.url))
    assert task_of(world.rt, again).state == "pending"
    assert page.locator("#task-state").inner_text() == "pending"
    with page.expect_navigation():  # leave nothing open for the other tests
        page.click("#cancel")
    assert task_of(world.rt, again).state == "cancelled"


def test_pause_blockers_freeze_and_ack_work_from_their_buttons(
    world: World, open_page: Any
) -> None:
    page = open_page(world.url)
    login(page, world.admin)
    api = httpx.Client(base_url=world.url, headers=bearer(world.admin))
    table = "/api/v1/tables/sales/ui_orders"
    page.goto(world.table_page())
    page.fill("form[action$='/pause'] input[name=reason]", "backfill tonight")
    with page.expect_navigation():
        page.click("form[action$='/pause'] button")
    assert "backfill tonight" in page.locator(".banner.paused").inner_text()
    assert api.get(table).json()["paused"]["reason"] == "backfill tonight"
    with page.expect_navigation():
        page.click("form[action$='/resume'] button")
    assert api.get(table).json()["paused"] is None

    page.fill("input[name=holder]", "ui-writer")
    with page.expect_navigation():
        page.click("form[action$='/blockers'] button")
    assert [b["holder"] for b in api.get(f"{table}/blockers").json()] == ["ui-writer"]
    with page.expect_navigation():
        page.click("form[action$='/remove'] button")
    assert api.get(f"{table}/blockers").json() == []

    page.goto("/ui/")
    page.fill("form[action$='/freeze'] input[name=reason]", "incident 42")
    with page.expect_navigation():
        page.click("form[action$='/freeze'] button")
    assert "incident 42" in page.locator(".banner.frozen").inner_text()
    with page.expect_navigation():
        page.click("form[action$='/unfreeze'] button")
    assert api.get("/api/v1/maintenance").json()["frozen"] is False

    page.goto("/ui/alerts")
    with page.expect_navigation():
        page.click(f"tr[data-alert='{world.alert_id}'] button")
    (alert,) = [a for a in api.get("/api/v1/alerts").json()["items"] if a["id"] == world.alert_id]
    assert alert["state"] == "acknowledged" and alert["acked_by"] == "token:ui-admin"
    api.close()


def test_a_revert_is_dry_run_then_applied_from_the_table_page(world: World, open_page: Any) -> None:
    """An admin reverts one commit: the dry run's page says what goes (files and rows),
    Apply commits it, pyiceberg reads the result; a bad id is refused with what to fix."""
    table = append_batches(make_table(world.rt, name="ui_fix"), 3, rows=10)
    api = httpx.Client(base_url=world.url, headers=bearer(world.admin))
    r = api.post("/api/v1/tables", json={"namespace": "sales", "name": "ui_fix"})
    assert r.status_code == 201, r.text
    first, second, _ = [s.snapshot_id for s in table.refresh().snapshots()]
    page = open_page(world.url)
    login(page, world.admin)
    page.goto(world.table_page("ui_fix"))

    page.fill("form[action$='/fix/revert'] input[name=from_snapshot]", "not-a-number")
    page.fill("form[action$='/fix/revert'] input[name=to_snapshot]", str(second))
    with page.expect_navigation():
        page.click("form[action$='/fix/revert'] button")
    assert "from_snapshot must be a snapshot id" in page.locator(".flash.error").inner_text()

    page.fill("form[action$='/fix/revert'] input[name=from_snapshot]", str(first))
    page.fill("form[action$='/fix/revert'] input[name=to_snapshot]", str(second))
    with page.expect_navigation():
        page.click("form[action$='/fix/revert'] button")
    assert page.locator("h1").inner_text() == "Revert of sales.ui_fix: dry run"
    assert page.locator("tr.removed").inner_text().split() == [
        "taken",
        "out",
        "of",
        "main",
        "2",
        "10",
    ]
    assert sorted(r["id"] for r in table.refresh().scan().to_arrow().to_pylist()) == list(range(30))

    with page.expect_navigation():
        page.click("form[action$='/fix/revert/apply'] button")
    assert "revert committed" in page.locator(".flash.ok").inner_text()
    ids = sorted(r["id"] for r in table.refresh().scan().to_arrow().to_pylist())
    assert ids == list(range(10)) + list(range(20, 30))

    # Write-audit-publish's panel appears with the policy; the leader has audited nothing.
    policy = {"publish": {"enabled": True, "branch": "audit"}}
    assert api.put("/api/v1/tables/sales/ui_fix/policy", json=policy).status_code == 200
    page.goto(world.table_page("ui_fix"))
    panel = page.locator("table.publish").inner_text()
    assert "no commit on the branch audited yet" in panel
    api.close()


def test_a_viewer_sees_no_action_buttons(world: World, open_page: Any) -> None:
    page = open_page(world.url)
    login(page, world.viewer)
    for path in (
        "/ui/",
        world.table_page(),
        world.table_page("ui_events"),
        f"/ui/tasks/{world.compaction_task}",
        "/ui/alerts",
        "/ui/trends",
        "/ui/costs",
    ):
        page.goto(path)
        page.wait_for_load_state("networkidle")  # health and explain have loaded
        assert page.locator("h1, h2").count() > 0, path
        actions = page.locator("form[method=post]:not(.logout), button.action")
        assert actions.count() == 0, f"{path}: {actions.all_inner_texts()}"
        if path == "/ui/alerts":  # the alert is shown, without its button
            assert page.locator(f"tr[data-alert='{world.alert_id}']").count() == 1
