"""A validated bin-pack's file groups rewritten by pyarrow where each is a plain copy
(lakewarden.spark.arrow_rewrite), and by Spark, saying why, where one is not; read back by
pyiceberg and Spark."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest
from helpers import append_batches, make_table, manage, run_one
from pyspark.sql import SparkSession
from sqlalchemy import true

from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import JobRun
from lakewarden.db.session import transaction
from lakewarden.kinds import compaction
from lakewarden.policy.model import CompactionPolicy, ValidationPolicy
from lakewarden.runtime import Runtime
from lakewarden.spark import actions, arrow_rewrite
from lakewarden.spark import validation as validation_module
from lakewarden.spark.commits import committing_as
from lakewarden.spark.validation import validating
from lakewarden.states import TaskState
from lakewarden.tasks import costs
from services.scheduler.main import Scheduler
from services.worker.main import Worker

_task_ids = itertools.count(900_000)
EAGER = CompactionPolicy(min_small_files=2, min_input_files=2)


def _compact(
    rt: Runtime,
    spark: SparkSession,
    name: str,
    policy: CompactionPolicy = EAGER,
    validation: ValidationPolicy | None = None,
) -> dict[str, Any]:
    """sales.<name>'s compaction as a task runs it (its plan, then its run in the session,
    under commit tags and the default validation policy), minus the bookkeeping."""
    table = rt.catalog.load_table(f"sales.{name}")
    outcome = compaction.plan(policy, table, datetime.now(UTC))
    assert outcome.plan is not None, outcome.reason
    with committing_as(next(_task_ids), 1), validating(validation or ValidationPolicy()):
        return compaction.run(spark, "lake", TableRef("sales", name), outcome.plan).metrics


def _noting(fn: Any, name: str, events: list[tuple[str, float]]) -> Any:
    """`fn` as it was, noting when each call began (a spy: nothing it does changes)."""

    def noted(*args: Any, **kwargs: Any) -> Any:
        events.append((name, time.monotonic()))
        return fn(*args, **kwargs)

    return noted


def _spark_rows(spark: SparkSession, name: str) -> Counter[tuple[Any, ...]]:
    spark.sql(f"REFRESH TABLE lake.sales.{name}")
    return Counter(
        tuple(bytes(v) if isinstance(v, bytearray) else v for v in r)
        for r in spark.table(f"lake.sales.{name}").collect()
    )


def test_an_eligible_tasks_groups_are_rewritten_by_arrow(
    scheduler: Scheduler, spark_rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pyiceberg-written table's compaction task: pyarrow rewrites it, DuckDB checksums
    both sides (each output as soon as it is closed, before the commit: validation then
    reads no file), and pyiceberg reads the same rows from one file a partition, each with
    Iceberg's metrics. The driver CPU it spent is the run's cost, which the costs API
    counts."""
    table = append_batches(make_table(spark_rt, name="arrowed"), 6)  # 6 files in a, 6 in b
    before = Counter(tuple(r.values()) for r in table.scan().to_arrow().to_pylist())
    task_id = manage(spark_rt, "arrowed", {"compaction": {"min_small_files": 5}})
    events: list[tuple[str, float]] = []  # (what, when): the outputs' sums against validation
    for module, name in (
        (arrow_rewrite, "hash_written"),
        (arrow_rewrite, "file_sums"),
        (validation_module, "validate_rewrite"),
    ):
        monkeypatch.setattr(module, name, _noting(getattr(module, name), name, events))
    monkeypatch.setattr(actions, "validate_rewrite", validation_module.validate_rewrite)
    assert Worker(spark_rt).run_once()
    assert run_one(scheduler) == TaskState.SUCCEEDED
    with transaction(spark_rt.engine) as s:
        (run,) = s.query(JobRun).filter(JobRun.task_id == task_id).all()
        metrics = dict(run.metrics or {})
        (cost,) = [
            r
            for r in costs.rollup(s, "table", datetime.now(UTC) - timedelta(hours=1), true())[0]
            if r["key"].endswith("sales.arrowed")
        ]
    engine = metrics["engine"]
    assert (engine["engine"], engine["groups"], "reason" in engine) == ("arrow", 2, False)
    assert engine["seconds"]["copy"] >= 0  # where its time went
    validation = metrics["validation"]
    assert validation["status"] == "passed", validation
    assert (validation["inputs"], validation["outputs"]) == ("observed", "duckdb_as_written")
    assert validation["rows"] == 60
    # each output summed once, on the rewrite's hashing thread, begun before validation
    # began (during the other group's copy and the commit); validation read no file itself
    validating_at = next(t for what, t in events if what == "validate_rewrite")
    summed = [t for what, t in events if what == "hash_written"]
    assert len(summed) == 2 and max(summed) < validating_at, events
    assert not [what for what, _ in events if what == "file_sums"], events
    # the driver's CPU (the files' check, the copy's reader and writer threads, DuckDB's
    # sums) is the run's cost, counted in its executor CPU and by the costs API
    assert set(engine["cpu_s"]) == {"check", "read", "write", "hash"}
    assert all(v >= 0 for v in engine["cpu_s"].values()), engine
    assert metrics["cost"]["driver_cpu_s"] == engine["driver_cpu_s"] > 0
    assert metrics["cost"]["executor_cpu_s"] == pytest.approx(
        metrics["cost"]["spark_task_cpu_s"] + metrics["cost"]["driver_cpu_s"], abs=0.002
    )
    assert cost["executor_cpu_s"] >= engine["driver_cpu_s"] > 0
    table = table.refresh()
    assert Counter(tuple(r.values()) for r in table.scan().to_arrow().to_pylist()) == before
    files = [t.file for t in table.scan().plan_files()]
    assert sorted((f.partition[0], f.record_count) for f in files) == [("a", 30), ("b", 30)]
    for f in files:  # Iceberg's own metrics, from the footer: counts and bounds per column
        assert f.file_path.endswith(".parquet") and "lakewarden" in f.file_path
        assert f.value_counts == {1: 30, 2: 30, 3: 30} and f.null_value_counts[3] == 0
        assert set(f.lower_bounds) >= {1, 2} and set(f.upper_bounds) >= {1, 2}


