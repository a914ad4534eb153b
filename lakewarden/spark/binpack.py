"""A validated compaction's bin-pack, run by lakewarden so its inputs are checksummed during
the rewrite's own read (issue 30: validation nearly free).

Iceberg's `rewriteDataFiles` action reads each file group and writes it back, then
validation read the group's inputs a second time to checksum them: two thirds of
validation's cost on small-file tables (docs/performance.md). This runs the same bin-pack
from Iceberg's own public pieces, in the order the action runs them:

- the groups: `BinPackRewriteFilePlanner` (the action's planner, same options),
- each group's read: its scan tasks staged in `ScanTaskSetManager` (the table in
  `SparkTableCache`), read as a scan-task set at the group's split size,
- each group's write: the `rewritten-file-scan-task-set-id` write option, the new files
  from `FileRewriteCoordinator.fetchNewFiles`,
- the commit: `RewriteDataFilesCommitManager.commitFileGroups` (a replace of the group's
  files with the starting snapshot's sequence number, the task's snapshot properties),
  `partial-progress.max-commits` commits at most,

with one thing added: the read is observed (`Dataset.observe`): the group's row count and
the order-independent checksum validation computes (`validation.checksum_aggregates`), over
the very rows the write receives (deletes applied). Validation then reads only the outputs
and compares them with these sums, per partition (lakewarden.spark.validation).

Used only for a staged (validated) bin-pack with no filter; anything it does not handle
(an option it does not know) goes through Iceberg's action as before.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakewarden.spark import arrow_rewrite
from lakewarden.spark.java import each

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# The action's options this runner honours besides the planner's own (`validOptions()`).
ACTION_OPTIONS = frozenset(
    {
        "partial-progress.enabled",
        "partial-progress.max-commits",
        "max-concurrent-file-group-rewrites",
    }
)
# Iceberg's defaults for them (RewriteDataFiles).
MAX_CONCURRENT_DEFAULT = 5
MAX_COMMITS_DEFAULT = 10
# The Arrow path sums each output as it is closed, overlapping the other groups' copy and
# the commit (off: validation reads the outputs after the commit, as before; benchmarks'
# side-by-side arm).
HASH_OUTPUTS = True


@dataclass(frozen=True)
class ObservedGroup:
    """One file group as the rewrite read it: its input data files and the rows read from
    them (deletes applied), with their checksum."""

    files: frozenset[str]
    rows: int
    checksum: int
    # The files' record counts from their manifest entries when no delete file applies to
    # any of them (then exactly the rows a faithful read returns); None otherwise.
    file_rows: int | None = None


@dataclass(frozen=True)
class Observed:
    """The inputs of a bin-pack as its own read checksummed them, over `columns`."""

    columns: tuple[str, ...]
    groups: tuple[ObservedGroup, ...]
    # The checksum the groups' sums are: "spark" (validation.checksum_aggregates, observed
    # during Spark's read) or "duckdb" (arrow_rewrite.sums: the Arrow path's). Validation
    # sums the outputs with the same one.
    hasher: str = "spark"
    # The Arrow path's output files, each summed by DuckDB from disk as soon as it was
    # closed (arrow_rewrite.hash_written), by location: the call waits for the sums still
    # running (validation asks last, so they overlap the commit and its metadata reads);
    # None, or a None answer: not summed (validation reads them).
    written: Callable[[], dict[str, arrow_rewrite.Written] | None] | None = None


@dataclass(frozen=True)
class BinPacked:
    result: Any  # Iceberg's RewriteDataFiles.Result, as the action returns it
    observed: Observed
    # The first failed group's error (Iceberg's action logs it to Spark's log, where
    # actions.first_failure finds it; this runner's failures are Python exceptions).
    first_error: str | None = None
    # Which engine rewrote the groups and why (metrics["engine"]): "arrow", "spark" or,
    # in an unvalidated run, "arrow+spark" (each group its own: `_engine`).
    engine: dict[str, Any] | None = None
    # Waits for the outputs' sums still running and completes `engine`'s driver CPU; call
    # it once the job no longer needs them (after validation).
    settle: Callable[[], Any] = lambda: None


def handles(options: dict[str, str], planner_options: set[str]) -> bool:
    """Whether every option is one this runner honours."""
    return all(k in ACTION_OPTIONS or k in planner_options for k in options)


def run_binpack(
    spark: SparkSession,
    table: Any,
    branch: str,
    start_id: int,
    options: dict[str, str],
    snapshot_properties: dict[str, str],
    columns: list[str],
    max_rows: int | None = None,
    native: bool = True,
    said: dict[str, Any] | None = None,
) -> BinPacked | None:
    """Bin-pack `table` from snapshot `start_id`, committing to `branch`: Iceberg's
    `RewriteDataFiles.Result` (as the action returns it) and what the reads observed. None
    when an option is not one this runner honours, or when the groups' files hold more than
    `max_rows` rows (validation.max_rows: validation will not check them, so summing them
    is wasted; B4's 30 M rows) or there are no `columns` to sum (the rewrite is not
    validated) (the caller runs Iceberg's action; `said` gets the engine's reason), unless
    pyarrow rewrites the groups (`native`, and some group qualifies:
    lakewarden.spark.arrow_rewrite, the others then Spark's), which then sums nothing."""
    from pyspark import inheritable_thread_target
    from pyspark.sql import SparkSession as Session

    from lakewarden.spark.validation import table_cache

    jvm: Any = spark._jvm
    iceberg = jvm.org.apache.iceberg
    clock = time.perf_counter()
    planner = iceberg.actions.BinPackRewriteFilePlanner(
        table, iceberg.expressions.Expressions.alwaysTrue(), start_id, False
    )
    planner_options = {str(o) for o in each(planner.validOptions())}
    if not handles(options, planner_options):
        return None
    init = jvm.java.util.HashMap()
    for key, value in options.items():
        if key in planner_options:
            init.put(key, str(value))
    planner.init(init)
    groups = list(each(planner.plan().groups()))
    seconds = {"plan": time.perf_counter() - clock}
    observe = bool(columns) and (
        max_rows is None or not _more_rows(table, start_id, groups, max_rows)
    )
    checking = time.thread_time()
    # Unsummed, each group may take its own engine; summed, one for all (see _engine)
    shape, copies, engine = _engine(jvm, table, start_id, groups, native, mixed=not observe)
    seconds["check"] = time.perf_counter() - clock - seconds["plan"]
    check_cpu = time.thread_time() - checking  # the files' footers read, py4j's calls
    if not observe and shape is None:
        if said is not None:
            said.update(engine)
        return None
    concurrency = max(
        1, int(options.get("max-concurrent-file-group-rewrites", MAX_CONCURRENT_DEFAULT))
    )
    partial = str(options.get("partial-progress.enabled", "false")).lower() == "true"
    max_commits = max(1, int(options.get("partial-progress.max-commits", MAX_COMMITS_DEFAULT)))

    # As the action does: a session of its own with adaptive execution off, so the write's
    # partitioning (one file per split) is the reader's.
    jsession = spark._jsparkSession.cloneSession()
    jsession.conf().set("spark.sql.adaptive.enabled", "false")
    session = Session(spark.sparkContext, jsession)
    cache = table_cache(spark)
    manager = iceberg.spark.ScanTaskSetManager.get()
    coordinator = iceberg.spark.FileRewriteCoordinator.get()

    adding = threading.Lock()
    # The driver CPU of the Arrow path's threads (their own `time.thread_time()`; DuckDB
    # runs on the calling thread): metrics["engine"]["cpu_s"], the job's cost.
    cpu = {"check": check_cpu, "read": 0.0, "write": 0.0, "hash": 0.0}

    def add(into: dict[str, float], key: str, value: float) -> None:
        with adding:  # groups run in threads: each sum is read and written under the lock
            into[key] = into.get(key, 0.0) + value

    def hashed(work: Any, *args: Any) -> Any:
        started = time.thread_time()
        try:
            return work(*args)
        finally:
            add(cpu, "hash", time.thread_time() - started)

    # Each output summed from disk once closed, while the rest is copied and committed.
    hashing_outputs = (
        ThreadPoolExecutor(max_workers=1)
        if observe and shape is not None and HASH_OUTPUTS
        else None
    )
    output_sums: dict[int, list[Future[arrow_rewrite.Written]]] = {}

    def rewrite_arrow(group: Any) -> ObservedGroup:
        assert shape is not None
        files = copies[id(group)]
        paths = [f.path for f in files]
        pending = output_sums.setdefault(id(group), [])

        def closed(location: str, size: int) -> None:
            if hashing_outputs is not None:
                pending.append(
                    hashing_outputs.submit(
                        hashed, arrow_rewrite.hash_written, location, size, columns
                    )
                )

        # DuckDB reads the inputs once pyarrow has read them, while pyarrow writes the last
        # row groups (C++, off the GIL: the write is one thread, the reads took both cores;
        # begun with the reads, it slowed them as much as it overlapped)
        with ThreadPoolExecutor(max_workers=1) as hashing:
            summing: list[Future[tuple[int, int]]] = []

            def read_all() -> None:
                if observe and not summing:
                    summing.append(hashing.submit(hashed, arrow_rewrite.sums, paths, columns, 1))

            started = time.perf_counter()
            copy = arrow_rewrite.rewrite(jvm, table, group, shape, files, closed, read_all)
            copied = time.perf_counter()
            rows, checksum = summing[0].result() if summing else (0, 0)
            waited = time.perf_counter() - copied
        add(seconds, "copy", copied - started)
        add(seconds, "hash_wait", waited)
        add(cpu, "read", copy.read_cpu_s)
        add(cpu, "write", copy.write_cpu_s)
        return ObservedGroup(
            files=frozenset(f.location for f in files),
            rows=rows,
            checksum=checksum,
            file_rows=sum(f.records for f in files),
        )

    def rewrite(group: Any) -> ObservedGroup:
        if id(group) in copies:
            return rewrite_arrow(group)
        from pyspark.sql import Observation

        from lakewarden.spark.validation import checksum_aggregates

        # Iceberg's source defines its catalogs in the active session's conf: in this
        # thread's JVM thread, none is active (the default session would get them).
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)
        set_id = f"lakewarden-binpack-{uuid.uuid4()}"
        cache.add(set_id, table)
        tasks = group.fileScanTasks()
        manager.stageTasks(table, set_id, tasks)
        try:
            frame = (
                session.read.format("iceberg")
                .option("scan-task-set-id", set_id)
                .option("split-size", str(group.inputSplitSize()))
                .option("file-open-cost", "0")
                .load(set_id)
            )
            observation = Observation(set_id)
            if observe:
                frame = frame.observe(observation, *checksum_aggregates(columns))
            same_spec = tasks.get(0).spec().equals(table.specs().get(group.outputSpecId()))
            (
                frame.write.format("iceberg")
                .option("rewritten-file-scan-task-set-id", set_id)
                .option("target-file-size-bytes", str(group.maxOutputFileSize()))
                .option("distribution-mode", "none" if same_spec else "range")
                .option("output-spec-id", str(group.outputSpecId()))
                .mode("append")
                .save(set_id)
            )
            group.setOutputFiles(coordinator.fetchNewFiles(table, set_id))
            scans = list(each(tasks))
            if not observe:  # a group of a run whose other groups pyarrow rewrites
                return ObservedGroup(frozenset(str(t.file().location()) for t in scans), 0, 0)
            sums = observation.get  # only after the write succeeded: it waits for one
            deletes = any(not t.deletes().isEmpty() for t in scans)
            return ObservedGroup(
                files=frozenset(str(t.file().location()) for t in scans),
                rows=int(sums["n"]),
                checksum=(int(sums["hi"] or 0) << 32) + int(sums["lo"] or 0),
                file_rows=None if deletes else sum(int(t.file().recordCount()) for t in scans),
            )
        finally:
            manager.removeTasks(table, set_id)
            cache.remove(set_id)
            coordinator.clearRewrite(table, set_id)

    done: list[tuple[Any, ObservedGroup]] = []
    failed: list[tuple[Any, BaseException]] = []
    if shape is not None:  # each Arrow group keeps cores busy itself, and ~3 row groups
        concurrency = min(concurrency, os.cpu_count() or 1)
    try:
        with ThreadPoolExecutor(max_workers=min(concurrency, max(1, len(groups)))) as pool:
            futures = [(g, pool.submit(inheritable_thread_target(rewrite), g)) for g in groups]
            for group, future in futures:
                try:
                    done.append((group, future.result()))
                except Exception as exc:
                    log.error("Failure during rewrite group %s", group.info(), exc_info=True)
                    failed.append((group, exc))
        committing = time.perf_counter()
        commit = iceberg.actions.RewriteDataFilesCommitManager(
            table, start_id, True, _java_map(jvm, snapshot_properties), branch
        )
        if failed and not partial:
            for group, _ in done:
                commit.abortFileGroup(group)
            raise failed[0][1]
        per_commit = max(1, math.ceil(len(groups) / max_commits)) if partial else max(1, len(done))
        for i in range(0, len(done), per_commit):
            batch = jvm.java.util.HashSet()
            for group, _ in done[i : i + per_commit]:
                batch.add(group)
            commit.commitOrClean(batch)
        seconds["commit"] = time.perf_counter() - committing
    finally:
        if hashing_outputs is not None:  # the outputs' sums run on; `settle` waits for them
            hashing_outputs.shutdown(wait=False)
    # where the runner's time went (summed over groups where per group): metrics["engine"]
    engine["seconds"] = {k: round(v, 3) for k, v in seconds.items()}
    settled: list[dict[str, arrow_rewrite.Written] | None] = []

    def settle() -> dict[str, arrow_rewrite.Written] | None:
        if not settled:
            waiting = time.perf_counter()
            settled.append(_written(output_sums, done) if hashing_outputs is not None else None)
            if hashing_outputs is not None:  # what the commit and metadata did not hide
                engine["seconds"]["hash_outputs_wait"] = round(time.perf_counter() - waiting, 3)
            if shape is not None:  # the Arrow path's work is the driver's: the job's cost
                engine["cpu_s"] = {k: round(v, 3) for k, v in cpu.items()}
                engine["driver_cpu_s"] = round(sum(cpu.values()), 3)
        return settled[0]

    result = iceberg.actions.ImmutableRewriteDataFiles.Result.builder()
    for group, _ in done:
        result = result.addRewriteResults(group.asResult())
    for group, _ in failed:
        result = result.addRewriteFailures(
            iceberg.actions.ImmutableRewriteDataFiles.FileGroupFailureResult.builder()
            .info(group.info())
            .dataFilesCount(group.inputFileNum())
            .build()
        )
    observed = Observed(
        tuple(columns),
        tuple(o for _, o in done) if observe else (),
        arrow_rewrite.HASHER if shape is not None else "spark",
        settle if hashing_outputs is not None else None,
    )
    return BinPacked(
        result.build(), observed, _cause(failed[0][1]) if failed else None, engine, settle
    )


