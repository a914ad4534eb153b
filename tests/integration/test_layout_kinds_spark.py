"""Clustering and Z-order on real tables: fewer files opened by selective lookups,
the same rows, and a good layout left alone."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from helpers import manage, run_one
from pyiceberg.expressions import And, EqualTo

from lakewarden.db.models import Task
from lakewarden.db.session import transaction
from lakewarden.layout import files_per_lookup
from lakewarden.metadata import read_files
from lakewarden.runtime import Runtime
from lakewarden.verify import fingerprint
from services.worker.main import Worker

pytestmark = pytest.mark.spark

AB = pa.schema(
    [pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.int64(), nullable=False)]
)


def _random_table(rt: Runtime, name: str, commits: int = 16, rows: int = 250):  # type: ignore[no-untyped-def]
    rng = random.Random(name)
    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table(f"sales.{name}", schema=AB)
    for _ in range(commits):
        table.append(
            pa.table(
                {
                    "a": [rng.randrange(1000) for _ in range(rows)],
                    "b": [rng.randrange(1000) for _ in range(rows)],
                },
                schema=AB,
            )
        )
        table = table.refresh()
    return table


def _files_opened(table, probes: list[tuple[int, int]]) -> float:  # type: ignore[no-untyped-def]
    """What a reader pays: files pyiceberg must open for `a = x AND b = y`, on average."""
    opened = [
        len(list(table.scan(row_filter=And(EqualTo("a", x), EqualTo("b", y))).plan_files()))
        for x, y in probes
    ]
    return sum(opened) / len(opened)


@pytest.mark.parametrize("kind, columns", [("zorder", ["a", "b"]), ("clustering", ["a"])])
def test_layout_rewrite_cuts_files_opened_and_keeps_rows(
    scheduler,
    spark_rt: Runtime,
    kind: str,
    columns: list[str],  # type: ignore[no-untyped-def]
) -> None:
    name = f"layout_{kind}"
    table = _random_table(spark_rt, name)
    before = fingerprint(table)
    rows = table.scan().to_arrow().to_pylist()
    probes = [(r["a"], r["b"]) for r in random.Random(7).sample(rows, 40)]
    opened_before = _files_opened(table, probes)
    total = sum(f.size for f in read_files(table).data)
    task_id = manage(
        spark_rt,
        name,
        {
            kind: {
                "enabled": True,
                "columns": columns,
                "target_file_size_bytes": max(1024, total // 8),
            }
        },
        kind=kind,
    )
    assert Worker(spark_rt).run_once()
    assert run_one(scheduler) == "succeeded"

    table = spark_rt.catalog.load_table(f"sales.{name}")
    after = fingerprint(table)
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    opened_after = _files_opened(table, probes)
    fpl = files_per_lookup(read_files(table, columns).data, columns)
    print(
        f"{kind}{columns}: files opened per a=x AND b=y lookup {opened_before:.1f} -> "
        f"{opened_after:.1f}; files_per_lookup -> {fpl}; files {before.data_files} -> "
        f"{after.data_files}"
    )
    assert opened_after < opened_before / 2, (opened_before, opened_after)
    with transaction(spark_rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.plan is not None
        assert task.plan["files_per_lookup_before"] > 2.0

    # Laid out now: the same kind asked again finds nothing worth doing.
    with spark_rt.engine.begin() as conn:
        from sqlalchemy import text

        conn.execute(
            text(
                "INSERT INTO tasks (table_id, kind, state, trigger) SELECT table_id, "
                "kind, 'pending', '{}' FROM tasks WHERE id = :i"
            ),
            {"i": task_id},
        )
    assert Worker(spark_rt).run_once()
    with transaction(spark_rt.engine) as s:
        latest = s.query(Task).order_by(Task.id.desc()).first()
        assert latest is not None and latest.state == "skipped"
        assert "layout is good" in (latest.reason or "")