TYPED = (
    "i int, l bigint, s string, d double, f float, b boolean, dt date, ts timestamp, "
    "ntz timestamp_ntz, dec decimal(10,2), big decimal(30,4), bin binary"
)


def test_spark_written_files_of_each_tested_type_are_copied_exactly(
    spark_rt: Runtime, spark: SparkSession
) -> None:
    """Files Iceberg-Java wrote, of every primitive type the Arrow path takes, with NULLs:
    Spark and pyiceberg read the same rows after the Arrow rewrite, which validation
    checked."""
    name = "arrow_typed"
    spark_rt.catalog.create_namespace_if_not_exists("sales")
    spark.sql(f"CREATE TABLE lake.sales.{name} ({TYPED}) USING iceberg")
    for k in range(4):
        spark.sql(
            f"INSERT INTO lake.sales.{name} SELECT CAST(id AS INT), id * 1000003, "
            "IF(id % 5 = 0, NULL, concat('s', id)), id / 3.0, CAST(id / 7.0 AS FLOAT), "
            "id % 2 = 0, date_add(DATE'2026-01-01', CAST(id AS INT)), "
            "TIMESTAMP'2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id), "
            "TIMESTAMP_NTZ'2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, id, 0), "
            "CAST(id / 4.0 AS DECIMAL(10,2)), CAST(id * 12345678901.0001 AS DECIMAL(30,4)), "
            f"IF(id % 3 = 0, NULL, CAST(concat('b', id) AS BINARY)) FROM range({k * 50}, "
            f"{k * 50 + 50})"
        )
    before = _spark_rows(spark, name)
    metrics = _compact(spark_rt, spark, name)
    assert metrics["engine"]["engine"] == "arrow", metrics["engine"]
    assert metrics["validation"]["status"] == "passed", metrics["validation"]
    assert metrics["validation"]["outputs"] == "duckdb_as_written"
    assert _spark_rows(spark, name) == before
    table = spark_rt.catalog.load_table(f"sales.{name}")
    read = table.scan().to_arrow()
    assert read.num_rows == 200 and sorted(read["i"].to_pylist()) == list(range(200))
    assert len(list(table.scan().plan_files())) == 1

    # validation off: still pyarrow's rewrite (committed to main directly), nothing summed
    for k in range(4, 6):
        spark.sql(f"INSERT INTO lake.sales.{name} SELECT * FROM lake.sales.{name} WHERE i < {k}")
    before = _spark_rows(spark, name)
    metrics = _compact(spark_rt, spark, name, validation=ValidationPolicy(enabled=False))
    assert metrics["engine"]["engine"] == "arrow", metrics["engine"]
    assert metrics["validation"]["status"] == "skipped"
    assert _spark_rows(spark, name) == before
    assert len(list(spark_rt.catalog.load_table(f"sales.{name}").scan().plan_files())) == 1


