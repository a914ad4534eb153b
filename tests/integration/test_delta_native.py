"""Delta compactions rewritten by pyarrow and committed by delta-rs, checked before they commit
(lakewarden.formats.delta.native_rewrite), run on the scheduler's own thread without a JVM
(services.scheduler.dispatch). Real Delta tables written by delta-rs; the rows read back by
delta-rs and by DuckDB's Delta extension (a second, independent reader)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake
from duckdb_delta import agreed_digest as _digest
from duckdb_delta import files_per_day as _files
from fastapi.testclient import TestClient
from helpers import read_throughout, task_of, wait_for
from spark_writer import SparkWriters
from sqlalchemy import create_engine, select

from lakewarden import parquet_copy
from lakewarden.db.models import JobRun
from lakewarden.db.session import transaction
from lakewarden.formats.base import JobMarker, marker_of
from lakewarden.formats.delta import native_rewrite
from lakewarden.formats.delta.native_rewrite import Conflict, Ineligible, Part, Selection
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.outcomes import RewriteMismatch
from lakewarden.parquet_copy import Copied
from lakewarden.process import Ticker
from lakewarden.runtime import Runtime
from lakewarden.settings import Settings
from lakewarden.spark.submit import application_settings, settings_env
from services.scheduler.main import Scheduler
from services.worker.main import Worker

PLAN: dict[str, Any] = {
    "format": "delta",
    "target_file_size_bytes": 128 << 20,
    "min_file_size_bytes": 96 << 20,
    "optimize": True,
    "purge_partitions": None,
}
MARK = {"lakewarden.task-id": "7", "lakewarden.attempt": "1"}


def _batch(start: int, day: str) -> pa.Table:
    """Ten rows: `v` and `w` strings (w NULL on odd ids: a NULL can move to `v`)."""
    ids = range(start, start + 10)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": [day] * 10,
            "v": [f"v{i}" for i in ids],
            "w": [None if i % 2 else f"w{i}" for i in ids],
            "x": pa.array([i * 0.5 for i in ids], pa.float64()),
        }
    )


def _table(path: Path, files: int = 4, conf: dict[str, str] | None = None) -> str:
    """`files` appends to each of two partitions, d1 and d2 (ids 0.. and 1000..)."""
    for i in range(files):
        for d, day in enumerate(("d1", "d2")):
            write_deltalake(
                str(path),
                _batch(1000 * d + 10 * i, day),
                partition_by=["day"],
                mode="append",
                configuration=conf,
            )
    return str(path)


def _on_disk(path: str) -> set[str]:
    return {p.name for p in Path(path).rglob("*.parquet") if "_delta_log" not in p.parts}


def _threaded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Big inputs' path (past parquet_copy.INLINE_BYTES): the inputs summed on a thread of
    their own once read, each written file (40 rows in 6 row groups) summed in halves on
    two threads. The pieces each written file was summed in, as they are."""
    monkeypatch.setattr(parquet_copy, "INLINE_BYTES", 0)
    monkeypatch.setattr(parquet_copy, "ROW_GROUP_ROWS", 7)
    pieces: list[int] = []
    split = native_rewrite._halves

    def halves(location: str) -> Any:
        found = split(location)
        pieces.append(len(found))
        return found

    monkeypatch.setattr(native_rewrite, "_halves", halves)
    return pieces


