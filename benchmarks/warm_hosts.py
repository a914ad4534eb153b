"""B44 (Delta) and B45 (Hudi): a tiny compaction task end to end on a warm family host
(`warm_families`: services.scheduler.family_hosts) against the same task as its own Spark
application (spark-submit, a JVM per attempt), alternated in one run; for Delta also the
task as it runs by default, without a JVM on the scheduler's thread
(`formats.delta.native_rewrite`), against deltalake's own `optimize.compact()` on an
identical copy (B38's peer, issue 30 goal 2). The Spark sides' policy turns the native
rewrite off (`native_rewrite: false`): since 2026-11-27 they run the Spark rewrite checked
before its commit (`formats.delta.staged_rewrite`), not OPTIMIZE, so their figures from
before that day measured a different path.

End to end as the leader runs it: an in-process scheduler holding the lease dispatches the
planned task and polls its applications (`Applications.poll`) until the run's outcome is
recorded; timed from the dispatch to the run no longer running (the worker's planning,
before, is not timed). Each side compacts its own copy of one template (Delta: 4 appends
of 10 rows to one partition, written by delta-rs; Hudi: B23's merge-on-read writer at 200
rows, 4 upsert rounds, in a Hudi-family child process). Every copy is read back after
(delta-rs; Hudi's by hudi-rs): rows and checksum equal to the template's. The host's own
start and its first job are measured once, untimed in the ratio (`host_cold_s`).

    python -m benchmarks --only B44,B45
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlalchemy import delete, text

from benchmarks.applications import job_run, plan_it
from benchmarks.harness import Context, Figure, Stat, measuring
from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import Catalog as CatalogRow
from lakewarden.db.session import transaction
from lakewarden.process import Ticker
from lakewarden.tables import add_table
from lakewarden.tasks import repo
from services.scheduler.main import Scheduler

NAMESPACE = "lake"
CATALOGS = {"delta": "b44delta", "hudi": "b45hudi"}
POLICY: dict[str, Any] = {
    "compaction": {"min_input_files": 2, "min_small_files": 2},
    "clean": {"enabled": False},
}
SPARK_POLICY = {**POLICY, "compaction": {**POLICY["compaction"], "native_rewrite": False}}
SETTINGS: dict[str, Any] = {
    "application_master": "local[1]",
    "application_driver_memory": "768m",
    "heartbeat_interval_s": 1.0,
    "spark_warmup": False,
    "warm_families": ["delta", "hudi"],
    # As the Delta kinds' tests: a few tasks, not Delta's 50 snapshot partitions.
    "spark_conf": {
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
    },
}
HUDI_ROWS = 200
# A merge-on-read table at Hudi's current table version (B23's writer pins version 6, which
# lakewarden compacts only 15 minutes after its last delta commit: docs/hudi.md).
_HUDI_CHILD = """
import sys
from pathlib import Path
from lakewarden.settings import Settings
from lakewarden.spark.session import build_session
spark = build_session(Settings(data_dir=Path(sys.argv[2])), "postgresql://b@127.0.0.1:1/x",
                      "b45-writer", family="hudi")
