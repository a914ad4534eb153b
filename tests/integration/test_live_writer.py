"""lakewarden's table services beside a live writer (issue 28 "Never fight the writer",
issue 29 "Bad input and faults"), through the real services (`tests/soak.py`): the writer
writes for `LAKEWARDEN_SOAK_SECONDS` (45 s here by default; the issue's proof is 240) and
until each of lakewarden's services has run beside it.

Hudi: a Flink writer (`flink_writer`: PyFlink 1.17, Hudi's Flink bundle 0.14.0, table
version 6) upserts into a merge-on-read table with Flink SQL, round by round, as Bilibili's
Flink jobs do, with the concurrency control lakewarden's jobs set
(`lakewarden.formats.hudi.jobs.CONCURRENCY`) and its own compaction and clean off.
lakewarden plans no compaction of a version-6 table while its writer writes (beside this
writer, compactions lost updates: `hudi_compaction.OLD_WRITER_QUIET_S`), then compacts it
once the writer is quiet (its Hudi 1.2 jobs never upgrade a writer's table). Every key's
final value (hudi-rs) is the one the writer's own log says, none lost, none twice; nothing
lakewarden started is left pending on the timeline. A Flink writer that compacts itself is
left alone. A Hudi 1.2 writer (Spark's datasource, table version 9) is compacted and
cleaned beside as often as the policy allows, with the same checks.

Delta: Structured Streaming appends a rate source's rows while lakewarden's OPTIMIZE runs;
delta-rs reads every id from 0 to the last once: none lost, none twice.

The soaks are skipped unless LAKEWARDEN_SOAK_SECONDS is set (`make soak`: the 4-minute
proof, LAKEWARDEN_SOAK_SECONDS=240 pytest -s tests/integration/test_live_writer.py); the
bad rewrite beside a writer runs in every suite.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from soak import Soak, run_beside, soak_seconds, stop_by
from spark_writer import FLINK, SparkWriters

from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.formats.hudi.validation import digest
from lakewarden.kinds import hudi_clean, hudi_compaction

KEYS, BATCH = 3000, 400
# The Flink soak's quiet time before a version-6 table is compacted (the product's is 900 s):
# longer than any pause between the writer's rounds, short enough for a test.
QUIET_S = 60.0


def _expected(log: Path) -> dict[int, int]:
    """Every key's value as the writer's own log says: its last committed round's."""
    want: dict[int, int] = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        for i in range(entry["start"], entry["start"] + entry["size"]):
            want[i % KEYS] = entry["round"]
    return want


def _register(client: TestClient, kind: str, warehouse: Path, policy: dict[str, Any]) -> None:
    got = client.post(
        "/api/v1/catalogs",
        json={"name": "live", "type": kind, "properties": {"warehouse": str(warehouse)}},
    )
    assert got.status_code == 201, got.text
    got = client.post(
        "/api/v1/catalogs/live/tables",
        json={"namespace": "lake", "name": "t", "policy": policy},
    )
    assert got.status_code == 201, got.text


def _summary(soak: Soak) -> dict[str, dict[str, int]]:
    out: dict[str, Counter[str]] = {}
    for task, run in soak.runs():
        out.setdefault(task.kind, Counter())[run.state] += 1
    return {k: dict(v) for k, v in out.items()}


# Compaction and clean as often as the table allows, cleaning down to two instants.
SERVICES = {
    "compaction": {"min_input_files": 2, "min_small_files": 2},
    "clean": {
        "keep_last_snapshots": 2,
        "max_snapshot_age_hours": 0.000001,
        "allow_below_safety_floors": True,
    },
}


def _soak_step(tmp_path: Path) -> tuple[Path, Path, Path, float, dict[str, Any]]:
    """The soak's table, the writer's log, its stop file, the seconds it writes and the
    writer's step (`spark_writer`'s and `flink_writer`'s "soak": "hudi")."""
    table = tmp_path / "wh" / "lake" / "t"
    table.parent.mkdir(parents=True)
    log, stop = tmp_path / "writer.jsonl", tmp_path / "stop"
    seconds = soak_seconds()
    step = {
        "soak": "hudi",
        "path": table.as_uri(),
        "stop": str(stop),
        "seconds": stop_by(seconds),
        "keys": KEYS,
        "batch": BATCH,
        "log": str(log),
    }
    return table, log, stop, seconds, step


