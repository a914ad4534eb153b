"""One bad table never stops the rest: every loop over managed tables (the leader's sweep,
the health watch, the poller, the alert rules) skips a table it fails on, goes on with
the others, and names the table in a `table_unreadable` alert until it works again.

Bad tables are made the ways they happen: a policy row stored before today's validation
(written with SQL, as an old release or a hand edit would), a namespace default, and an
Iceberg table whose current metadata file is corrupt on disk."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

from helpers import append_batches, make_table
from sqlalchemy import select, text

from lakewarden.alerts.rules import evaluate_task_rules
from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.locks import DBLocks
from lakewarden.db.models import Alert, ManagedTable, Task, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.events.poller import poll_once
from lakewarden.isolation import error_line
from lakewarden.leader import Fence, acquire_or_renew
from lakewarden.runtime import Runtime
from lakewarden.tables import add_table
from services.scheduler.health_watch import measure_due_tables
from services.scheduler.sweeps import sweep_due_tasks

TTL = {"ttl": {"enabled": True, "column": "id", "retention_days": 30}}
# timedelta(minutes=1e13) overflows (every sweep raised OverflowError); today's policy
# model refuses it, so a row stored earlier now fails validation when it is read.
OVERFLOWING = {"clean": {"interval_minutes": 1e13}}


def _manage(rt: Runtime, namespace: str, name: str, policy: dict | None = None) -> None:
    with transaction(rt.engine) as s:
        add_table(s, rt.settings.catalog_name, TableRef(namespace, name), policy or {})


def _store_policy(rt: Runtime, dotted: str, policy: dict) -> None:
    """Write a policy row as it might sit in the database, bypassing validation."""
    namespace, name = dotted.split(".")
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE managed_tables SET policy = CAST(:p AS jsonb) "
                "WHERE namespace = :ns AND name = :n"
            ),
            {"p": json.dumps(policy), "ns": namespace, "n": name},
        )


def _leader(rt: Runtime) -> Fence:
    with rt.engine.begin() as conn:
        fence = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "leader", 60)
    assert fence is not None
    return fence


def _tasks_by_table(rt: Runtime) -> dict[str, set[str]]:
    with transaction(rt.engine) as s:
        rows = s.execute(
            select(ManagedTable.namespace, ManagedTable.name, Task.kind).join(
                Task, Task.table_id == ManagedTable.id
            )
        ).all()
    out: dict[str, set[str]] = {}
    for namespace, name, kind in rows:
        out.setdefault(f"{namespace}.{name}", set()).add(kind)
    return out


def _unreadable(rt: Runtime) -> dict[str, str]:
    """Open table_unreadable alerts: table -> summary."""
    with transaction(rt.engine) as s:
        alerts = s.scalars(
            select(Alert).where(Alert.rule == "table_unreadable", Alert.state != "resolved")
        ).all()
        return {a.key: a.summary for a in alerts}


@contextmanager
def _corrupt_metadata(table) -> Iterator[None]:
    """The table's current metadata JSON is garbage on disk until the block ends."""
    path = Path(urlparse(table.metadata_location).path)
    good = path.read_bytes()
    path.write_text("{ this is not table metadata")
    try:
        yield
    finally:
        path.write_bytes(good)


def test_sweep_goes_on_past_a_table_it_fails_on(rt: Runtime) -> None:
    for ns, name in (("sales", "good"), ("sales", "plain"), ("sales", "bad"), ("legacy", "old")):
        make_table(rt, ns, name)
    _manage(rt, "sales", "good", TTL)
    _manage(rt, "sales", "plain")
    _manage(rt, "sales", "bad")
    _manage(rt, "legacy", "old")
    # Stored before the API refused it.
    _store_policy(rt, "sales.bad", TTL | OVERFLOWING)
    with rt.engine.begin() as conn:  # a namespace default from an older release
        conn.execute(
            text(
                "INSERT INTO namespace_policies (catalog, namespace, policy) "
                "VALUES ('lake', 'legacy', CAST(:p AS jsonb))"
            ),
            {"p": json.dumps(OVERFLOWING)},
        )
    fence = _leader(rt)
    now = datetime.now(UTC)

    created = sweep_due_tasks(rt, fence, now)

    assert _tasks_by_table(rt) == {"sales.good": {"ttl", "clean"}, "sales.plain": {"clean"}}
    assert len(created) == 3
    alerts = _unreadable(rt)
    assert set(alerts) == {"sales.bad", "legacy.old"}
    for summary in alerts.values():
        assert "sweep failed: " in summary and "Traceback" not in summary
    # A second sweep refreshes the alerts; it does not open new ones.
    assert sweep_due_tasks(rt, fence, now) == []
    with transaction(rt.engine) as s:
        assert s.scalar(select(text("count(*)")).select_from(Alert)) == 2

    # The owner fixes the table and the namespace: the next sweep serves them and resolves.
    _store_policy(rt, "sales.bad", TTL)
    with rt.engine.begin() as conn:
        conn.execute(text("DELETE FROM namespace_policies"))
    assert len(sweep_due_tasks(rt, fence, now)) == 3
    assert _tasks_by_table(rt) == {
        "sales.good": {"ttl", "clean"},
        "sales.plain": {"clean"},
        "sales.bad": {"ttl", "clean"},
        "legacy.old": {"clean"},
    }
    assert _unreadable(rt) == {}