rows = int(sys.argv[3])
options = {
    "hoodie.table.name": "t",
    "hoodie.datasource.write.table.type": "MERGE_ON_READ",
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.datasource.write.partitionpath.field": "region",
    "hoodie.metadata.enable": "false",
    "hoodie.embed.timeline.server": "false",
    "hoodie.compact.inline": "false",
    "hoodie.clean.automatic": "false",
    "hoodie.upsert.shuffle.parallelism": "2",
    "hoodie.insert.shuffle.parallelism": "2",
}
for round_ in range(5):
    start, size = (0, rows) if round_ == 0 else ((round_ * rows // 5) % rows, rows // 5)
    df = spark.range(start, start + size, 1, 2).selectExpr(
        f"id % {rows} AS id", "CONCAT('r', CAST(id % 4 AS STRING)) AS region",
        f"CAST({round_} AS BIGINT) AS v", f"CAST({round_} AS BIGINT) AS ts")
    op = "insert" if round_ == 0 else "upsert"
    df.write.format("hudi").options(**options, **{"hoodie.datasource.write.operation": op}
        ).mode("append").save(sys.argv[1])
spark.stop()
"""


def b44_b45(ctx: Context) -> list[Figure]:
    delta = Figure(
        "B44",
        "a tiny Delta compaction task (4 files of 10 rows) end to end, dispatch to outcome "
        "recorded, on the leader's warm Delta host (`warm_families`); and without a JVM "
        "(native rewrite, the default)",
        "the same task as its own Spark application (a JVM per attempt), and deltalake "
        "optimize.compact() on an identical copy, alternated in the same run",
        "report (issue 30 goal 2: <= 1.5x delta-rs)",
    )
    hudi = Figure(
        "B45",
        f"a tiny Hudi merge-on-read compaction task ({HUDI_ROWS} rows, 4 upsert rounds) end "
        "to end, dispatch to outcome recorded, on the leader's warm Hudi host",
        "the same task as its own Spark application, alternated in the same run",
        "report",
    )
    with measuring("B44", delta.measure, delta.compared_with, delta.goal) as fig:
        work = Path(tempfile.mkdtemp(prefix="b44-", dir=ctx.work_dir))
        try:
            _measure(ctx, work, delta, hudi)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if fig.error:
        delta.error = hudi.error = fig.error
    delta.seconds = hudi.seconds = fig.seconds
    return [delta, hudi]


def _measure(ctx: Context, work: Path, delta: Figure, hudi: Figure) -> None:
    n = ctx.repeats
    rt = dataclasses.replace(
        ctx.rt, settings=ctx.rt.settings.model_copy(update=SETTINGS), process_id=""
    )
    templates = {"delta": work / "template-delta", "hudi": work / "template-hudi"}
    _write_delta(templates["delta"])
    subprocess.run(
        [sys.executable, "-c", _HUDI_CHILD, str(templates["hudi"]), str(work / "spark"), "200"],
        check=True,
        capture_output=True,
    )
    sides = ("host", "own", "native", "rs")
    names = ["warm", *(f"{side}_{i}" for i in range(n) for side in sides)]
    for fmt, catalog in CATALOGS.items():
        warehouse = work / fmt
        for name in names:
            shutil.copytree(templates[fmt], warehouse / NAMESPACE / name)
        with transaction(rt.engine) as s:
            s.execute(delete(CatalogRow).where(CatalogRow.name == catalog))
            props = {"warehouse": str(warehouse)}
            s.add(CatalogRow(name=catalog, type=fmt, properties=props, version=1))
    rt.catalogs.forget()
    with rt.engine.begin() as conn:  # a clean slate: an earlier run's tables, its lease
        conn.execute(
            text("DELETE FROM managed_tables WHERE catalog = ANY(:c)"),
            {"c": list(CATALOGS.values())},
        )
        conn.execute(text("DELETE FROM leader_lease"))
    sched = Scheduler(rt)
    sched.renew()
    stop = threading.Event()
    Ticker("lease", 1.0, sched.renew, stop).start()
    times: dict[str, dict[str, list[float]]] = {f: {"host": [], "own": []} for f in CATALOGS}
    rs: list[float] = []
    native: list[float] = []
    cold: dict[str, float] = {}
    try:
        for fmt in CATALOGS:  # each host's start and first job: untimed in the ratio
            cold[fmt] = _task(sched, fmt, "warm", host=True)
        for i in range(n):
            for fmt in CATALOGS:
                times[fmt]["host"].append(_task(sched, fmt, f"host_{i}", host=True))
                times[fmt]["own"].append(_task(sched, fmt, f"own_{i}", host=False))
            native.append(_task(sched, "delta", f"native_{i}", host=False, native=True))
            rs.append(_delta_rs(work / "delta" / NAMESPACE / f"rs_{i}"))
    finally:
        stop.set()
        sched.applications.kill_all()
    _check_rows(work, templates, names)
    for fig, fmt in ((delta, "delta"), (hudi, "hudi")):
        host, own = Stat.of(times[fmt]["host"]), Stat.of(times[fmt]["own"])
        fig.ratio = Stat.of(
            [o / h for o, h in zip(times[fmt]["own"], times[fmt]["host"], strict=True)]
        )
        fig.ratio_label = "own application / warm host time"
        fig.values.update(host_s=host, own_application_s=own, host_cold_s=cold[fmt])
        fig.notes.append(
            f"{n} alternated pairs after one untimed host job (its start and first job: "
            "host_cold_s); rows and checksums equal on every copy"
        )
    host_rs = Stat.of([h / r for h, r in zip(times["delta"]["host"], rs, strict=True)])
    own_rs = Stat.of([o / r for o, r in zip(times["delta"]["own"], rs, strict=True)])
    native_rs = Stat.of([a / r for a, r in zip(native, rs, strict=True)])
    delta.values.update(
        delta_rs_compact_s=Stat.of(rs),
        host_over_delta_rs=host_rs,
        own_over_delta_rs=own_rs,
        native_s=Stat.of(native),
        native_over_delta_rs=native_rs,
    )
    delta.goal_met = None


def _write_delta(path: Path) -> None:
    from deltalake import write_deltalake

    for i in range(4):
        ids = pa.array(range(10 * i, 10 * i + 10), pa.int64())
        batch = pa.table({"id": ids, "day": ["d1"] * 10, "v": ids})
        write_deltalake(str(path), batch, partition_by=["day"], mode="append")


def _task(sched: Scheduler, fmt: str, name: str, *, host: bool, native: bool = False) -> float:
    """Register the copy, plan its compaction, then time dispatch -> outcome recorded
    (`native`: Delta's default, without a JVM; else Spark's OPTIMIZE)."""
    rt = sched.rt
    rt.settings = rt.settings.model_copy(update={"warm_families": [fmt] if host else []})
    policy = POLICY if native else SPARK_POLICY
    with transaction(rt.engine) as s:
        row = add_table(s, CATALOGS[fmt], TableRef(NAMESPACE, name), policy, format=fmt)
        task_id = repo.create_task(
            s, table_id=row.id, kind="compaction", trigger={"reason": "bench"}, actor="bench"
        )
    assert task_id is not None
    plan_it(rt, task_id, f"{fmt} {name}: ")
    started = time.perf_counter()
    if not sched.dispatch_once():
        raise RuntimeError(f"{fmt} {name}: nothing dispatched")
    _until(lambda: job_run(rt, task_id).state != "running", sched, 900)
    seconds = time.perf_counter() - started
    run = job_run(rt, task_id)
    if run.state != "succeeded":
        raise RuntimeError(f"{fmt} {name}: {run.state}: {run.error}\n{run.log_tail}")
    if (run.deploy_mode == "warm-host") != host:
        raise RuntimeError(f"{fmt} {name}: ran as {run.deploy_mode}, host={host}")
    if native and (run.mode != "session" or (run.metrics or {})["engine"]["engine"] != "arrow"):
        raise RuntimeError(f"{fmt} {name}: not run natively: {run.mode} {run.metrics}")
    _until(lambda: task_id not in sched.applications.task_ids(), sched, 120)
    return seconds


def _until(done: Callable[[], bool], sched: Scheduler, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not done in {timeout_s:.0f}s")
        sched.applications.poll(sched.leading())  # as the leader's loop, each turn
        time.sleep(0.05)


def _delta_rs(path: Path) -> float:
    from deltalake import DeltaTable

    table = DeltaTable(str(path))
    started = time.perf_counter()
    table.optimize.compact()
    return time.perf_counter() - started


def _check_rows(work: Path, templates: dict[str, Path], names: list[str]) -> None:
    from lakewarden.formats.delta.validation import digest as delta_digest
    from lakewarden.formats.hudi.validation import digest as hudi_digest

    def of(fmt: str, path: Path) -> Any:
        if fmt == "delta":
            from deltalake import DeltaTable

            return delta_digest(str(path), DeltaTable(str(path)).version())
        return hudi_digest(str(path))

    for fmt in CATALOGS:
        expected = of(fmt, templates[fmt])
        for name in names:
            found = of(fmt, work / fmt / NAMESPACE / name)
            if found != expected:
                raise AssertionError(f"{fmt} {name}: rows/checksum {found} != {expected}")