@pytest.mark.parametrize("threaded", [False, True])
def test_a_plain_copy_is_rewritten_checked_and_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threaded: bool
) -> None:
    """Both partitions' four small files become one each, in one delta-rs commit at the
    version read, marked with the job (never twice), `dataChange` false, each added file
    with statistics; the rows and checksum as before (delta-rs and DuckDB), the table's
    checkpoint interval kept."""
    pieces = _threaded(monkeypatch) if threaded else []
    path = _table(tmp_path / "t", conf={"delta.checkpointInterval": "3"})
    before, version = _digest(path), DeltaTable(path).version()
    plan = {**PLAN, "path": path, "partitions": [{"day": "d1"}, {"day": "d2"}]}
    checked: list[bool] = []
    metrics = native_rewrite.compact(path, plan, MARK, lambda: checked.append(True))
    assert checked == [True]  # the policy's last look, right before the commit
    assert metrics["engine"]["engine"] == "arrow"
    assert set(metrics["engine"]["seconds"]) >= {"copy", "validate", "commit"}
    assert metrics["read_version"] == version
    assert metrics["committed_version"] == version + 1
    assert metrics["files_removed"] == 8 and metrics["files_added"] == 2
    assert metrics["bytes_added"] < metrics["bytes_removed"]
    validation = metrics["validation"]
    assert validation["status"] == "passed" and validation["when"] == "before the commit"
    assert validation["rows"] == validation["rows_after"] == before.rows == 80
    assert _digest(path) == before and _files(path) == {"d1": 1, "d2": 1}
    commit = DeltaTimeline(path).find_job_commits(7)
    assert commit is not None and marker_of(commit.summary) == JobMarker(7, 1)
    actions = DeltaTimeline(path).read_actions(version + 1)
    changed = [a.get("add") or a["remove"] for a in actions if "add" in a or "remove" in a]
    assert len(changed) == 10 and all(a["dataChange"] is False for a in changed)
    for add in (a["add"] for a in actions if "add" in a):
        stats = json.loads(add["stats"])
        day = add["partitionValues"]["day"]
        low = 0 if day == "d1" else 1000
        assert stats["numRecords"] == 40
        assert stats["minValues"]["id"] == low and stats["maxValues"]["id"] == low + 39
        assert stats["nullCount"] == {"id": 0, "v": 0, "w": 20, "x": 0}
        assert "day" not in stats["nullCount"]  # a partition column: not in the file
    # delta-rs' post-commit hook wrote the checkpoint the table's interval asks for
    assert (Path(path) / "_delta_log" / "_last_checkpoint").exists()
    # a reader pruning on the new statistics finds exactly its rows
    assert DeltaTable(path).to_pyarrow_table(filters=[("id", "=", 1005)]).num_rows == 1
    assert pieces == ([2, 2] if threaded else [])


def test_only_the_planned_partitions_and_small_files_are_copied(tmp_path: Path) -> None:
    """d2 is not in the plan; a partition with one small file is left as it is (OPTIMIZE's
    rule); with nothing to copy nothing is committed."""
    path = _table(tmp_path / "t")
    write_deltalake(path, _batch(5000, "d3"), partition_by=["day"], mode="append")
    plan = {**PLAN, "path": path, "partitions": [{"day": "d1"}, {"day": "d3"}]}
    metrics = native_rewrite.compact(path, plan, MARK, lambda: None)
    assert metrics["files_removed"] == 4 and _files(path) == {"d1": 1, "d2": 4, "d3": 1}
    again = native_rewrite.compact(path, plan, {**MARK, "lakewarden.task-id": "8"}, lambda: None)
    assert again["committed_version"] is None and again["engine"]["partitions"] == 0


def _rewrite_output(location: str, change: Callable[[pa.Table], pa.Table]) -> None:
    """The written file changed and written again in row groups of its first's rows."""
    local = location.removeprefix("file://")
    group = pq.ParquetFile(local).metadata.row_group(0).num_rows
    pq.write_table(change(pq.read_table(local)), local, row_group_size=group)


def _set(table: pa.Table, column: str, values: list[Any]) -> pa.Table:
    at = table.schema.get_field_index(column)
    return table.set_column(at, table.schema.field(at), pa.array(values, table[column].type))


def _value_changed(t: pa.Table) -> pa.Table:
    return _set(t, "v", ["changed", *t["v"].to_pylist()[1:]])


def _value_moved(t: pa.Table) -> pa.Table:
    v = t["v"].to_pylist()
    return _set(t, "v", [v[1], v[0], *v[2:]])


def _null_moved(t: pa.Table) -> pa.Table:
    """Row 1 (odd id: w NULL) gets its v in w and NULL in v."""
    v, w = t["v"].to_pylist(), t["w"].to_pylist()
    assert w[1] is None
    v[1], w[1] = None, v[1]
    return _set(_set(t, "v", v), "w", w)


