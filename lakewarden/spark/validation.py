"""Rewrite validation: a rewrite must not change a table's rows, and readers never see one
that did.

`rewrite_data_files` (lakewarden.spark.actions: compaction, clustering and Z-order all go
through it, on main or on `compaction.branch`) commits to a staging branch when the job's
rewrite is validated (`will_validate`; lakewarden.spark.staging), then calls
`validate_rewrite`. It finds the job's commits on the staging branch (those carrying its
task id and attempt: lakewarden.spark.commits) since the base, the target's head when the
rewrite started, grouped into spans of consecutive commits. Of each span it compares only
what the rewrite replaced: the data files its commits removed (its inputs), read at the
snapshot before the span with the delete files that applied to them there, against the
data files they added (its outputs), read at its last commit. Both sides of every span are
read in one Spark job through Iceberg's scan-task sets (how Iceberg's own rewrite reads a
file group), each row tagged with its side and file; per file it sums the row count and an
order-independent checksum (`xxhash64` over the chosen columns with their NULL flags), and
the files' sums are added up per partition, the partition a file is in per its manifest
entry (rows written into another partition's file leave one partition short). On a format
v3 table the checksum also covers each row's lineage (`LINEAGE`: its row id and last
updated sequence number), so a rewrite that gave rows new ids fails as one that changed
them would. Where the rewrite's own read observed its inputs (lakewarden.spark.binpack) and
its outputs are small, no Spark job runs at all: the outputs are summed in the driver
(lakewarden.spark.driver_checksum), a mismatch found so confirmed by Spark's read. An
Arrow-rewritten bin-pack's outputs were summed by DuckDB as each was written
(lakewarden.spark.arrow_rewrite): those sums stand when the commits added exactly those
files, of the sizes written and the rows summed, unchanged on disk since
(`written_outputs`); otherwise DuckDB reads the committed outputs here.

A mismatch raises RewriteMismatch: the rewrite is never published to its target (the
caller drops the staging branch), so no reader of the target ever saw it. A match is
published (`staging.publish`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakewarden.catalogs.catalog import TableRef
from lakewarden.formats.iceberg import finder, history
from lakewarden.formats.iceberg.partitions import quote_column as _quote
from lakewarden.metadata import jsonable
from lakewarden.outcomes import RewriteMismatch
from lakewarden.policy.model import MAIN_BRANCH, ValidationPolicy
from lakewarden.spark import arrow_rewrite, driver_checksum, staging
from lakewarden.spark.binpack import Observed
from lakewarden.spark.commits import commit_properties
from lakewarden.spark.java import each
from lakewarden.spark.staging import Stage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

REWRITE_KINDS = ("compaction", "clustering", "zorder")
# Of the partitions checked, at most this many are listed in the metrics (mismatches first).
MAX_LISTED = 50

# Iceberg v3's row lineage, as Spark reads it (metadata columns): a rewrite keeps both.
LINEAGE = ("_row_id", "_last_updated_sequence_number")

CORRUPT = "corrupt-rewrite"
CORRUPT_THEN_WRITE = "corrupt-rewrite-then-write"
RENUMBER = "renumber-rewrite"


@dataclass(frozen=True)
class Validating:
    policy: ValidationPolicy
    # Test-only (settings.failpoint, honoured with settings.failpoints_enabled only).
    failpoint: str | None = None


_ACTIVE: ContextVar[Validating | None] = ContextVar("lakewarden_validation", default=None)


@contextmanager
def validating(policy: ValidationPolicy, failpoint: str | None = None) -> Iterator[None]:
    """The scheduler runs a job inside this: its rewrites are validated under `policy`."""
    token = _ACTIVE.set(Validating(policy, failpoint))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def observed_columns(spark: SparkSession, table: Any, start_id: int) -> list[str] | None:
    """What a rewrite starting at snapshot `start_id` checksums as it reads, for validation
    to compare (`validate_rewrite`'s `observed`): the policy's columns, and on a v3 table
    whose rows have ids the lineage columns (as `lineage_columns` decides). None when the
    rewrite is not validated or there is nothing to checksum (validation reads what it
    needs, or says why it cannot)."""
    active = _ACTIVE.get()
    if active is None or not will_validate():
        return None
    jvm: Any = spark._jvm
    try:
        columns = chosen_columns(table, active.policy)
    except ValueError:  # validation.columns names a missing column: validation says so
        return None
    v3 = bool(columns) and format_version(jvm, table) >= 3
    if v3 and table.snapshot(start_id).firstRowId() is not None:
        columns += list(LINEAGE)
    return columns or None


def max_rows() -> int | None:
    """The running job's validation.max_rows (None outside a validated job): past it,
    validation does not read a rewrite's files, so neither need the rewrite sum them."""
    active = _ACTIVE.get()
    return active.policy.max_rows if active is not None else None


def will_validate() -> bool:
    """Whether the running job's rewrites are validated (so staged first): inside a
    scheduled job (`validating`, commit properties set) with validation on."""
    active = _ACTIVE.get()
    return active is not None and bool(commit_properties()) and active.policy.enabled


@dataclass
class Span:
    """Consecutive commits of the job: `before` is the parent of the first."""

    before: int
    commits: list[Any] = field(default_factory=list)  # Java Snapshots, oldest first

    @property
    def after(self) -> int:
        return int(self.commits[-1].snapshotId())


def validate_rewrite(
    spark: SparkSession,
    catalog: str,
    ref: TableRef,
    table: Any,
    start_id: int | None,
    metrics: dict[str, Any],
    stage: Stage | None,
    target: str = MAIN_BRANCH,
    observed: Observed | None = None,
) -> dict[str, Any] | None:
    """What `metrics["validation"]` records of the rewrite that just ran on the Java
    `table` (started at snapshot `start_id` of `target`), committed to `stage` (None: it
    was not staged, as when validation is off); None outside a scheduled job. Raises
    RewriteMismatch when a partition's rows changed: the caller must then drop the staging
    branch, never publishing it. `observed`: the inputs as the rewrite's own read
    checksummed them (lakewarden.spark.binpack), so only the outputs are read."""
    active = _ACTIVE.get()
    if active is None or not commit_properties():
        return None
    branch = stage.name if stage is not None else target
    if active.failpoint in (CORRUPT, CORRUPT_THEN_WRITE) and metrics.get("rewritten_data_files"):
        write = active.failpoint == CORRUPT_THEN_WRITE
        _corrupt(spark, ref.spark_name(catalog), table, branch, target, write=write)
    if active.failpoint == RENUMBER and metrics.get("rewritten_data_files"):
        _renumber(spark, ref.spark_name(catalog), table, branch)
    policy = active.policy
    if not policy.enabled or stage is None:
        return _skipped("validation is off for this table (validation.enabled: false)")
    table.refresh()
    spans = job_spans(table, start_id, branch)
    if not spans:
        return _skipped("the rewrite committed nothing")
    started = time.monotonic()
    try:
        result = _compare(spark, table, spans, policy, observed)
    except Exception as exc:  # the rewrite stands; that it was not checked is said
        log.warning("validation of %s could not run", ref.dotted, exc_info=True)
        result = _skipped(f"validation could not run: {type(exc).__name__}: {str(exc)[:300]}")
    result["cost_seconds"] = round(time.monotonic() - started, 3)
    if result["status"] != "failed":
        return result
    result["publish"] = staging.refused(stage)
    bad = [p for p in result["partitions"] if not p["match"]]
    raise RewriteMismatch(
        f"post-rewrite validation failed: {len(bad)} of {result['partitions_checked']} "
        f"partition(s) changed ({_describe(bad[0])}); {result['publish']['reason']}",
        {**metrics, "validation": result},
    )


def recovered(kind: str, attempt: str | None) -> dict[str, Any]:
    """What a run that recovers an earlier attempt's commit records of its validation (a
    rewrite's), so a success nobody saw validated does not read as a validated one."""
    if kind not in REWRITE_KINDS:
        return {}
    return {
        "validation": _skipped(
            f"recovered the commit of attempt {attempt}: that attempt ended before recording "
            "its outcome, so whether its validation ran is not known"
        )
    }


def _skipped(reason: str) -> dict[str, Any]:
    return {"status": "skipped", "reason": reason}


def _describe(p: dict[str, Any]) -> str:
    return f"{p['partition']}: {p['rows_before']} rows before, {p['rows_after']} after" + (
        "" if p["rows_before"] != p["rows_after"] else ", checksums differ"
    )


# --- the job's commits ------------------------------------------------------------------


def job_spans(table: Any, start_id: int | None, branch: str = MAIN_BRANCH) -> list[Span]:
    """The job's commits in the branch's history since `start_id`, oldest first, in spans
    of consecutive commits (a writer's commit between two of them starts a new span)."""
    walked = history.java_history(table, branch, stop_at=start_id)
    return [
        Span(before=int(s.before), commits=[c.native for c in s.commits])
        for s in finder.spans(walked, commit_properties())
    ]


# --- what the rewrite replaced, and how to read it --------------------------------------


def _python(value: Any) -> Any:
    """A partition value from py4j: Java strings (or Avro's Utf8) as str."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value.toString()) if hasattr(value, "toString") else value


@dataclass(frozen=True)
class Touched:
    """A partition the job's commits added or removed data files in."""

    label: dict[str, Any]  # {partition field: value}
    java_filter: Any  # the partition as an Iceberg expression (to plan its files)


@dataclass
class SpanFiles:
    """What one span's commits replaced: the data files they removed (its inputs, read at
    the snapshot before it, with the delete files that applied to them there) and those
    they added (its outputs, read at its last commit), each location with the index of its
    partition in `partitions`. A file both added and removed within the span is neither."""

    partitions: list[Touched]
    inputs: dict[str, int]
    outputs: dict[str, int]
    input_rows: int  # the removed files' record counts (before deletes; commit summaries)
    input_bytes: int
    output_bytes: int
    # Inputs and outputs in different partition specs (a rewrite into the current spec):
    # their partitions cannot be paired, so the span is compared as one total.
    respecified: bool
    # Each output's size in bytes and record count, as its manifest entry says.
    output_entries: dict[str, tuple[int, int]] = field(default_factory=dict)
    added_delete_files: int = 0  # by the span's commits (commit summaries)


def span_files(jvm: Any, table: Any, span: Span) -> SpanFiles:
    """The span's inputs and outputs from its commits' manifests (metadata only): each file
    costs four py4j calls (its location and partition; five on a table of several specs),
    two on a table of one unpartitioned spec (issue 30's 300 files: 0.1-0.5 s at six); the
    totals (rows and bytes) come from the commits' summaries."""
    io, specs = table.io(), table.specs()
    lists = jvm.org.apache.iceberg.relocated.com.google.common.collect.Lists
    one_spec = None  # the table's one spec: every file's
    only = None  # ... when it is unpartitioned: every file's partition too
    if specs.size() == 1:
        spec = table.spec()
        one_spec = int(spec.specId())
        only = one_spec if spec.isUnpartitioned() else None
    keys: dict[tuple[int, str], int] = {}
    partitions: list[Touched] = []
    sides: tuple[dict[str, tuple[int, int]], ...] = ({}, {})  # removed, added
    entries: dict[str, tuple[int, int]] = {}  # added: (size, records)
    totals = dict.fromkeys(
        ("deleted-records", "removed-files-size", "added-files-size", "added-delete-files"), 0
    )
    for commit in span.commits:
        summary = commit.summary()
        for name in totals:
            totals[name] += int(summary.get(name) or 0)
        for side, files in enumerate((commit.removedDataFiles(io), commit.addedDataFiles(io))):
            listed = lists.newArrayList(files)  # a call per file, where iterating takes two
            for k in range(listed.size()):
                f = listed.get(k)
                if only is not None and (only, "") in keys:
                    spec_id, key = only, (only, "")
                else:
                    spec_id = one_spec if one_spec is not None else int(f.specId())
                    part = f.partition()
                    key = (spec_id, "" if only is not None else str(part.toString()))
                if key not in keys:
                    keys[key] = len(partitions)
                    partitions.append(_describe_partition(jvm, table, specs.get(spec_id), part))
                location = str(f.location())
                sides[side][location] = (keys[key], spec_id)
                if side == 1:
                    entries[location] = (int(f.fileSizeInBytes()), int(f.recordCount()))
    removed, added = sides
    for location in removed.keys() & added.keys():
        del removed[location], added[location]
    specs_in = {v[1] for v in removed.values()}
    specs_out = {v[1] for v in added.values()}
    return SpanFiles(
        partitions=partitions,
        inputs={loc: v[0] for loc, v in removed.items()},
        outputs={loc: v[0] for loc, v in added.items()},
        input_rows=totals["deleted-records"],
        input_bytes=totals["removed-files-size"],
        output_bytes=totals["added-files-size"],
        respecified=bool(specs_in and specs_out and specs_in != specs_out),
        output_entries={loc: entries[loc] for loc in added},
        added_delete_files=totals["added-delete-files"],
    )


def _describe_partition(jvm: Any, table: Any, spec: Any, part: Any) -> Touched:
    expressions = jvm.org.apache.iceberg.expressions.Expressions
    label: dict[str, Any] = {}
    java_filter = expressions.alwaysTrue()
    for i, pf in enumerate(each(spec.fields())):
        raw = part.get(i)
        label[str(pf.name())] = jsonable(_python(raw))
        column = table.schema().findColumnName(pf.sourceId())
        if str(pf.transform()) == "void" or column is None:
            continue
        term = expressions.transform(column, pf.transform())
        java_filter = getattr(expressions, "and")(  # a Python keyword
            java_filter,
            expressions.isNull(term) if raw is None else expressions.equal(term, raw),
        )
    return Touched(label, java_filter)


def chosen_columns(table: Any, policy: ValidationPolicy) -> list[str]:
    """The policy's columns, or every top-level column of the Java Iceberg `table` that is
    not a struct, list or map (the columns Spark reads it with: its schema is converted from
    this one; asking Spark's analyzer for it cost ~0.04 s of JVM CPU a call)."""
    fields = {str(c.name()): c.type() for c in each(table.schema().columns())}
    if policy.columns:
        missing = [c for c in policy.columns if c not in fields]
        if missing:
            raise ValueError(f"validation.columns names columns the table lacks: {missing}")
        return list(policy.columns)
    return [n for n, t in fields.items() if not t.isNestedType()]


def format_version(jvm: Any, table: Any) -> int:
    """The Java table's Iceberg format version."""
    return int(jvm.org.apache.iceberg.TableUtil.formatVersion(table))


def lineage_columns(jvm: Any, table: Any, spans: list[Span]) -> list[str]:
    """`LINEAGE` on a v3 table whose rows have ids before the rewrite; none otherwise. A
    table upgraded to v3 has no ids on its rows until its next commit assigns them (its
    snapshots from before carry no first row id): a rewrite from such a snapshot gives the
    rows their first ids, which nothing could keep."""
    if format_version(jvm, table) < 3:
        return []
    if any(table.snapshot(span.before).firstRowId() is None for span in spans):
        return []
    return list(LINEAGE)


def _tasks(
    jvm: Any, table: Any, snapshot_id: int, wanted: dict[str, int], parts: list[Touched]
) -> Any:
    """A Java list of the scan tasks (each data file with the delete files that apply to it
    at `snapshot_id`) of exactly the `wanted` files: the scan is planned pruned to their
    partitions; when it planned more files than wanted (some were not rewritten), the rest
    are left out one by one."""
    iceberg = jvm.org.apache.iceberg
    expressions = iceberg.expressions.Expressions
    where = expressions.alwaysFalse()
    for index in sorted(set(wanted.values())):
        where = getattr(expressions, "or")(where, parts[index].java_filter)  # a keyword
    planned = table.newScan().useSnapshot(snapshot_id).filter(where).planFiles()
    try:
        tasks = iceberg.relocated.com.google.common.collect.Lists.newArrayList(planned)
    finally:
        planned.close()
    if tasks.size() == len(wanted):  # wanted files are all planned: the same set
        return tasks
    kept = jvm.java.util.ArrayList()
    for task in tasks:
        if str(task.file().location()) in wanted:
            kept.add(task)
    if kept.size() != len(wanted):
        raise RuntimeError(
            f"{len(wanted) - kept.size()} of the rewrite's {len(wanted)} files are not in "
            f"snapshot {snapshot_id}"
        )
    return kept


def table_cache(spark: SparkSession) -> Any:
    """Iceberg's SparkTableCache (where a scan-task set's table is found by its id). Its
    static `get()` shares the name of an instance method, which py4j cannot tell apart:
    called through reflection."""
    jvm: Any = spark._jvm
    gateway: Any = spark.sparkContext._gateway
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    cls = jvm.java.lang.Class.forName("org.apache.iceberg.spark.SparkTableCache", True, loader)
    getter = cls.getMethod("get", gateway.new_array(jvm.java.lang.Class, 0))
    return getter.invoke(None, gateway.new_array(jvm.java.lang.Object, 0))


def row_hash(columns: list[str]) -> Any:
    """A row's hash: xxhash64 over the columns, each with its NULL flag (xxhash64 skips
    NULLs, so without the flags a value moved into a NULL neighbour's column would hash the
    same)."""
    from pyspark.sql import functions as F

    return F.xxhash64(*[x for c in columns for x in (F.col(_quote(c)), F.isnull(F.col(_quote(c))))])


def checksum_aggregates(columns: list[str]) -> list[Any]:
    """The rows (`n`) and their order-independent checksum, summed exactly as two longs (the
    hashes' high and low 32 bits, `hi` and `lo`: no overflow below 2^31 rows): what
    validation sums per file, and what a bin-pack observes of each group it reads
    (lakewarden.spark.binpack). The checksum is (hi << 32) + lo."""
    from pyspark.sql import functions as F

    hashed = row_hash(columns)
    return [
        F.count(F.lit(1)).alias("n"),
        F.sum(F.shiftright(hashed, 32)).alias("hi"),
        F.sum(hashed.bitwiseAND(F.lit(0xFFFFFFFF))).alias("lo"),
    ]


def _checksums(
    spark: SparkSession,
    table: Any,
    spans: list[Span],
    found: list[SpanFiles],
    columns: list[str],
    outputs_only: frozenset[int] = frozenset(),
    outputs_done: frozenset[int] = frozenset(),
) -> dict[tuple[int, int], dict[str, tuple[int, int]]]:
    """{(span index, side): {file: (rows, checksum)}}: one Spark job reads every span's
    inputs (side 0, deletes applied) and outputs (side 1) through Iceberg's scan-task sets
    (what Iceberg's own rewrite reads its groups with), tags each row with its span, side
    and file, and sums an order-independent checksum per file: xxhash64 over the chosen
    columns, each with its NULL flag (xxhash64 skips NULLs, so without the flags a value
    moved into a NULL neighbour's column would hash the same), summed exactly as two longs
    (its high and low 32 bits: no overflow below 2^31 rows a file). The inputs of the spans
    in `outputs_only` are not read (their sums were observed during the rewrite's read),
    nor the outputs of those in `outputs_done` (summed in the driver: `_driver_outputs`)."""
    from functools import reduce

    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    sides = [
        (i, side, snapshot_id, wanted, size)
        for i, (span, files) in enumerate(zip(spans, found, strict=True))
        for side, (snapshot_id, wanted, size) in enumerate(
            (
                (span.before, files.inputs, files.input_bytes),
                (span.after, files.outputs, files.output_bytes),
            )
        )
        if wanted and i not in (outputs_only if side == 0 else outputs_done)
    ]
    if not sides:  # every sum already taken (an Arrow rewrite's): no Spark job to set up
        return {}
    jvm: Any = spark._jvm
    cache = table_cache(spark)
    manager = jvm.org.apache.iceberg.spark.ScanTaskSetManager.get()
    parallelism = max(1, spark.sparkContext.defaultParallelism)
    # Iceberg 1.12 reads a v3 table's scan-task set as a rewrite table: its lineage columns
    # are data columns there and it has no metadata columns (`_file` does not resolve), so
    # the file is input_file_name(), which Iceberg's readers set to each file's location.
    file_of = F.input_file_name() if format_version(jvm, table) >= 3 else F.col("_file")
    hashed = row_hash(columns)
    frames: list[DataFrame] = []
    staged: list[str] = []
    try:
        for i, side, snapshot_id, wanted, size in sides:
            set_id = f"lakewarden-validate-{uuid.uuid4()}"
            cache.add(set_id, table)
            staged.append(set_id)
            manager.stageTasks(
                table, set_id, _tasks(jvm, table, snapshot_id, wanted, found[i].partitions)
            )
            # Splits of about 1/2 a core's share of the side, so both sides' reads use
            # every core (one split by default: 128 MB, a whole table of small files).
            split = max(size // (2 * parallelism), 4 << 20)
            frame = (
                spark.read.format("iceberg")
                .option("scan-task-set-id", set_id)
                .option("split-size", str(split))
                .option("file-open-cost", "0")
                .load(set_id)
            )
            frames.append(
                frame.select(
                    F.lit(i).alias("s"),
                    F.lit(side).alias("side"),
                    file_of.alias("f"),
                    hashed.alias("h"),
                )
            )
        rows = (
            reduce(DataFrame.unionAll, frames)
            .groupBy("s", "side", "f")
            .agg(
                F.count(F.lit(1)).alias("n"),
                F.sum(F.shiftright("h", 32)).alias("hi"),
                F.sum(F.col("h").bitwiseAND(F.lit(0xFFFFFFFF))).alias("lo"),
            )  # checksum_aggregates' sums, over the hash already computed
            .collect()
        )
    finally:
        for set_id in staged:
            manager.removeTasks(table, set_id)
            cache.remove(set_id)
    out: dict[tuple[int, int], dict[str, tuple[int, int]]] = {}
    for r in rows:
        out.setdefault((int(r["s"]), int(r["side"])), {})[str(r["f"])] = (
            int(r["n"]),
            (int(r["hi"]) << 32) + int(r["lo"]),
        )
    return out


def observed_inputs(files: SpanFiles, observed: Observed) -> list[tuple[int, int]] | None:
    """Per partition of the span, the (rows, checksum) of its inputs as the rewrite's own
    read observed them (lakewarden.spark.binpack); None, so the inputs are read, unless the
    observed groups' files are exactly the files the span removed, each once, and each
    group's files lie in one partition. Where the manifests give a group's rows exactly (no
    deletes apply to its files), those are its rows: a read that lost or added rows, which
    the write then faithfully copied, still shows as a partition that changed."""
    sums = [(0, 0) for _ in files.partitions]
    seen: set[str] = set()
    for group in observed.groups:
        where = {files.inputs.get(f) for f in group.files}
        if len(where) != 1 or None in where or not seen.isdisjoint(group.files):
            return None
        seen |= group.files
        (k,) = where
        assert k is not None
        rows, total = sums[k]
        read = group.rows if group.file_rows is None else group.file_rows
        sums[k] = (rows + read, total + group.checksum)
    return sums if seen == files.inputs.keys() else None


def _driver_outputs(
    jvm: Any,
    table: Any,
    spans: list[Span],
    found: list[SpanFiles],
    columns: list[str],
    spans_observed: frozenset[int],
) -> dict[int, dict[str, tuple[int, int]]]:
    """{span index: {output file: (rows, checksum)}} for the spans whose inputs were
    observed and whose outputs are few and small enough to checksum in the driver's Python
    (lakewarden.spark.driver_checksum: no Spark job, the fixed cost of a tiny table's
    validation): local files with no delete file applying, of column types covered there,
    as many rows as `driver_checksum.affordable` allows in all. Any other span's outputs
    are read by Spark."""
    if not spans_observed:
        return {}
    schema = jvm.org.apache.iceberg.spark.SparkSchemaUtil.convert(table.schema())
    types = {}
    for f in schema.fields():
        types[str(f.name())] = str(f.dataType().simpleString())
    if any(c not in types for c in columns):
        return {}  # the lineage columns, which the files do not hold as written
    typed = [(c, types[c]) for c in columns]
    rows = 0
    out: dict[int, dict[str, tuple[int, int]]] = {}
    for i in sorted(spans_observed):
        files = found[i]
        if not files.outputs:
            continue
        tasks = _tasks(jvm, table, spans[i].after, files.outputs, files.partitions)
        paths: list[tuple[str, str]] = []  # a file planned twice is summed twice, as read
        for task in tasks:
            location = str(task.file().location())
            path = arrow_rewrite.local_path(location)
            rows += int(task.file().recordCount())
            if (
                path is None
                or not driver_checksum.affordable(rows, [t for _, t in typed])
                or not task.deletes().isEmpty()
            ):
                return out
            paths.append((location, path))
        sums: dict[str, tuple[int, int]] = {}
        for location, path in paths:
            summed = driver_checksum.file_sums(path, typed)
            if summed is None:
                return out
            n, total = sums.get(location, (0, 0))
            sums[location] = (n + summed[0], total + summed[1])
        out[i] = sums
    return out


def _duckdb_outputs(
    jvm: Any,
    table: Any,
    spans: list[Span],
    found: list[SpanFiles],
    columns: list[str],
    spans_observed: frozenset[int],
) -> dict[int, dict[str, tuple[int, int]]]:
    """{span index: {output file: (rows, checksum)}} summed by DuckDB reading the files
    (arrow_rewrite.file_sums), for the observed spans whose outputs are all local files with
    no delete file applying (planned at the span's last commit, so a file the commit lacks
    fails the plan); any other span's inputs and outputs are read by Spark."""
    out: dict[int, dict[str, tuple[int, int]]] = {}
    for i in sorted(spans_observed):
        files = found[i]
        if not files.outputs:
            out[i] = {}
            continue
        paths: dict[str, str] = {}
        for task in _tasks(jvm, table, spans[i].after, files.outputs, files.partitions):
            location = str(task.file().location())
            path = arrow_rewrite.local_path(location)
            if path is None or not task.deletes().isEmpty():
                break
            paths[path] = location
        else:
            summed = arrow_rewrite.file_sums(list(paths), columns)
            out[i] = {paths[p]: sums for p, sums in summed.items()}
    return out


def written_outputs(
    found: list[SpanFiles],
    spans_observed: frozenset[int],
    written: dict[str, arrow_rewrite.Written],
) -> dict[int, dict[str, tuple[int, int]]] | None:
    """{span index: {output file: (rows, checksum)}} from the sums the Arrow rewrite took of
    each output as it closed it (arrow_rewrite.hash_written), with no file read here; None
    (the outputs are then read) unless the observed spans' outputs are exactly the files
    written and summed, each once: its manifest entry's size the size written and its
    record count the rows summed, the file on disk unchanged since it was summed, and no
    delete file added by the span's commits (so none applies to the new files: position
    deletes name files, and the outputs carry the start's sequence number)."""
    out: dict[int, dict[str, tuple[int, int]]] = {}
    seen: set[str] = set()
    for i in sorted(spans_observed):
        files = found[i]
        if files.added_delete_files:
            return None
        sums: dict[str, tuple[int, int]] = {}
        for location in files.outputs:
            w = written.get(location)
            if w is None or location in seen:
                return None
            if files.output_entries.get(location) != (w.size, w.rows) or not w.unchanged():
                return None
            seen.add(location)
            sums[location] = (w.rows, w.checksum)
        out[i] = sums
    return out if seen == written.keys() else None


def compare_spans(
    spark: SparkSession,
    table: Any,
    spans: list[Span],
    found: list[SpanFiles],
    columns: list[str],
    observed: dict[int, list[tuple[int, int]]] | None = None,
    driver: bool = True,
    confirm: bool = True,
    hasher: str = "spark",
    written: dict[str, arrow_rewrite.Written] | None = None,
) -> list[dict[str, Any]]:
    """Per span and partition its commits touched: the rows and checksum of its inputs
    (deletes applied) against its outputs, keyed by the partition each file is in (a row
    written into another partition's file shows as one partition short, another long). The
    inputs of a span in `observed` ({span index: per partition (rows, checksum)}) are taken
    from there (`observed_inputs`) instead of read; with `driver`, such a span's outputs are
    summed in the driver when small (`_driver_outputs`), each of its partitions then marked
    `outputs_read_by: driver`. A mismatch found so is, with `confirm`, compared again with
    the outputs read by Spark, whose verdict stands (the driver's hash of some value may be
    wrong: that costs a Spark job, never a good rewrite). `hasher` "duckdb": the observed
    sums are DuckDB's (an Arrow-rewritten bin-pack: lakewarden.spark.arrow_rewrite), so
    those spans' outputs are summed by DuckDB too: as the rewrite wrote them (`written`,
    `outputs_read_by: duckdb_as_written`, when `written_outputs` accounts for them), else
    read here (`duckdb`), or, where DuckDB cannot read them, both sides by Spark."""
    observed = observed or {}
    by = "driver"
    if hasher == arrow_rewrite.HASHER:
        # the inputs' sums are DuckDB's: so must the outputs' be, or the inputs are read
        confirm = False  # one hasher on both sides: its verdict stands
        as_written = (
            written_outputs(found, frozenset(observed), written) if written is not None else None
        )
        if as_written is not None:
            by, in_driver = "duckdb_as_written", as_written
        else:
            by = "duckdb"
            in_driver = _duckdb_outputs(
                spark._jvm, table, spans, found, columns, frozenset(observed)
            )
        observed = {i: sums for i, sums in observed.items() if i in in_driver}
    elif driver:
        in_driver = _driver_outputs(spark._jvm, table, spans, found, columns, frozenset(observed))
    else:
        in_driver = {}
    read = _checksums(
        spark, table, spans, found, columns, frozenset(observed), frozenset(in_driver)
    )
    for i, sums in in_driver.items():
        read[(i, 1)] = sums
    partitions = _partitions(spans, found, observed, read, frozenset(in_driver), by)
    if in_driver and confirm and any(not p["match"] for p in partitions):
        log.warning("validation: the driver's checksum of the outputs differs; read by Spark")
        confirmed = compare_spans(spark, table, spans, found, columns, observed, driver=False)
        for p in confirmed:
            p["driver_mismatch_confirmed"] = not p["match"]
        return confirmed
    return partitions


def _partitions(
    spans: list[Span],
    found: list[SpanFiles],
    observed: dict[int, list[tuple[int, int]]],
    read: dict[tuple[int, int], dict[str, tuple[int, int]]],
    in_driver: frozenset[int],
    by: str = "driver",
) -> list[dict[str, Any]]:
    partitions: list[dict[str, Any]] = []
    for i, (span, files) in enumerate(zip(spans, found, strict=True)):
        labels: list[Any] = [p.label for p in files.partitions]
        index = {**files.inputs, **files.outputs}
        if files.respecified:
            labels = [f"every partition the rewrite touched ({len(labels)}; its spec changed)"]
            index = dict.fromkeys(index, 0)
        sums = [[(0, 0), (0, 0)] for _ in labels]  # per partition: [side 0, side 1]
        for k, (n, h) in enumerate(observed.get(i, [])):
            k = 0 if files.respecified else k
            rows, total = sums[k][0]
            sums[k][0] = (rows + n, total + h)
        for side, wanted in enumerate((files.inputs, files.outputs)):
            for location, (n, h) in read.get((i, side), {}).items():
                if location not in wanted:
                    raise RuntimeError(f"validation read a file it did not stage: {location}")
                k = index[location]
                rows, total = sums[k][side]
                sums[k][side] = (rows + n, total + h)
        for k, label in enumerate(labels):
            (n0, h0), (n1, h1) = sums[k]
            partitions.append(
                {
                    "partition": label,
                    "rows_before": n0,
                    "rows_after": n1,
                    "match": n0 == n1 and h0 == h1,
                    "before_snapshot": span.before,
                    "after_snapshot": span.after,
                    "outputs_read_by": by if i in in_driver else "spark",
                }
            )
    return partitions


def _compare(
    spark: SparkSession,
    table: Any,
    spans: list[Span],
    policy: ValidationPolicy,
    observed: Observed | None = None,
) -> dict[str, Any]:
    columns = chosen_columns(table, policy)
    if not columns:
        return _skipped("the table has no column of a primitive type to checksum")
    jvm: Any = spark._jvm
    started = time.monotonic()
    found = [span_files(jvm, table, span) for span in spans]
    estimate = sum(f.input_rows for f in found)
    # metadata (which files, partitions and rows) against the one scan of both sides
    seconds = {"metadata": round(time.monotonic() - started, 3)}
    if estimate > policy.max_rows:
        return {
            **_skipped(
                f"the files the rewrite replaced held {estimate} rows > validation.max_rows "
                f"{policy.max_rows}: not read to check them"
            ),
            "rows_estimate": estimate,
            "max_rows": policy.max_rows,
        }
    lineage = lineage_columns(jvm, table, spans)
    inputs: dict[int, list[tuple[int, int]]] = {}
    if observed is not None and observed.columns == tuple(columns + lineage):
        for i, files in enumerate(found):
            sums = observed_inputs(files, observed)
            if sums is not None:
                inputs[i] = sums
    started = time.monotonic()
    hasher = observed.hasher if observed is not None and inputs else "spark"
    partitions = compare_spans(
        spark,
        table,
        spans,
        found,
        columns + lineage,
        inputs,
        hasher=hasher,
        # asked last: the outputs' sums overlap the commit and the metadata read above
        written=observed.written() if observed is not None and observed.written else None,
    )
    seconds["scan"] = round(time.monotonic() - started, 3)
    failed = any(not p["match"] for p in partitions)
    partitions.sort(key=lambda p: p["match"])
    return {
        "status": "failed" if failed else "passed",
        "columns": columns,
        "row_lineage": lineage,
        "rows": sum(p["rows_before"] for p in partitions),
        "rows_estimate": estimate,
        "partitions_checked": len(partitions),
        "partitions": partitions[:MAX_LISTED],
        "spans": [
            {"before_snapshot": s.before, "after_snapshot": s.after, "commits": len(s.commits)}
            for s in spans
        ],
        "max_rows": policy.max_rows,
        # the inputs' sums: observed during the rewrite's own read, or read here
        "inputs": "observed" if len(inputs) == len(spans) else "read",
        # the outputs' sums: computed in the driver's Python (small outputs whose inputs were
        # observed: no Spark job), by DuckDB (an Arrow rewrite's, as its inputs were: as each
        # was written, "duckdb_as_written", or read here) or read by Spark
        "outputs": partitions[0]["outputs_read_by"]
        if partitions and len({p["outputs_read_by"] for p in partitions}) == 1
        else "spark",
        "seconds": seconds,
        "reason": (
            "a partition's rows changed" + (" (or their row ids)" if lineage else "")
            if failed
            else "every touched partition holds the same rows"
            + (" with the same row ids and sequence numbers" if lineage else "")
        ),
    }


# --- the test-only failpoint ------------------------------------------------------------


def _corrupt(
    spark: SparkSession, name: str, table: Any, branch: str, target: str, *, write: bool
) -> None:
    """Drop one data file of the rewrite's output on `branch` (where it committed: its
    staging branch) in a commit carrying the task's tags, as if the rewrite had lost its
    rows; with `write`, then a writer appends a copy of one row to `target` (no tags).
    Reached only with settings.failpoints_enabled."""
    table.refresh()
    snapshot = table.snapshot(branch)
    added = next(each(snapshot.addedDataFiles(table.io())), None)
    if added is None:
        return
    log.warning("failpoint: dropping %s from %s", added.location(), table.name())
    delete = table.newDelete().toBranch(branch).deleteFile(added)
    for key, value in commit_properties().items():
        delete = delete.set(key, value)
    delete.commit()
    if write:
        into = name if target == MAIN_BRANCH else f"{name}.`branch_{target}`"
        spark.sql(f"INSERT INTO {into} SELECT * FROM {into} LIMIT 1").collect()
    table.refresh()


def _renumber(spark: SparkSession, name: str, table: Any, branch: str) -> None:
    """Write the rows of `branch` (where the rewrite committed) again over their partitions,
    under the task's commit tags: the same values, written as new rows, so a v3 table gives
    them new row ids and sequence numbers (a rewrite that broke row lineage). Reached only
    with settings.failpoints_enabled."""
    into = f"{name}.`branch_{branch}`" if branch != MAIN_BRANCH else name
    log.warning("failpoint: writing the rows of %s again as new rows", into)
    rows = spark.table(into).localCheckpoint()
    writer = rows.writeTo(into)
    for key, value in commit_properties().items():
        writer = writer.option(f"snapshot-property.{key}", value)
    writer.overwritePartitions()
    table.refresh()
