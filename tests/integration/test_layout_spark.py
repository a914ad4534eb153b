"""Clustering and Z-order (lakewarden.kinds.clustering) on real tables, end to end: a task is
planned by the worker from pyiceberg metadata and run by the scheduler on Spark. Checked
with pyiceberg: selective lookups open fewer files, the rows are the same, a good layout is
left alone, and only the poor partitions are rewritten."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from helpers import current, equal_to, manage, run_one, task_of
from pyiceberg.expressions import And
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.session import transaction
from lakewarden.fingerprint import fingerprint
from lakewarden.health.files_per_lookup import files_per_lookup
from lakewarden.kinds.clustering import layout_sql
from lakewarden.metadata import read_files
from lakewarden.runtime import Runtime
from lakewarden.spark.commits import TASK_KEY
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark

AB = pa.schema(
    [pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.int64(), nullable=False)]
)
ABR = pa.schema([*AB, pa.field("region", pa.string(), nullable=False)])
THRESHOLD = 2.0  # the policy's default max_files_per_lookup


def _table(rt: Runtime, name: str, schema: pa.Schema, partition: str | None = None) -> Table:
    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table(f"sales.{name}", schema=schema)
    if partition is not None:
        with table.update_spec() as spec:
            spec.add_field(partition, IdentityTransform(), partition)
    return rt.catalog.load_table(f"sales.{name}")


def _random_appends(table: Table, seed: str, commits: int = 20, rows: int = 200) -> Table:
    """`commits` small files of random a, b in 0..999: every file spans the whole range."""
    rng = random.Random(seed)
    for _ in range(commits):
        a = [rng.randrange(1000) for _ in range(rows)]
        b = [rng.randrange(1000) for _ in range(rows)]
        table.append(pa.table({"a": a, "b": b}, schema=AB))
        table = table.refresh()
    return table


def _probes(table: Table, n: int = 40, **where: Any) -> list[tuple[int, int]]:
    rows = [
        r for r in table.scan().to_arrow().to_pylist() if all(r[k] == v for k, v in where.items())
    ]
    return [(r["a"], r["b"]) for r in random.Random(7).sample(rows, n)]


def _files_opened(table: Table, probes: list[tuple[int, int]], **where: Any) -> float:
    """What a reader pays: files pyiceberg opens for `a = x AND b = y`, on average."""
    opened = []
    for x, y in probes:
        row_filter = And(equal_to("a", x), equal_to("b", y))
        for k, v in where.items():
            row_filter = And(row_filter, equal_to(k, v))
        opened.append(len(list(table.scan(row_filter=row_filter).plan_files())))
    return sum(opened) / len(opened)


@pytest.mark.parametrize("kind, columns", [("zorder", ["a", "b"]), ("clustering", ["a"])])
def test_rewrite_cuts_files_opened_by_lookups_and_keeps_every_row(
    scheduler: Scheduler, spark_rt: Runtime, kind: str, columns: list[str]
) -> None:
    name = f"lw_layout_{kind}"
    table = _random_appends(_table(spark_rt, name, AB), name)
    before = fingerprint(table)
    probes = _probes(table)
    opened_before = _files_opened(table, probes)
    fpl_before = files_per_lookup(read_files(table, columns).data, columns)
    total = sum(f.size for f in read_files(table).data)
    policy = {kind: {"enabled": True, "columns": columns, "target_file_size_bytes": total // 8}}
    task_id = manage(spark_rt, name, policy, kind=kind)

    assert Worker(spark_rt).run_once()
    planned = task_of(spark_rt, task_id)
    assert planned.state == "planned", planned.reason
    assert planned.plan is not None and planned.plan["where"] is None
    assert planned.plan["files_per_lookup_before"] == fpl_before
    assert run_one(scheduler) == "succeeded"

    table = spark_rt.catalog.load_table(f"sales.{name}")
    after = fingerprint(table)
    opened_after = _files_opened(table, probes)
    fpl_after = files_per_lookup(read_files(table, columns).data, columns)
    numbers = (
        f"{kind}{columns}: files opened per a=x AND b=y lookup {opened_before:.2f} -> "
        f"{opened_after:.2f}; files_per_lookup on {columns} {fpl_before} -> {fpl_after}; "
        f"data files {before.data_files} -> {after.data_files}"
    )
    print(numbers)
    assert (after.rows, after.checksum) == (before.rows, before.checksum), numbers
    assert opened_after < opened_before / 4, numbers
    assert fpl_after is not None and fpl_after <= THRESHOLD < (fpl_before or 0), numbers
    done = task_of(spark_rt, task_id)
    assert done.state == "succeeded" and done.result is not None
    assert done.result["rewritten_data_files"] == before.data_files
    assert done.result["committed_snapshot_id"] == after.snapshot_id
    summary = current(table).summary
    assert summary is not None and summary[TASK_KEY] == str(task_id)  # a retry cannot redo it

    # Laid out now: the same kind planned again finds nothing to do, and says why.
    with transaction(spark_rt.engine) as s:
        from lakewarden.tasks import repo

        again = repo.create_task(
            s, table_id=done.table_id, kind=kind, trigger={"reason": "test"}, actor="test"
        )
    assert again is not None and Worker(spark_rt).run_once()
    skipped = task_of(spark_rt, again)
    assert skipped.state == "skipped"
    assert (skipped.reason or "").startswith("layout is good: the worst partition")


def test_well_laid_out_table_is_skipped_with_a_reason(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    name = "lw_layout_sorted"
    table = _table(spark_rt, name, AB)
    for i in range(10):  # each commit writes its own band of a (as an ordered writer would)
        a = list(range(i * 100, i * 100 + 100))
        table.append(pa.table({"a": a, "b": a}, schema=AB))
        table = table.refresh()
    task_id = manage(
        spark_rt, name, {"clustering": {"enabled": True, "columns": ["a"]}}, "clustering"
    )
    assert Worker(spark_rt).run_once()
    task = task_of(spark_rt, task_id)
    assert task.state == "skipped" and task.plan is None
    assert task.reason == (
        "layout is good: the worst partition ((unpartitioned)) opens 1.0 files per lookup on "
        "['a'] <= max_files_per_lookup 2.0 (1 partition(s) measured)"
    )


def _mixed_partitions(rt: Runtime, name: str) -> Table:
    """Region 'e u' (with a space) written at random, region 'us' in disjoint bands."""
    table = _table(rt, name, ABR, partition="region")
    rng = random.Random(name)
    for i in range(12):
        a = [rng.randrange(1000) for _ in range(100)] + list(range(i * 80, i * 80 + 80))
        b = [rng.randrange(1000) for _ in range(100)] + list(range(i * 80, i * 80 + 80))
        region = ["e u"] * 100 + ["us"] * 80
        table.append(pa.table({"a": a, "b": b, "region": region}, schema=ABR))
        table = table.refresh()
    return table


def test_only_the_poor_partition_is_rewritten(scheduler: Scheduler, spark_rt: Runtime) -> None:
    name = "lw_layout_partitioned"
    table = _mixed_partitions(spark_rt, name)
    before = fingerprint(table)
    us_files = {f.path for f in read_files(table).data if dict(f.partition)["region"] == "us"}
    probes = _probes(table, region="e u")
    opened_before = _files_opened(table, probes, region="e u")
    task_id = manage(
        spark_rt,
        name,
        {"zorder": {"enabled": True, "columns": ["a", "b"], "target_file_size_bytes": 4096}},
        kind="zorder",
    )
    assert Worker(spark_rt).run_once()
    plan = task_of(spark_rt, task_id).plan
    assert plan is not None and plan["where"] == "(`region` = 'e u')", plan
    assert run_one(scheduler) == "succeeded"

    table = spark_rt.catalog.load_table(f"sales.{name}")
    after = fingerprint(table)
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    files = read_files(table).data
    assert {f.path for f in files if dict(f.partition)["region"] == "us"} == us_files
    opened_after = _files_opened(table, probes, region="e u")
    print(f"zorder where region='e u': files opened {opened_before:.2f} -> {opened_after:.2f}")
    assert opened_after < opened_before / 2, (opened_before, opened_after)
    result = task_of(spark_rt, task_id).result
    assert result is not None and result["rewritten_data_files"] == 12  # the 'e u' files only


def test_a_declared_sort_order_is_what_compaction_writes_and_clustering_sorts_by(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    """A table that declares a sort order is compacted into it (Iceberg's sort strategy with
    the table's order); clustering that names no columns plans by that order."""
    import pyarrow.parquet as pq
    from pyiceberg.table.sorting import NullOrder

    name = "lw_layout_declared"
    table = _table(spark_rt, name, AB)
    with table.update_sort_order() as order:
        order.desc("a", IdentityTransform(), NullOrder.NULLS_LAST)
    table = _random_appends(spark_rt.catalog.load_table(f"sales.{name}"), name)
    before = fingerprint(table)
    total = sum(f.size for f in read_files(table).data)
    task_id = manage(spark_rt, name, {"compaction": {"target_file_size_bytes": total // 3}})

    assert Worker(spark_rt).run_once()
    planned = task_of(spark_rt, task_id)
    assert planned.state == "planned", planned.reason
    assert planned.plan is not None
    assert (planned.plan["strategy"], planned.plan["sort_order"]) == ("sort", "table")
    assert "sorted into the table's declared order (a DESC NULLS LAST)" in (planned.reason or "")
    assert run_one(scheduler) == "succeeded"

    table = spark_rt.catalog.load_table(f"sales.{name}")
    after = fingerprint(table)
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    files = read_files(table, ["a"]).data
    assert 1 < len(files) < before.data_files
    for f in files:  # each written in the declared order, descending
        values = pq.read_table(table.io.new_input(f.path).open(), columns=["a"])["a"]
        assert values.to_pylist() == sorted(values.to_pylist(), reverse=True), f.path
    assert files_per_lookup(files, ["a"]) is not None
    assert (files_per_lookup(files, ["a"]) or 0) <= THRESHOLD  # ranges split across files
    cost = (task_of(spark_rt, task_id).result or {})["cost"]  # Spark's own task metrics
    assert cost["input_bytes"] > 0 and cost["executor_cpu_s"] > 0 and cost["tasks"] > 0, cost

    # Clustering without columns measures by the declared order: laid out already.
    with transaction(spark_rt.engine) as s:
        from lakewarden.db.models import ManagedTable
        from lakewarden.tasks import repo

        row = s.query(ManagedTable).filter_by(name=name).one()
        row.policy = {"clustering": {"enabled": True}}
        again = repo.create_task(
            s, table_id=row.id, kind="clustering", trigger={"reason": "test"}, actor="test"
        )
    assert again is not None and Worker(spark_rt).run_once()
    skipped = task_of(spark_rt, again)
    assert skipped.state == "skipped", skipped.reason
    assert "on ['a']" in (skipped.reason or ""), skipped.reason


def test_the_sql_form_is_what_iceberg_accepts(spark_rt: Runtime, spark: Any) -> None:
    """layout_sql's CALL text, run as is: Iceberg 1.10 parses the quoted sort orders, the
    Z-order and the escaped where, and rewrites only the named partition."""
    name = "lw_layout_call"
    table = _mixed_partitions(spark_rt, name)
    before = fingerprint(table)
    us_files = {f.path for f in read_files(table).data if dict(f.partition)["region"] == "us"}
    ref = TableRef("sales", name)
    options = {"rewrite-all": "true", "target-file-size-bytes": "4096"}
    for sort_order, columns in (
        ("`a` ASC NULLS LAST, `b` ASC NULLS LAST", ["a", "b"]),
        ("zorder(`a`, `b`)", ["a", "b"]),
    ):
        plan = {
            "action": "rewrite_data_files",
            "strategy": "sort",
            "sort_order": sort_order,
            "columns": columns,
            "where": "(`region` = 'e u')",
            "options": options,
        }
        row = spark.sql(layout_sql("lake", ref, plan)).collect()[0].asDict()
        assert row["rewritten_data_files_count"] > 0, (sort_order, row)
    table = spark_rt.catalog.load_table(f"sales.{name}")
    after = fingerprint(table)
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    assert {f.path for f in read_files(table).data if dict(f.partition)["region"] == "us"} == (
        us_files
    )