def _written(
    sums: dict[int, list[Future[arrow_rewrite.Written]]], done: list[tuple[Any, ObservedGroup]]
) -> dict[str, arrow_rewrite.Written] | None:
    """The committed groups' outputs as summed once closed, by location; None when one
    could not be summed (validation then reads the outputs itself)."""
    out: dict[str, arrow_rewrite.Written] = {}
    for group, _ in done:
        for future in sums.get(id(group), []):
            try:
                w = future.result()
            except Exception:
                log.warning(
                    "an output's sums could not be taken; validation reads it", exc_info=True
                )
                return None
            out[w.location] = w
    return out


def _engine(
    jvm: Any,
    table: Any,
    start_id: int,
    groups: list[Any],
    native: bool,
    mixed: bool = False,
) -> tuple[arrow_rewrite.Layout | None, dict[int, list[arrow_rewrite.Input]], dict[str, Any]]:
    """The table's Layout and the files of each group pyarrow rewrites (by the group's
    id()), and what metrics["engine"] says of it: "arrow" when every group qualifies,
    "spark" (no Layout) when one does not, or, with `mixed` (a run whose inputs are not
    summed: validation off, or past its max_rows), "arrow+spark": the groups that
    qualify by pyarrow, the others by Spark. A summed run keeps one engine, so each
    partition's sums are one hasher's (validation compares like with like)."""
    said: dict[str, Any] = {"engine": "spark", "groups": len(groups)}
    if not native:
        return None, {}, {**said, "reason": "compaction.native_rewrite is off"}
    shape = arrow_rewrite.layout(jvm, table)
    if isinstance(shape, str):
        return None, {}, {**said, "reason": shape}
    simple = arrow_rewrite.simple(table, start_id)
    copies: dict[int, list[arrow_rewrite.Input]] = {}
    refused: list[str] = []
    for group in groups:
        files = arrow_rewrite.inputs(table, group, shape, simple)
        if isinstance(files, str):
            if not mixed:
                return None, {}, {**said, "reason": f"a file group does not qualify: {files}"}
            refused.append(files)
        else:
            copies[id(group)] = files
    if not copies:
        return None, {}, {**said, "reason": f"no file group qualifies: {refused[0]}"}
    if not refused:
        return shape, copies, {**said, "engine": "arrow"}
    return (
        shape,
        copies,
        {
            **said,
            "engine": "arrow+spark",
            "arrow_groups": len(copies),
            "spark_groups": len(refused),
            "reason": f"{len(refused)} of {len(groups)} file groups do not qualify and are "
            f"rewritten by Spark (the first: {refused[0]}); the others by pyarrow",
        },
    )


def _more_rows(table: Any, start_id: int, groups: list[Any], max_rows: int) -> bool:
    """Whether the groups' files hold more than `max_rows` rows (their manifests' record
    counts). The snapshot's total answers for most tables without a call per file."""
    total = table.snapshot(start_id).summary().get("total-records")
    if total is not None and int(total) <= max_rows:
        return False
    rows = 0
    for group in groups:
        for task in each(group.fileScanTasks()):
            rows += int(task.file().recordCount())
            if rows > max_rows:
                return True
    return False


def _cause(exc: BaseException) -> str:
    """An exception's root cause in a line: a py4j error's last "Caused by", else its Java
    exception's line, else the exception's own first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
    java = [line.removeprefix(": ") for line in lines if line.startswith(": ")]
    found = causes[-1] if causes else java[0] if java else lines[0] if lines else None
    return (found or type(exc).__name__)[:500]


def _java_map(jvm: Any, values: dict[str, str]) -> Any:
    out = jvm.java.util.HashMap()
    for key, value in values.items():
        out.put(key, value)
    return out