# Issue 30's mutations of a rewrite (those that apply: the native path takes no deletion
# vector): each wraps the partition copy (`native_rewrite._copy`) to corrupt what it writes.
MUTATIONS: dict[str, Callable[[Any, Selection, Part, str, int], Copied]] = {
    "a file dropped": lambda copy, s, p, b, t: copy(s, Part(p.key, p.values, p.inputs[1:]), b, t),
    "a file doubled": lambda copy, s, p, b, t: copy(
        s, Part(p.key, p.values, [*p.inputs, p.inputs[0]]), b, t
    ),
    "a value changed": lambda copy, s, p, b, t: _then(copy(s, p, b, t), _value_changed),
    "a value moved between rows": lambda copy, s, p, b, t: _then(copy(s, p, b, t), _value_moved),
    "a NULL moved to its neighbour column": lambda copy, s, p, b, t: _then(
        copy(s, p, b, t), _null_moved
    ),
    # each partition's outputs hold the other's rows (registered under its own values)
    "a partition's rows moved to another": lambda copy, s, p, b, t: copy(
        s, next(o for o in s.parts if o.key != p.key), b, t
    ),
}


def _then(copied: Copied, change: Callable[[pa.Table], pa.Table]) -> Copied:
    _rewrite_output(copied.files[0][0], change)
    return copied


# Mutations also tried on big inputs' path (`_threaded`).
THREADED = ["a file doubled", "a value changed", "a NULL moved to its neighbour column"]


@pytest.mark.parametrize(
    ("mutation", "threaded"),
    [(m, False) for m in sorted(MUTATIONS)] + [(m, True) for m in THREADED],
)
def test_every_mutation_is_caught_before_anything_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mutation: str, threaded: bool
) -> None:
    """A corrupted rewrite raises RewriteMismatch naming the partition, its written files
    are deleted, and the table is as it was: no version, the same files and rows."""
    pieces = _threaded(monkeypatch) if threaded else []
    path = _table(tmp_path / "t")
    before, version, files = _digest(path), DeltaTable(path).version(), _on_disk(path)
    copy = native_rewrite._copy
    monkeypatch.setattr(
        native_rewrite,
        "_copy",
        lambda s, p, b, t, then=None: MUTATIONS[mutation](partial(copy, read_all=then), s, p, b, t),
    )
    plan = {**PLAN, "path": path, "partitions": [{"day": "d1"}, {"day": "d2"}]}
    with pytest.raises(RewriteMismatch) as caught:
        native_rewrite.compact(path, plan, MARK, lambda: None)
    assert "nothing was committed" in str(caught.value) and "day=d" in str(caught.value)
    validation: Any = caught.value.metrics["validation"]
    assert validation["status"] == "failed"
    assert DeltaTable(path).version() == version and DeltaTimeline(path).find_job_commits(7) is None
    assert _on_disk(path) == files  # the written files deleted
    assert _digest(path) == before
    assert not threaded or 2 in pieces  # a written file was summed in halves


def test_a_writer_removing_an_input_meanwhile_is_a_conflict_an_append_is_kept(
    tmp_path: Path,
) -> None:
    """Between the rewrite's read and its commit, another writer's DELETE rewrites a file
    the rewrite copied: delta-rs' conflict check refuses the commit (Conflict), nothing of
    it commits and its files are deleted. An append meanwhile commits beside it: its rows
    stay."""
    path = _table(tmp_path / "t")
    plan = {**PLAN, "path": path, "partitions": [{"day": "d1"}]}

    def between(change: Callable[[], Any]) -> Callable[[], None]:
        """`change` run as the policy's last look: after the read, before the commit."""

        def run() -> None:
            change()

        return run

    files = _on_disk(path)
    delete = between(lambda: DeltaTable(path).delete("id = 3"))
    with pytest.raises(Conflict, match="CommitFailedError"):
        native_rewrite.compact(path, plan, MARK, delete)
    assert DeltaTimeline(path).find_job_commits(7) is None
    assert _digest(path).rows == 79  # the delete, and nothing of the rewrite
    assert len(_on_disk(path) - files) == 1  # the delete's rewritten file; ours deleted

    before = _digest(path)
    append = between(
        lambda: write_deltalake(path, _batch(500, "d1"), partition_by=["day"], mode="append")
    )
    metrics = native_rewrite.compact(path, plan, MARK, append)
    assert metrics["validation"]["status"] == "passed"
    after = _digest(path)
    assert after.rows == before.rows + 10
    assert {r for r in DeltaTable(path).to_pyarrow_table()["id"].to_pylist()} >= set(
        range(500, 510)
    )
    assert _files(path) == {"d1": 2, "d2": 4}  # ours and the append's