def test_a_table_failing_midway_keeps_no_partial_work_and_the_others_keep_theirs(
    rt: Runtime,
) -> None:
    """A database error on one table's second insert (here a trigger a DBA might add)
    aborts the whole Postgres transaction unless that table runs in its own savepoint."""
    for name in ("a", "bad", "z"):
        make_table(rt, "sales", name)
        _manage(rt, "sales", name, TTL)
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                """
                CREATE FUNCTION refuse_bad_clean() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF NEW.kind = 'clean' AND NEW.table_id =
                     (SELECT id FROM managed_tables WHERE name = 'bad') THEN
                    RAISE EXCEPTION 'clean tasks of this table are refused';
                  END IF;
                  RETURN NEW;
                END $$;
                CREATE TRIGGER refuse_bad_clean BEFORE INSERT ON tasks
                  FOR EACH ROW EXECUTE FUNCTION refuse_bad_clean();
                """
            )
        )
    fence = _leader(rt)

    assert len(sweep_due_tasks(rt, fence, datetime.now(UTC))) == 4
    # The bad table's TTL task (inserted before its clean task failed) was taken back.
    assert _tasks_by_table(rt) == {"sales.a": {"ttl", "clean"}, "sales.z": {"ttl", "clean"}}
    (summary,) = _unreadable(rt).values()
    assert summary.startswith("sales.bad is skipped: sweep failed: ProgrammingError: ")
    assert "clean tasks of this table are refused" in summary and "[SQL" not in summary


def test_health_watch_measures_the_others_and_does_not_starve_them(rt: Runtime) -> None:
    good = append_batches(make_table(rt, "sales", "good"), 1)
    broken = append_batches(make_table(rt, "sales", "broken"), 1)
    _manage(rt, "sales", "good")
    _manage(rt, "sales", "broken")
    now = datetime.now(UTC)
    # The broken table (never measured) comes first; the good one was measured long ago.
    with rt.engine.begin() as conn:
        conn.execute(
            text("UPDATE managed_tables SET health_measured_at = :t WHERE name = 'good'"),
            {"t": now - timedelta(days=1)},
        )
    assert good is not None
    with _corrupt_metadata(broken):
        # One table per round: the failing table must not hold the due list forever.
        assert measure_due_tables(rt, now, limit=1) == 0
        assert measure_due_tables(rt, now, limit=1) == 1
        assert measure_due_tables(rt, now, limit=1) == 0  # both tried; neither is due
        with transaction(rt.engine) as s:
            rows = {r.name: r for r in s.scalars(select(ManagedTable))}
        assert rows["good"].health_score is not None and rows["good"].health_measured_at == now
        assert rows["broken"].health_score is None and rows["broken"].health_measured_at == now
        (summary,) = _unreadable(rt).values()
        assert summary.startswith("sales.broken is skipped: health watch failed: ")

    later = now + timedelta(seconds=rt.settings.health_interval_s + 1)
    assert measure_due_tables(rt, later) == 2
    assert _unreadable(rt) == {}


