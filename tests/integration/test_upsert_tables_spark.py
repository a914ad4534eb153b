"""Primary-key (upsert) tables on real Spark + Iceberg: a merge-on-read table bucketed by key
receives upserts from Spark's MERGE INTO (position deletes) and, as Flink writes them, from
Iceberg's Java writers (equality deletes: tests/upserts.py). Compaction, triggered by files
per bucket, runs through lakewarden's real path (worker plans, scheduler runs on Spark);
then pyiceberg, an independent reader, must read exactly the latest row per key of a model
kept by the test, with no delete file left and no bucket over the limit."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest
from helpers import manage, run_one, task_of
from pyspark.sql import SparkSession
from upserts import Row, create_keyed_table, merge_upserts, write_equality_upserts

from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.health.explain import explain_table
from lakewarden.health.measure import measure
from lakewarden.metadata import read_files
from lakewarden.policy.model import parse_policy
from lakewarden.runtime import Runtime
from lakewarden.states import TaskState
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark

BUCKETS = 4
LIMIT = 3  # compaction.max_files_per_bucket
POLICY: dict[str, Any] = {"compaction": {"max_files_per_bucket": LIMIT, "max_attempts": 1}}


def _round(rng: random.Random, model: dict[int, Row], n: int) -> tuple[dict[int, Row], list[int]]:
    """Upserts for round `n` (updates of existing keys and a few new ones) and deletions."""
    keys = sorted(model)
    updates = {k: (f"v{k}-{n}", n) for k in rng.sample(keys, 30)}
    updates |= {k: (f"v{k}-{n}", n) for k in range(1000 + 10 * n, 1005 + 10 * n)}
    deleted = rng.sample([k for k in keys if k not in updates], 5)
    return updates, deleted


def _per_bucket(files: list[Any]) -> dict[Any, int]:
    counts: dict[Any, int] = {}
    for f in files:
        counts[f.partition] = counts.get(f.partition, 0) + 1
    return counts


def test_upserts_compact_to_exactly_the_latest_row_per_key(
    scheduler: Scheduler, spark_rt: Runtime, spark: SparkSession
) -> None:
    catalog, ref = spark_rt.settings.catalog_name, TableRef("sales", "pk_upserts")
    spark_rt.catalog.create_namespace_if_not_exists("sales")
    create_keyed_table(spark, catalog, ref, BUCKETS)
    model: dict[int, Row] = {k: (f"v{k}-0", 0) for k in range(200)}
    initial = [(k, v, r) for k, (v, r) in model.items()]
    spark.createDataFrame(initial, "id int, v string, round int").writeTo(
        ref.spark_name(catalog)
    ).append()
    rng = random.Random(14)
    for n in range(1, 5):  # MERGE INTO and equality-delete upserts in turn
        updates, deleted = _round(rng, model, n)
        write = merge_upserts if n % 2 else write_equality_upserts
        write(spark, catalog, ref, updates, deleted)
        model.update(updates)
        for k in deleted:
            del model[k]
    # Spark applies both kinds of deletes (pyiceberg refuses to read equality deletes).
    read = spark.sql(f"SELECT id, v, round FROM {ref.spark_name(catalog)}").collect()
    assert {r.id: (r.v, r.round) for r in read} == model and len(read) == len(model)

    table = spark_rt.catalog.load_table(ref.dotted)
    before = read_files(table)
    kinds = {d.kind for d in before.deletes}
    assert kinds == {"position", "equality"}
    assert max(_per_bucket(before.data).values()) > LIMIT
    health = measure(table, parse_policy(POLICY))
    assert health.buckets is not None
    assert health.buckets["column"] == "id" and health.buckets["num_buckets"] == BUCKETS
    per_bucket = health.buckets["per_bucket"]
    assert len(per_bucket) == BUCKETS and health.buckets["over_limit"] >= 1
    assert all(b["equality_delete_files"] == 2 for b in per_bucket)  # one per bucket per round
    assert sum(b["equality_delete_rows"] for b in per_bucket) == sum(
        d.records for d in before.deletes if d.kind == "equality"
    )
    assert all(b["position_delete_files"] >= 1 for b in per_bucket)
    assert "files_per_bucket" in {s.metric for s in health.signals}

    task_id = manage(spark_rt, "pk_upserts", POLICY)
    assert Worker(spark_rt).run_once()  # plans
    task = task_of(spark_rt, task_id)
    assert task.plan is not None and task.plan["buckets"]["over_limit"] >= 1
    assert task.plan["options"]["delete-file-threshold"] == "1"
    bucket_reason = f"hold more than max_files_per_bucket {LIMIT} data files"
    assert bucket_reason in (task.reason or "")
    with transaction(spark_rt.engine) as s:
        row = s.get(ManagedTable, task.table_id)
        assert row is not None
        explained = explain_table(
            s, row, table, parse_policy(POLICY), datetime.now(UTC), settings=spark_rt.settings
        )
    assert bucket_reason in explained["kinds"]["compaction"]["reason"]

    assert run_one(scheduler) == TaskState.SUCCEEDED
    # Validation read the rewrite's inputs with both kinds of deletes applied: it passed.
    validation = (task_of(spark_rt, task_id).result or {})["validation"]
    assert validation["status"] == "passed" and validation["rows"] == len(model), validation
    table = table.refresh()
    rows = table.scan().to_arrow().to_pylist()  # pyiceberg: fails while equality deletes live
    assert len(rows) == len(model)  # no key twice
    assert {r["id"]: (r["v"], r["round"]) for r in rows} == model
    after = read_files(table)
    assert after.deletes == []
    assert table.inspect.delete_files().num_rows == 0
    assert max(_per_bucket(after.data).values()) <= LIMIT


def test_ttl_plans_and_runs_on_a_table_holding_equality_deletes(
    spark_rt: Runtime, spark: SparkSession
) -> None:
    """pyiceberg's scan refuses equality deletes, so TTL's exact planning counts cannot be
    made: the planner falls back to the file-bounds estimate and says so, and the job's
    exact count (Spark, deletes applied) guards the delete. Checked with Spark: pyiceberg
    cannot read this table until compaction has applied its equality deletes."""
    from lakewarden.kinds import ttl

    catalog, ref = spark_rt.settings.catalog_name, TableRef("sales", "pk_ttl")
    spark_rt.catalog.create_namespace_if_not_exists("sales")
    create_keyed_table(spark, catalog, ref, BUCKETS)
    name = ref.spark_name(catalog)
    spark.sql(f"ALTER TABLE {name} ADD COLUMN day date")
    for days, ids in (("DATE '2020-01-01'", "range(0, 40)"), ("current_date()", "range(40, 100)")):
        spark.sql(f"INSERT INTO {name} SELECT id, concat('v', id), 0, {days} FROM {ids} AS t(id)")
    # Keys 0-9 (old) and 50-54 (new) are deleted by equality deletes, as Flink would.
    write_equality_upserts(spark, catalog, ref, {}, deleted=[*range(10), *range(50, 55)])
    table = spark_rt.catalog.load_table(ref.dotted)
    assert any(d.kind == "equality" for d in read_files(table).deletes)

    policy = parse_policy(
        {"ttl": {"enabled": True, "column": "day", "retention_days": 30, "max_fraction": 0.9}}
    ).ttl
    outcome = ttl.plan(policy, table, datetime.now(UTC))
    assert outcome.plan is not None, outcome.reason
    assert "equality deletes" in outcome.reason and outcome.plan["rows_to_delete"] is None

    result = ttl.run(spark, catalog, ref, outcome.plan)
    assert result.metrics["counted_rows"] == 30  # keys 10-39: the deleted ones not counted
    left = {r["id"] for r in spark.sql(f"SELECT id FROM {name}").collect()}
    assert left == set(range(40, 100)) - set(range(50, 55))