def test_what_is_not_a_plain_copy_says_why(tmp_path: Path) -> None:
    path = _table(tmp_path / "t", files=2)
    plan = {**PLAN, "path": path, "partitions": None}
    changes: list[tuple[dict[str, Any], str]] = [
        ({"native_rewrite": False}, "compaction.native_rewrite is off"),
        ({"purge_partitions": []}, "deletion vectors to purge"),
        ({"path": "s3://bucket/t"}, "not on a local file system"),
    ]
    for change, why in changes:
        assert why in (native_rewrite.plan_ineligible({**plan, **change}) or "")
    nested = _nested(tmp_path / "nested")
    with pytest.raises(Ineligible, match="column 's' of nested type"):
        native_rewrite.select(nested, {**plan, "path": nested})


def test_a_file_whose_parquet_schema_is_not_the_tables_is_left_to_spark(tmp_path: Path) -> None:
    """A data file whose own Parquet column type is not the table's (here `x` as strings)
    is found as the copy opens it: Ineligible naming it, nothing committed, no file left."""
    path = _table(tmp_path / "t", files=2)
    version, files = DeltaTable(path).version(), _on_disk(path)
    victim = next(Path(path).glob("day=d1/*.parquet"))
    rows = pq.read_table(victim)
    at = rows.schema.get_field_index("x")
    pq.write_table(rows.set_column(at, "x", rows["x"].cast(pa.string())), victim)
    plan = {**PLAN, "path": path, "partitions": [{"day": "d2"}, {"day": "d1"}]}
    with pytest.raises(Ineligible, match=r"Parquet schema is not the table's \(x\)"):
        native_rewrite.compact(path, plan, MARK, lambda: None)
    assert DeltaTable(path).version() == version and _on_disk(path) == files


def _nested(path: Path) -> str:
    """Three small files in one partition, with a struct column (Spark's to rewrite)."""
    for i in range(3):
        rows = pa.table({"id": [i], "day": ["d1"], "s": pa.array([{"a": i}])})
        write_deltalake(str(path), rows, partition_by=["day"], mode="append")
    return str(path)


# --- the scheduler: no JVM, no application -------------------------------------------

TABLES = "/api/v1/catalogs/dlake/tables"
TABLE = f"{TABLES}/lake/events"
DUE = {"compaction": {"min_input_files": 3, "min_small_files": 3}}  # 3 small files: due


@pytest.fixture
def scheduler(db_url: str, tmp_path: Path) -> Iterator[Scheduler]:
    settings = Settings(
        database_url=db_url,
        data_dir=tmp_path / "data",
        heartbeat_interval_s=1.0,
        spark_warmup=False,
    )
    rt = Runtime(settings, db_url, create_engine(db_url, pool_size=5), role="scheduler")
    sched = Scheduler(rt)
    sched.renew()
    stop = threading.Event()
    Ticker("lease", 1.0, sched.renew, stop).start()  # held however long a JVM takes
    try:
        yield sched
    finally:
        stop.set()
        sched.pool.shutdown(wait=True)
        rt.engine.dispose()


def _register(client: TestClient, warehouse: Path, name: str, policy: dict[str, Any]) -> None:
    got = client.post(
        "/api/v1/catalogs",
        json={"name": "dlake", "type": "delta", "properties": {"warehouse": str(warehouse)}},
    )
    assert got.status_code in (201, 409), got.text
    got = client.post(TABLES, json={"namespace": "lake", "name": name, "policy": policy})
    assert got.status_code == 201, got.text
    for opened in client.get("/api/v1/tasks", params={"catalog": "dlake"}).json()["items"]:
        client.post(f"/api/v1/tasks/{opened['id']}/cancel")  # asked for below


def _compaction(client: TestClient, sched: Scheduler, name: str) -> int:
    got = client.post(f"{TABLES}/lake/{name}/tasks", json={"kind": "compaction"})
    assert got.status_code == 201, got.text
    task_id = int(got.json()["id"])
    assert Worker(sched.rt).run_once()
    task = task_of(sched.rt, task_id)
    assert task.state == "planned", (task.state, task.reason)
    return task_id