@pytest.mark.parametrize(
    ("case", "why"),
    [
        # the plan removes dangling deletes: an option only Iceberg's action takes
        ("deletes", "Iceberg's rewriteDataFiles action: an option lakewarden's bin-pack"),
        ("evolved", "Parquet schema is not the table's (evolved or name-mapped)"),
        ("off", "compaction.native_rewrite is off"),
        ("bloom", "Parquet bloom filters (write.parquet.bloom-filter-enabled.column.id)"),
    ],
)
def test_a_group_that_is_not_a_plain_copy_goes_to_spark_and_says_why(
    spark_rt: Runtime, spark: SparkSession, case: str, why: str
) -> None:
    name = f"arrow_not_{case}"
    spark_rt.catalog.create_namespace_if_not_exists("sales")
    spark.sql(
        f"CREATE TABLE lake.sales.{name} (id bigint, v string) USING iceberg "
        "TBLPROPERTIES ('format-version' = '2', 'write.delete.mode' = 'merge-on-read')"
    )
    for k in range(3):
        spark.sql(
            f"INSERT INTO lake.sales.{name} SELECT id, concat('v', id) FROM range({k}0, {k}9)"
        )
    if case == "deletes":
        spark.sql(f"DELETE FROM lake.sales.{name} WHERE id = 3")
    if case == "evolved":
        spark.sql(f"ALTER TABLE lake.sales.{name} ADD COLUMN w string")
    if case == "bloom":
        spark.sql(
            f"ALTER TABLE lake.sales.{name} SET TBLPROPERTIES "
            "('write.parquet.bloom-filter-enabled.column.id' = 'true')"
        )
    before = _spark_rows(spark, name)
    policy = EAGER.model_copy(update={"native_rewrite": case != "off"})
    if case == "deletes":  # the file with deletes qualifies for the rewrite as a small file
        policy = policy.model_copy(update={"delete_ratio_threshold": 0.01})
    metrics = _compact(spark_rt, spark, name, policy)
    assert metrics["engine"]["engine"] == "spark"
    assert why in metrics["engine"]["reason"], metrics["engine"]
    assert metrics["validation"]["status"] == "passed", metrics["validation"]
    assert metrics["validation"]["outputs"] != "duckdb"
    assert _spark_rows(spark, name) == before


def test_an_unvalidated_runs_groups_each_take_their_own_engine(
    spark_rt: Runtime, spark: SparkSession
) -> None:
    """Partition b holds files from before a column was added (its group is not a plain
    copy), partition a only files after: unvalidated, a's group is rewritten by pyarrow and
    b's by Spark in one run, `metrics.engine` saying which and why; validated, both go to
    Spark (a run's sums are one hasher's). The same rows either way, one file a partition."""
    spark_rt.catalog.create_namespace_if_not_exists("sales")
    for validated in (False, True):
        name = f"arrow_mixed_{'validated' if validated else 'unvalidated'}"
        spark.sql(
            f"CREATE TABLE lake.sales.{name} (id bigint, p string) USING iceberg PARTITIONED BY (p)"
        )
        for k in range(3):
            spark.sql(f"INSERT INTO lake.sales.{name} SELECT id, 'b' FROM range({k}0, {k}5)")
        spark.sql(f"ALTER TABLE lake.sales.{name} ADD COLUMN w string")
        for k in range(3):
            for p in ("a", "b"):
                spark.sql(
                    f"INSERT INTO lake.sales.{name} SELECT id, '{p}', concat('w', id) "
                    f"FROM range({k}5, {k}9)"
                )
        before = _spark_rows(spark, name)
        metrics = _compact(spark_rt, spark, name, validation=ValidationPolicy(enabled=validated))
        engine = metrics["engine"]
        if validated:
            assert engine["engine"] == "spark", engine
            assert "a file group does not qualify" in engine["reason"], engine
            assert metrics["validation"]["status"] == "passed", metrics["validation"]
        else:
            assert (engine["engine"], engine["arrow_groups"], engine["spark_groups"]) == (
                "arrow+spark",
                1,
                1,
            ), engine
            assert "not the table's (evolved or name-mapped)" in engine["reason"], engine
            assert engine["driver_cpu_s"] > 0  # the Arrow group's, in the run's cost
        assert (metrics["rewritten_data_files"], metrics["added_data_files"]) == (9, 2), metrics
        assert _spark_rows(spark, name) == before
        files = spark.sql(f"SELECT partition.p FROM lake.sales.{name}.files").collect()
        assert sorted(r[0] for r in files) == ["a", "b"]


def test_native_rewrite_takes_only_a_boolean() -> None:
    assert CompactionPolicy.model_validate({"native_rewrite": False}).native_rewrite is False
    with pytest.raises(pydantic.ValidationError, match="native_rewrite"):
        CompactionPolicy.model_validate({"native_rewrite": "maybe"})