def _every_key(
    table: Path, log: Path, soak: Soak, runs: list[tuple[Any, Any]], counts: dict[str, Any]
) -> tuple[dict[str, Any], list[Any]]:
    """The soak's report, having checked every key's final value (hudi-rs) against the
    writer's own log: none lost, none twice, none wrong; and the instants lakewarden
    started (or any but a writer's delta commit) still pending on the timeline."""
    want = _expected(log)
    from hudi import HudiTable

    read = pa.Table.from_batches(HudiTable(str(table)).read())
    ids, values = read.column("id").to_pylist(), read.column("v").to_pylist()
    twice = [k for k, n in Counter(ids).items() if n > 1]
    got = dict(zip(ids, values, strict=True))
    lost = sorted(set(want) - set(got))
    wrong = sorted(k for k in want if k in got and got[k] != want[k])
    timeline = HudiTimeline(str(table))
    ours = {str(r.metrics.get(hudi_compaction.PLANNED)) for _, r in runs if r.metrics}
    ours |= {i for _, r in runs if r.metrics for i in r.metrics.get(hudi_clean.CLEANED) or []}
    left = [i for i in timeline.pending() if i.requested in ours or i.action != "deltacommit"]
    report = {
        "writer": counts,
        "keys": len(want),
        "rounds_logged": len(log.read_text().splitlines()),
        "lakewarden_runs": _summary(soak),
        "failed_runs": [(t.kind, (r.error or "")[:300]) for t, r in runs if r.state == "failed"],
        "instants": Counter(i.action for i in timeline.completed()),
        "pending_after": [i.file_name for i in timeline.pending()],
        "lost": len(lost),
        "duplicated": len(twice),
        "wrong_value": len(wrong),
    }
    assert not lost and not twice and not wrong, report
    assert len(ids) == len(want) == KEYS, report
    return report, left


