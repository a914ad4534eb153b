"""The health watch works in bounded batches (issue 11): a round measures batch after batch
until nothing is due or its time budget is spent (no longer 50 tables a round, ~8 h for a
pass at 100,000 tables), tables whose metadata pointer moved since they were measured
first, then the longest unmeasured; each measurement remembers its pointer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from helpers import make_table
from sqlalchemy import select, text

from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.tables import add_table
from services.scheduler.health_watch import measure_due_tables

# name -> (measured hours ago, pointer the catalog shows, pointer last measured)
TABLES = {
    "unmoved_oldest": (48, "p1", "p1"),
    "moved": (24, "p2-new", "p2"),
    "unmoved": (24, "p3", "p3"),
    "moved_recently_measured": (12, "p4-new", "p4"),
}


def _measured(rt: Runtime, now: datetime) -> dict[str, str | None]:
    """The tables measured at `now`, with the pointer each measurement stands for."""
    with transaction(rt.engine) as s:
        rows = s.execute(
            select(ManagedTable.name, ManagedTable.health_metadata_location).where(
                ManagedTable.health_measured_at == now
            )
        ).all()
    return dict(rows)


def test_moved_pointers_first_then_the_longest_unmeasured_batch_after_batch(rt: Runtime) -> None:
    now = datetime.now(UTC)
    for name, (hours, pointer, seen) in TABLES.items():
        make_table(rt, "sales", name)
        with transaction(rt.engine) as s:
            add_table(s, rt.settings.catalog_name, TableRef("sales", name), {})
        with rt.engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE managed_tables SET health_measured_at = :at, "
                    "metadata_location = :p, health_metadata_location = :m WHERE name = :n"
                ),
                {"at": now - timedelta(hours=hours), "p": pointer, "m": seen, "n": name},
            )
    rt.settings = rt.settings.model_copy(update={"health_batch_size": 1})

    # Out of time before the first table: nothing is measured.
    assert measure_due_tables(rt, now, budget_s=0) == 0
    # The two moved tables come first, whatever their age.
    assert measure_due_tables(rt, now, limit=2) == 2
    assert _measured(rt, now) == {"moved": "p2-new", "moved_recently_measured": "p4-new"}
    # One round, batch after batch (of one table here), measures the rest, oldest first.
    assert measure_due_tables(rt, now) == 2
    assert set(_measured(rt, now)) == set(TABLES)
    assert measure_due_tables(rt, now) == 0  # nothing is due any more
