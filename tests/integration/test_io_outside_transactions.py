"""No HTTP or catalog I/O while a transaction is open: a slow alert sink, a catalog read by
a refresh or the health watch, holds no lock that another transaction waits for (each is
probed with a lock_timeout). The writes that follow are guarded, so idempotency holds:
an alert state is delivered once, a commit ingested once, a row never goes back."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from helpers import Receiver, append_batches, make_table
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from sqlalchemy import select, text

from lakewarden.alerts.sinks import deliver_pending
from lakewarden.alerts.store import acknowledge, fire, resolve_absent
from lakewarden.catalogs import catalog as catalog_module
from lakewarden.catalogs.catalog import TableRef
from lakewarden.catalogs.metadata_view import MetadataView
from lakewarden.db.models import Alert, ManagedTable, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.events.refresh import refresh_table
from lakewarden.runtime import Runtime
from lakewarden.states import AlertState
from services.scheduler.health_watch import measure_due_tables

LOCK_TIMEOUT = "500ms"
REF = TableRef("sales", "orders")


@pytest.fixture
def sink(rt: Runtime) -> Iterator[Receiver]:
    """A webhook that holds each request until released."""
    r = Receiver(hold_s=10)
    rt.settings.alert_webhook_url = r.url + "/hook"
    yield r
    r.close()


def _fire(rt: Runtime, key: str = "k") -> int:
    with transaction(rt.engine) as s:
        fire(s, "task_failed", key, severity="critical", summary=key, details={}, runbook="r")
        return s.scalars(select(Alert.id).where(Alert.key == key)).one()


def _alert(rt: Runtime, alert_id: int) -> Alert:
    with transaction(rt.engine) as s:
        alert = s.get(Alert, alert_id)
        assert alert is not None
        return alert


def _in_background(fn: Callable[[], int]) -> tuple[threading.Thread, list[int]]:
    out: list[int] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    return thread, out


def _states_sent(sink: Receiver) -> list[str]:
    return [body["state"] for _, body in sink.received]


def _deliver(rt: Runtime) -> int:
    with httpx.Client(timeout=30) as client:
        return deliver_pending(rt.engine, rt.settings, client)


def test_a_slow_sink_does_not_block_acknowledging_the_alert(rt: Runtime, sink: Receiver) -> None:
    alert_id = _fire(rt)
    thread, delivered = _in_background(lambda: _deliver(rt))
    assert sink.arrived.wait(5)  # the delivery is under way, and stays there
    with transaction(rt.engine) as s:
        s.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        acked = acknowledge(s, alert_id, "oncall")  # takes the alert's row lock
    assert acked is not None and acked.state == AlertState.ACKNOWLEDGED
    sink.release.set()
    thread.join(10)
    # What was sent is what is recorded as delivered; the acknowledgement, a change since,
    # is delivered next (in the same round), and then nothing more.
    assert delivered == [2]
    assert _states_sent(sink) == [
        AlertState.FIRING,
        AlertState.ACKNOWLEDGED,
    ]
    assert _alert(rt, alert_id).delivered_state == AlertState.ACKNOWLEDGED
    assert _deliver(rt) == 0


def test_an_alert_resolved_during_its_delivery_is_delivered_resolved(
    rt: Runtime, sink: Receiver
) -> None:
    alert_id = _fire(rt)
    thread, _ = _in_background(lambda: _deliver(rt))
    assert sink.arrived.wait(5)
    with transaction(rt.engine) as s:
        s.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        assert resolve_absent(s, "task_failed", set()) == 1
    sink.release.set()
    thread.join(10)
    # The firing delivery's outcome is not recorded over the resolution (the claim was
    # superseded): the resolution is delivered, and then nothing more.
    assert _alert(rt, alert_id).delivered_state == AlertState.RESOLVED
    assert _states_sent(sink) == [AlertState.FIRING, AlertState.RESOLVED]
    assert _deliver(rt) == 0


def test_two_deliverers_at_once_send_each_alert_once(rt: Runtime, sink: Receiver) -> None:
    ids = {_fire(rt, key) for key in ("a", "b", "c", "d")}
    sink.release.set()  # answer at once; the deliverers still overlap
    runs = [_in_background(lambda: _deliver(rt)) for _ in range(2)]
    for thread, _ in runs:
        thread.join(10)
    assert sum(n for _, out in runs for n in out) == len(ids)
    assert sorted(body["id"] for _, body in sink.received) == sorted(ids)


# --- catalog reads: refresh (every commit road) and the health watch ------------------


def _probe_locks(rt: Runtime, problems: list[str]) -> None:
    """What a migration would do now: take the tables a refresh and the health watch
    write, exclusively. It waits (and times out) for any transaction that touched them."""
    with rt.engine.connect() as conn, conn.begin() as tx:
        conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        try:
            conn.execute(
                text("LOCK TABLE managed_tables, timeline_events IN ACCESS EXCLUSIVE MODE")
            )
        except Exception as exc:
            problems.append(str(exc).splitlines()[0])
        tx.rollback()


def _probing_catalog(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, before: Callable[[], None]
) -> list[str]:
    """Every read of a table's metadata from the catalog calls `before` first; the
    locations read (so a test can check the probe ran)."""
    catalog = rt.catalog
    assert isinstance(catalog, SqlCatalog)
    real = catalog._convert_orm_to_iceberg

    real_view = catalog_module.read_view
    reads: list[str] = []

    def read(orm: Any) -> Table:
        before()
        reads.append(orm.metadata_location)
        return real(orm)

    def view(io: Any, location: str) -> MetadataView | None:
        before()
        reads.append(location)
        return real_view(io, location)

    # Where every read of a JDBC catalog's table ends: one table's load_table, and the
    # set-based catalog.find_tables' view of its metadata file.
    monkeypatch.setattr(catalog, "_convert_orm_to_iceberg", read)
    monkeypatch.setattr(catalog_module, "read_view", view)
    return reads


def _managed(rt: Runtime, policy: dict[str, Any] | None = None) -> Table:
    table = append_batches(make_table(rt), 2)
    with transaction(rt.engine) as s:
        s.add(ManagedTable(catalog="lake", namespace="sales", name="orders", policy=policy or {}))
    return table


def _refreshes(rt: Runtime) -> bool:
    ingested = refresh_table(rt, rt.settings.catalog_name, REF, source="notify")
    return ingested is not None and len(ingested.new_event_ids) == 2


def _measures(rt: Runtime) -> bool:
    return measure_due_tables(rt, datetime.now(UTC)) == 1


@pytest.mark.parametrize("reads", [_refreshes, _measures], ids=["refresh", "health watch"])
def test_the_catalog_is_read_with_no_transaction_open(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, reads: Callable[[Runtime], bool]
) -> None:
    _managed(rt)
    problems: list[str] = []
    probed = _probing_catalog(rt, monkeypatch, lambda: _probe_locks(rt, problems))
    assert reads(rt)
    assert probed, "the catalog was read without the probe"
    assert problems == []


def test_a_refresh_from_an_older_read_does_not_set_the_table_back(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refresh A reads the catalog, then refresh B records a newer commit before A writes:
    A reads again instead of recording its older state, and every commit is one event."""
    table = _managed(rt)
    assert refresh_table(rt, rt.settings.catalog_name, REF, source="poll") is not None
    table = append_batches(table, 1)
    a_read, b_done = threading.Event(), threading.Event()
    catalog = rt.catalog
    assert isinstance(catalog, SqlCatalog)
    real = catalog_module.read_view

    def read(io: Any, location: str) -> MetadataView | None:
        loaded = real(io, location)
        if threading.current_thread().name == "refresh-a" and not a_read.is_set():
            a_read.set()
            assert b_done.wait(10)
        return loaded

    monkeypatch.setattr(catalog_module, "read_view", read)
    a = threading.Thread(
        target=lambda: refresh_table(rt, rt.settings.catalog_name, REF, source="notify"),
        name="refresh-a",
    )
    a.start()
    assert a_read.wait(10)
    newest = append_batches(table, 1)
    refresh_table(rt, rt.settings.catalog_name, REF, source="webhook")  # B
    b_done.set()
    a.join(10)
    with transaction(rt.engine) as s:
        row = s.scalars(select(ManagedTable)).one()
        assert row.metadata_location == newest.metadata_location
        snapshots = list(s.scalars(select(TimelineEvent.snapshot_id)))
    assert sorted(snapshots) == sorted(snap.snapshot_id for snap in newest.snapshots())