@pytest.mark.spark
@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_hudi_compaction_waits_out_a_live_flink_writer_of_version_6_and_loses_nothing(
    client: TestClient,
    db_url: str,
    spark_writers: SparkWriters,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Measured at 240 s before the guard: lakewarden's compactions beside this writer lost
    33 updates (a Flink delta commit appended to the slice a compaction replaced). Now its
    compaction task waits until the writer has been quiet (`OLD_WRITER_QUIET_S`, shortened
    here to 60 s; explain says why), and runs once it is, with no new commit to wake it:
    a task that waited for a commit after the writer stopped never opened (2026-11-26)."""
    monkeypatch.setattr(hudi_compaction, "OLD_WRITER_QUIET_S", QUIET_S)
    table, log, stop, seconds, step = _soak_step(tmp_path)
    # The table exists before lakewarden looks: the writer's first round (every key).
    spark_writers.run(FLINK, [{**step, "rounds": 1}], timeout=1200)
    _register(client, "hudi", tmp_path / "wh", SERVICES)
    soak = Soak.start(db_url, tmp_path / "data")
    waiting: dict[str, Any] = {}

    def write() -> Any:
        answer = spark_writers.run(FLINK, [step], timeout=stop_by(seconds) + 600)
        why = client.get("/api/v1/catalogs/live/tables/lake/t/hudi").json()
        waiting.update(next(x for x in why["services"] if x["service"] == "compaction"))
        return answer

    try:
        # run_beside turns lakewarden until it is idle: the compaction, once quiet.
        counts = run_beside(soak, write, stop, (), seconds)
        runs = soak.runs()
    finally:
        soak.close()

    timeline = HudiTimeline(str(table))
    last_write = max(i.requested for i in timeline.completed() if i.action == "deltacommit")
    planned = [
        str(r.metrics.get(hudi_compaction.PLANNED))
        for t, r in runs
        if t.kind == hudi_compaction.KIND and r.metrics
    ]
    beside = [p for p in planned if p < last_write]  # planned before the writer's last commit
    report, left = _every_key(table, log, soak, runs, counts)
    report["kinds_run_beside_the_writer"] = beside
    print("SOAK hudi flink", json.dumps(report, default=str))
    assert left == [], report
    assert beside == [], report  # none planned while the writer wrote
    assert soak.succeeded(hudi_compaction.KIND), report  # and one once it was quiet
    assert f"only after {QUIET_S:.0f}s without one" in waiting["reason"], waiting
    # Every task lakewarden opened ended well, if after a retry (a conflict with the
    # writer fails an attempt, the next goes on).
    ended = {t.id: t.state for t, _ in runs}
    assert set(ended.values()) <= {"succeeded", "skipped"}, report


@pytest.mark.spark
@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_hudi_compaction_and_clean_beside_a_live_spark_upsert_writer_of_version_9(
    client: TestClient, db_url: str, spark_writers: SparkWriters, tmp_path: Path
) -> None:
    """A Hudi 1.2 writer (Spark's datasource, table version 9) upserts round by round
    into a merge-on-read table with the concurrency control lakewarden's jobs set, while
    lakewarden compacts and cleans it as often as the policy allows: every key's final
    value is the writer's last, none lost, none twice, nothing of ours left pending."""
    table, log, stop, seconds, step = _soak_step(tmp_path)
    spark_writers.run("hudi", [{**step, "seconds": 0}], timeout=1200)
    _register(client, "hudi", tmp_path / "wh", SERVICES)
    soak = Soak.start(db_url, tmp_path / "data")
    try:
        counts = run_beside(
            soak,
            lambda: spark_writers.run("hudi", [step], timeout=stop_by(seconds) + 600),
            stop,
            (hudi_compaction.KIND, hudi_clean.KIND),
            seconds,
        )
        runs = soak.runs()
    finally:
        soak.close()
    report, left = _every_key(table, log, soak, runs, counts)
    print("SOAK hudi spark", json.dumps(report, default=str))
    assert left == [], report
    assert soak.succeeded(hudi_compaction.KIND) and soak.succeeded(hudi_clean.KIND), report
    # Every task lakewarden opened ended well, if after a retry (a conflict with the
    # writer fails an attempt, the next goes on).
    assert {t.state for t, _ in runs} <= {"succeeded", "skipped"}, report


@pytest.mark.spark
@pytest.mark.timeout(1800)
def test_a_flink_writer_that_compacts_itself_is_left_alone(
    client: TestClient, spark_writers: SparkWriters, tmp_path: Path
) -> None:
    """Never fight the writer: a Flink writer with its own async compaction
    (`compaction.async.enabled`, planned every delta commit) has compaction instants on the
    timeline that lakewarden did not plan; lakewarden's explain says so and it opens no
    compaction, however many log files pile up."""
    table = tmp_path / "wh" / "lake" / "t"
    own = {"compaction.async.enabled": "true", "compaction.schedule.enabled": "true"}
    own["compaction.delta_commits"] = "1"
    step = {"path": str(table), "rounds": 3, "keys": 300, "batch": 100, "options": own}
    spark_writers.run(FLINK, [step], timeout=1200)
    timeline = HudiTimeline(str(table))
    assert timeline.table_version == 6  # Hudi 0.14's
    # The writer's own compactions: completed, or planned and still pending (each round's
    # job ends at the end of its input, before its async compaction finished: seen so).
    theirs = [i for i in timeline.completed() if i.action == "commit"]
    theirs += [i for i in timeline.pending() if i.action == "compaction"]
    assert theirs, [i.file_name for i in timeline.completed()]
    _register(client, "hudi", tmp_path / "wh", {"compaction": {"min_input_files": 2}})
    body = client.get("/api/v1/catalogs/live/tables/lake/t/hudi").json()
    compaction = next(s for s in body["services"] if s["service"] == "compaction")
    assert not compaction["due"], compaction
    why = compaction["reason"]
    assert "not planned by lakewarden" in why or "planned by someone else" in why, why
    tasks = client.get("/api/v1/tasks").json()["items"]
    assert [t for t in tasks if t["kind"] == hudi_compaction.KIND] == [], tasks


@pytest.mark.spark
@pytest.mark.timeout(1800)
def test_a_bad_rewrite_is_not_restored_over_another_writers_commit(
    client: TestClient, db_url: str, spark_writers: SparkWriters, tmp_path: Path
) -> None:
    """The test-only failpoint drops a row from a base file a Hilbert clustering wrote
    before its commit, then another writer commits (a row under a new key: an update of a
    file group the pending clustering replaces conflicts with it, and Hudi fails the
    write): the check before the commit finds the row missing, the clustering is never
    committed (rolled back, its plan purged), and the writer's commit is kept: nothing is
    restored over it, no savepoint made."""
    table = tmp_path / "wh" / "lake" / "t"
    cow = {"type": "COPY_ON_WRITE", "partitioned": False, "path": table.as_uri()}
    spark_writers.run(
        "hudi",
        [
            {**cow, "op": "bulk_insert", "ids": [0, 60], "value": 0},
            {**cow, "op": "bulk_insert", "ids": [60, 120], "value": 0},
        ],
    )
    policy = {"zorder": {"enabled": True, "columns": ["region", "ts"], "curve": "hilbert"}}
    _register(client, "hudi", tmp_path / "wh", policy)
    soak = Soak.start(
        db_url, tmp_path / "data", failpoint="corrupt-rewrite-then-write", failpoints_enabled=True
    )
    try:
        deadline = time.monotonic() + 1200
        soak.turn()
        while not soak.idle():
            assert time.monotonic() < deadline
            time.sleep(1.0)
            soak.turn()
        [(task, run)] = soak.runs()
    finally:
        soak.close()
    assert task.state == "failed", (task.state, run.error, run.metrics)
    metrics = run.metrics or {}
    found = metrics["validation"]
    assert found["status"] == "failed" and found["mode"] == "before commit", found
    assert (found["rows"], found["rows_after"]) == (120, 119), found
    undo = metrics["undo"]
    assert undo["committed"] is False and undo["plan_purged"] is True, undo
    assert "readers never saw it" in (run.error or ""), run.error
    timeline = HudiTimeline(str(table))
    instant = metrics[hudi_compaction.PLANNED]
    completed = {i.requested: i.action for i in timeline.completed()}
    theirs = [i for i, action in completed.items() if action == "commit" and i > instant]
    assert len(theirs) == 1, completed  # the writer's, kept
    assert instant not in completed and timeline.pending() == []
    assert not {"restore", "savepoint"} & set(completed.values())
    assert digest(str(table)).rows == 121  # the writer's row beside the 120


@pytest.mark.spark
@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_delta_optimize_beside_a_streaming_writer(
    client: TestClient, db_url: str, spark_writers: SparkWriters, tmp_path: Path
) -> None:
    from deltalake import DeltaTable

    warehouse = tmp_path / "wh"
    table = warehouse / "lake" / "t"
    stop = tmp_path / "stop"
    seconds = soak_seconds()
    create = f"CREATE TABLE delta.`{table}` (id BIGINT, ts TIMESTAMP) USING delta"
    spark_writers.run("delta", [{"sql": create}])
    _register(
        client, "delta", warehouse, {"compaction": {"min_input_files": 6, "min_small_files": 6}}
    )
    step = {
        "soak": "delta",
        "path": str(table),
        "stop": str(stop),
        "seconds": stop_by(seconds),
        "rows_per_second": 200,
        "checkpoint": str(tmp_path / "checkpoint"),
    }
    soak = Soak.start(
        db_url,
        tmp_path / "data",
        spark_conf={
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
        },
    )
    try:
        counts = run_beside(
            soak,
            lambda: spark_writers.run("delta", [step], timeout=stop_by(seconds) + 600),
            stop,
            ("compaction",),
            seconds,
        )
    finally:
        soak.close()

    delta = DeltaTable(str(table))
    ids = delta.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    twice = [k for k, n in Counter(ids).items() if n > 1]
    top = max(ids) if ids else -1
    missing = len(set(range(top + 1)) - set(ids))
    optimizes = [h for h in delta.history() if h.get("operation") == "OPTIMIZE"]
    # Each OPTIMIZE read one version and committed later: the appends in between are those
    # Delta's conflict detection checked it against (blind appends: no conflict).
    over = [int(h["version"]) - int(h["readVersion"]) - 1 for h in optimizes if "readVersion" in h]
    report = {
        "writer": counts,
        "rows": len(ids),
        "versions": delta.version(),
        "lakewarden_runs": _summary(soak),
        "optimize_commits": len(optimizes),
        "appends_committed_during_optimize": over,
        "lost": missing + max(0, counts["rows_reported"] - len(set(ids))),
        "duplicated": len(twice),
    }
    print("SOAK delta", json.dumps(report, default=str))
    assert not twice and missing == 0, report  # ids 0..top, each once: nothing lost between
    assert len(ids) >= counts["rows_reported"], report  # nor at the end
    assert optimizes and soak.succeeded("compaction"), report
