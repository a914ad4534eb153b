"""lakewarden.catalogs.foreign.detect_table on real Iceberg tables (pyiceberg, the test catalog):
the loaded table's own properties, location and snapshot summaries tell whether Amoro or a
streaming writer already maintains it."""

from __future__ import annotations

import pyarrow as pa
from helpers import SCHEMA, make_table
from pyiceberg.table import Table

from lakewarden.catalogs.foreign import detect_table
from lakewarden.runtime import Runtime


def _rows(start: int) -> pa.Table:
    ids = list(range(start, start + 4))
    return pa.table(
        {"id": ids, "region": ["a", "b"] * 2, "amount": [float(i) for i in ids]}, schema=SCHEMA
    )


def _append(table: Table, start: int, **summary: str) -> Table:
    table.append(_rows(start), snapshot_properties=summary)
    return table.refresh()


def _set(table: Table, **properties: str) -> Table:
    with table.transaction() as tx:
        tx.set_properties(properties)
    return table.refresh()


def test_amoro_properties_on_a_real_table(rt: Runtime) -> None:
    table = _append(make_table(rt, name="amoro_props"), 0)
    assert detect_table(table) is None

    # Amoro's knobs set but its switch off: Amoro does not optimize this table.
    table = _set(table, **{"self-optimizing.enabled": "false", "self-optimizing.group": "etl"})
    assert detect_table(rt.catalog.load_table("sales.amoro_props")) is None

    table = _set(table, **{"self-optimizing.enabled": "true"})
    found = detect_table(rt.catalog.load_table("sales.amoro_props"))
    assert found is not None and found.who == "amoro"
    assert "self-optimizing.enabled=true" in found.evidence


def test_amoro_commits_are_seen_within_the_last_n(rt: Runtime) -> None:
    table = _append(make_table(rt, name="amoro_commits"), 0, **{"snapshot.producer": "INGESTION"})
    assert detect_table(table) is None  # an Amoro-written ingestion commit is only a write

    table = _append(table, 4, **{"snapshot.producer": "DATA_EXPIRATION"})
    table = _append(table, 8)
    found = detect_table(rt.catalog.load_table("sales.amoro_commits"))
    assert found is not None and found.who == "amoro"
    assert "2nd latest commit carries snapshot.producer=DATA_EXPIRATION" in found.evidence

    # Older than the window looked at: no longer evidence.
    assert detect_table(table, last_n=1) is None


def test_a_flink_append_is_not_inline_compaction(rt: Runtime) -> None:
    table = make_table(rt, name="flink_appends")
    for i in range(3):
        table = _append(table, i * 4, **{"flink.job-id": "7c3b89ef", "flink.operator-id": "op"})
    assert [s.summary.operation.value for s in table.metadata.snapshots if s.summary] == [
        "append"
    ] * 3
    assert detect_table(table) is None