def _run_of(sched: Scheduler, task_id: int) -> JobRun:
    with transaction(sched.rt.engine) as s:
        run = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).one()
        s.expunge(run)
    return run


def _ended(sched: Scheduler, task_id: int) -> str:
    def done() -> str | None:
        state = task_of(sched.rt, task_id).state
        return state if state in ("succeeded", "failed", "pending") else None

    return wait_for(done, 120, f"task {task_id}")


def test_a_delta_compaction_runs_on_the_schedulers_thread_with_no_application(
    client: TestClient, scheduler: Scheduler, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dispatched, the compaction runs on the scheduler's pool thread: no application
    launched, no Spark session, the run in session mode with the arrow engine, its check
    and its CPU as its cost; a rerun of a task whose commit is in the log finishes from it
    (never twice). A table it turns out not to copy (a writer feature delta-rs is not
    trusted with) is handed to its application, launched by the next dispatch round with an
    application slot free. It is dispatched into the scheduler's session room, with no
    application slot free."""
    launched: list[int] = []
    monkeypatch.setattr(
        scheduler.applications, "launch", lambda fence, job, timeout: launched.append(job.task_id)
    )
    # every application slot taken: a job without Spark takes a session slot, not one
    monkeypatch.setattr(scheduler.applications, "room", lambda: 0)
    warehouse = tmp_path / "wh"
    path = _table(warehouse / "lake" / "events")
    before = _digest(path)
    _register(client, warehouse, "events", DUE)
    task_id = _compaction(client, scheduler, "events")
    assert scheduler.dispatch_once()
    assert _ended(scheduler, task_id) == "succeeded"
    run = _run_of(scheduler, task_id)
    assert launched == [] and scheduler._spark is None  # no application, no JVM
    assert run.mode == "session" and run.spark_app_id is None
    metrics = run.metrics or {}
    assert metrics["engine"]["engine"] == "arrow" and metrics["validation"]["status"] == "passed"
    assert metrics["files_removed"] == 8 and _files(path) == {"d1": 1, "d2": 1}
    # its cost is the CPU this process spent (no Spark task counts it): on the costs page
    cost = metrics["cost"]
    assert cost["executor_cpu_s"] == cost["driver_cpu_s"] > 0 and cost["spark_task_cpu_s"] == 0
    assert _digest(path) == before
    commit = DeltaTimeline(path).find_job_commits(task_id)
    assert commit is not None and int(commit.id) == metrics["committed_version"]

    # Never twice: the task's commit already in the log (as an earlier attempt leaves it)
    for i in range(3):
        write_deltalake(path, _batch(7000 + 10 * i, "d1"), partition_by=["day"], mode="append")
    task_id = _compaction(client, scheduler, "events")
    mark = {"lakewarden.task-id": str(task_id), "lakewarden.attempt": "1"}
    write_deltalake(
        path,
        _batch(9000, "d9"),
        partition_by=["day"],
        mode="append",
        commit_properties=CommitProperties(custom_metadata=mark),
    )
    version = DeltaTable(path).version()
    assert scheduler.dispatch_once()
    assert _ended(scheduler, task_id) == "succeeded"
    assert (_run_of(scheduler, task_id).metrics or {})["recovered"] is True
    assert DeltaTable(path).version() == version  # nothing rewritten again

    # Not a plain copy at run time: its application runs it, launched by the next round
    _nested(warehouse / "lake" / "nested")
    _register(client, warehouse, "nested", DUE)
    task_id = _compaction(client, scheduler, "nested")
    assert scheduler.dispatch_once()
    wait_for(lambda: scheduler.fallbacks.qsize() or None, 60, "handed to Spark")
    scheduler.dispatch_once()
    assert launched == []  # no application slot free: it waits for one
    monkeypatch.setattr(scheduler.applications, "room", lambda: 1)
    scheduler.dispatch_once()
    assert launched == [task_id]
    assert task_of(scheduler.rt, task_id).state == "running"  # its application's now


def test_a_timed_out_native_job_commits_nothing(
    client: TestClient, scheduler: Scheduler, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its deadline, a job without Spark is stopped where it would commit: the attempt
    fails saying so (retried), its files deleted, the table unchanged."""
    warehouse = tmp_path / "wh"
    path = _table(warehouse / "lake" / "events")
    version, files = DeltaTable(path).version(), _on_disk(path)
    _register(client, warehouse, "events", DUE)
    task_id = _compaction(client, scheduler, "events")
    release = threading.Event()
    copy = native_rewrite._copy

    def slow(*args: Any) -> Any:
        release.wait(60)
        return copy(*args)

    monkeypatch.setattr(native_rewrite, "_copy", slow)
    assert scheduler.dispatch_once()
    entry = scheduler.inflight[task_id]
    entry.deadline = 0.0  # past it
    scheduler.cancel_requested_jobs()
    assert entry.timed_out and entry.stop is not None and entry.stop.is_set()
    release.set()
    assert _ended(scheduler, task_id) == "pending"
    run = _run_of(scheduler, task_id)
    assert "timeout" in (run.error or ""), run.error
    assert DeltaTable(path).version() == version and _on_disk(path) == files


def test_a_reader_never_sees_a_corrupted_rewrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30 goal 5 on Delta: while a rewrite that dropped a file is written, checked
    and refused, a reader reading the table over and over (delta-rs, newest version) sees
    every row, every time."""
    path = _table(tmp_path / "t")
    rows = _digest(path).rows
    copy = native_rewrite._copy
    writing = threading.Event()

    def dropped(s: Selection, p: Part, b: str, t: int, then: Any = None) -> Copied:
        writing.set()
        return MUTATIONS["a file dropped"](partial(copy, read_all=then), s, p, b, t)

    monkeypatch.setattr(native_rewrite, "_copy", dropped)
    with read_throughout(lambda: DeltaTable(path).to_pyarrow_table().num_rows, 0) as seen:
        plan = {**PLAN, "path": path, "partitions": None}
        with pytest.raises(RewriteMismatch):
            native_rewrite.compact(path, plan, MARK, lambda: None)
    assert writing.is_set() and seen and set(seen) == {rows}, set(seen)


def _newest_adds(path: str) -> list[dict[str, Any]]:
    """The add actions of the table's newest commit."""
    newest = max((Path(path) / "_delta_log").glob("*.json"))
    return [a["add"] for a in map(json.loads, newest.read_text().splitlines()) if "add" in a]


def _spark_sums(spark_writers: SparkWriters, path: str) -> tuple[int, ...]:
    """Spark's own read of the table: rows and the sum of its hash of every column; then
    the rows at the ends of `ts` and `amount`, found by filters Spark skips files by (a
    file whose statistics' bounds were wrong would be skipped, its rows missed)."""
    sql = f"SELECT count(*) AS n, sum(hash(id, day, ts, v, amount)) AS h FROM delta.`{path}`"
    edges = [
        "ts = timestamp_seconds(1700000000)",
        "ts = timestamp_seconds(1700000000 + 39 * 3600)",
        "amount = CAST(0 AS DECIMAL(10, 2))",
        "amount = CAST(5.57 AS DECIMAL(10, 2))",
    ]
    steps = [{"sql": sql}] + [
        {"sql": f"SELECT count(*) AS n FROM delta.`{path}` WHERE {e}"} for e in edges
    ]
    (row,), *counts = spark_writers.run("delta", steps)
    return int(row["n"]), int(row["h"]), *(int(c[0]["n"]) for c in counts)


@pytest.mark.spark
@pytest.mark.timeout(1800)  # the shared Delta-family JVM: minutes to start under load
def test_sparks_tables_are_compacted_without_spark_and_the_rest_by_its_application(
    client: TestClient,
    scheduler: Scheduler,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spark_writers: SparkWriters,
) -> None:
    """A table Spark's Delta writer wrote (timestamps, decimals, NULLs) is compacted
    without Spark: Spark, delta-rs and DuckDB read the same rows after as before. A table
    that turns out not to be a plain copy (a nested column) is run by its application (here
    its code in the shared Delta-family JVM), Spark's OPTIMIZE, the run saying why."""
    warehouse = tmp_path / "wh"
    path = str(warehouse / "lake" / "events")
    steps: list[dict[str, Any]] = [
        {
            "sql": f"CREATE TABLE delta.`{path}` (id BIGINT, day STRING, ts TIMESTAMP, "
            "v STRING, amount DECIMAL(10, 2)) USING delta PARTITIONED BY (day)"
        }
    ]
    for i in range(4):
        steps.append(
            {
                "sql": f"INSERT INTO delta.`{path}` SELECT id, IF(id % 2 = 0, 'd1', 'd2'), "
                "timestamp_seconds(1700000000 + id * 3600), IF(id % 3 = 0, NULL, "
                "concat('v', id)), CAST(id / 7 AS DECIMAL(10, 2)) "
                f"FROM range({10 * i}, {10 * i + 10}, 1, 1)"
            }
        )
    spark_writers.run("delta", steps)
    before, spark_before = _digest(path), _spark_sums(spark_writers, path)
    _register(client, warehouse, "events", DUE)
    task_id = _compaction(client, scheduler, "events")
    assert scheduler.dispatch_once()
    assert _ended(scheduler, task_id) == "succeeded", _run_of(scheduler, task_id).error
    metrics = _run_of(scheduler, task_id).metrics or {}
    assert metrics["engine"]["engine"] == "arrow", metrics
    assert _files(path) == {"d1": 1, "d2": 1}
    assert _digest(path) == before and _spark_sums(spark_writers, path) == spark_before
    assert spark_before[2:] == (1, 1, 1, 1)  # each edge found, before and after
    (stats,) = [
        json.loads(a["stats"]) for a in _newest_adds(path) if a["partitionValues"]["day"] == "d2"
    ]
    assert "ts" in stats["maxValues"] and "amount" in stats["maxValues"]  # bounds kept

    # Not a plain copy: handed to its application, which runs Spark's OPTIMIZE
    rt = scheduler.rt

    def launch(fence: Any, job: Any, timeout_s: float) -> None:
        env = settings_env(application_settings(rt.settings), rt.db_url)
        step = {"job": {"task_id": job.task_id, "attempt": job.attempt, "env": env}}
        spark_writers.run("delta", [step])

    monkeypatch.setattr(scheduler.applications, "launch", launch)
    nested = _nested(warehouse / "lake" / "nested")
    before = _digest(nested)
    _register(client, warehouse, "nested", DUE)
    task_id = _compaction(client, scheduler, "nested")
    assert scheduler.dispatch_once()
    wait_for(lambda: scheduler.fallbacks.qsize() or None, 60, "handed to Spark")
    scheduler.dispatch_once()  # launches it
    assert _ended(scheduler, task_id) == "succeeded", _run_of(scheduler, task_id).error
    metrics = _run_of(scheduler, task_id).metrics or {}
    assert metrics["engine"]["engine"] == "spark", metrics
    assert "column 's' of nested type" in metrics["engine"]["reason"]
    assert metrics["operation"] == "OPTIMIZE" and metrics["validation"]["status"] == "passed"
    assert _digest(nested) == before


def test_a_native_job_cancelled_through_the_api_commits_nothing(
    client: TestClient, scheduler: Scheduler, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled while it copies, a job without Spark stops where it would commit: the task
    stays cancelled, its files are deleted, the table is unchanged."""
    warehouse = tmp_path / "wh"
    path = _table(warehouse / "lake" / "events")
    version, files = DeltaTable(path).version(), _on_disk(path)
    _register(client, warehouse, "events", DUE)
    task_id = _compaction(client, scheduler, "events")
    release, copying = threading.Event(), threading.Event()
    copy = native_rewrite._copy

    def slow(*args: Any) -> Any:
        copying.set()
        release.wait(60)
        return copy(*args)

    monkeypatch.setattr(native_rewrite, "_copy", slow)
    assert scheduler.dispatch_once()
    assert copying.wait(60)
    assert client.post(f"/api/v1/tasks/{task_id}/cancel").status_code == 200
    scheduler.cancel_requested_jobs()
    release.set()
    future = scheduler.inflight[task_id].future if task_id in scheduler.inflight else None
    if future is not None:
        future.result(60)
    assert task_of(scheduler.rt, task_id).state == "cancelled"
    assert DeltaTable(path).version() == version and _on_disk(path) == files
    assert DeltaTimeline(path).find_job_commits(task_id) is None