def test_poller_refreshes_the_others(rt: Runtime) -> None:
    good = make_table(rt, "sales", "good")
    broken = make_table(rt, "sales", "broken")
    _manage(rt, "sales", "good")
    _manage(rt, "sales", "broken")
    append_batches(good, 2)
    broken = append_batches(broken, 1)

    def events() -> dict[str, int]:
        with transaction(rt.engine) as s:
            rows = s.execute(
                select(ManagedTable.name, text("count(*)"))
                .join(TimelineEvent, TimelineEvent.table_id == ManagedTable.id)
                .group_by(ManagedTable.name)
            ).all()
        return dict(rows)

    with _corrupt_metadata(broken):
        assert poll_once(rt) == 1
        assert events() == {"good": 2}
        (summary,) = _unreadable(rt).values()
        assert summary.startswith("sales.broken is skipped: poller failed: ")
        assert poll_once(rt) == 0  # tried again (its pointer still moved), still failing
        assert set(_unreadable(rt)) == {"sales.broken"}
    assert poll_once(rt) == 1
    assert events() == {"good": 2, "broken": 1}
    assert _unreadable(rt) == {}


def test_alert_rules_judge_the_others_and_keep_what_they_cannot_judge(rt: Runtime) -> None:
    now = datetime.now(UTC)
    for name in ("good", "bad"):
        _manage(rt, "sales", name)
    with rt.engine.begin() as conn:
        conn.execute(
            text("UPDATE managed_tables SET health_score = 10, unhealthy_since = :t"),
            {"t": now - timedelta(hours=2)},
        )

    def open_alerts() -> set[tuple[str, str]]:
        with transaction(rt.engine) as s:
            return set(
                s.execute(select(Alert.rule, Alert.key).where(Alert.state != "resolved")).all()
            )

    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, now)
    assert open_alerts() == {("table_unhealthy", "sales.good"), ("table_unhealthy", "sales.bad")}

    # The bad table's stored SLO no longer validates; a third table turns unhealthy meanwhile.
    _store_policy(rt, "sales.bad", {"slo": {"min_score": "high"}})
    _manage(rt, "sales", "new")
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE managed_tables SET health_score = 5, unhealthy_since = :t "
                "WHERE name = 'new'"
            ),
            {"t": now - timedelta(hours=2)},
        )
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, now)
    assert open_alerts() == {
        ("table_unhealthy", "sales.good"),
        ("table_unhealthy", "sales.bad"),  # not judged, so not resolved either
        ("table_unhealthy", "sales.new"),
        ("table_unreadable", "sales.bad"),
    }
    assert _unreadable(rt)["sales.bad"].startswith(
        "sales.bad is skipped: alert rules failed: ValidationError: "
    )

    # Fixed, with a longer window: judged again, within its window, so no longer alerted.
    _store_policy(rt, "sales.bad", {"slo": {"window_minutes": 600}})
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, now)
    assert open_alerts() == {("table_unhealthy", "sales.good"), ("table_unhealthy", "sales.new")}


def test_one_alert_per_table_until_every_failing_loop_recovers(rt: Runtime) -> None:
    make_table(rt, "sales", "good")
    append_batches(make_table(rt, "sales", "bad"), 1)
    _manage(rt, "sales", "good")
    _manage(rt, "sales", "bad")
    _store_policy(rt, "sales.bad", {"compaction": {"no_such_setting": 1}})
    fence = _leader(rt)
    now = datetime.now(UTC)

    sweep_due_tasks(rt, fence, now)
    assert measure_due_tables(rt, now) == 1
    (summary,) = _unreadable(rt).values()
    assert "health watch failed: ValidationError" in summary
    assert "sweep failed: ValidationError" in summary

    _store_policy(rt, "sales.bad", {})
    sweep_due_tasks(rt, fence, now)  # the sweep recovered; the health watch has not run yet
    (summary,) = _unreadable(rt).values()
    assert "sweep" not in summary and "health watch failed" in summary
    measure_due_tables(rt, now + timedelta(seconds=rt.settings.health_interval_s + 1))
    assert _unreadable(rt) == {}

    # A table that is unregistered while failing does not leave its alert behind.
    _store_policy(rt, "sales.bad", OVERFLOWING)
    sweep_due_tasks(rt, fence, now + timedelta(days=1))
    assert set(_unreadable(rt)) == {"sales.bad"}
    with rt.engine.begin() as conn:
        conn.execute(text("DELETE FROM managed_tables WHERE name = 'bad'"))
    sweep_due_tasks(rt, fence, now + timedelta(days=2))
    assert _unreadable(rt) == {}


def test_error_line_is_one_line_without_credentials() -> None:
    exc = RuntimeError("cannot reach s3://AKIA:secret@bucket/x\n  at frame 1\n  at frame 2")
    assert error_line(exc) == "RuntimeError: cannot reach s3://***@bucket/x"
    assert error_line(ValueError()) == "ValueError"
    assert len(error_line(ValueError("x" * 1000))) == 300
