"""A Delta compaction rewritten by pyarrow and committed by delta-rs, validated before it
commits, with no JVM (issue 30: a tiny Delta compaction took ~390x deltalake's own
`optimize.compact()` as a Spark OPTIMIZE, and Spark's commit came before its check).

It takes a compaction plan (`kinds.delta`) when copying files is all it asks
(`eligible` says why not, and Spark's OPTIMIZE runs it): local Parquet files, no deletion
vector on a file it would rewrite, no column mapping, primitive columns, partition columns
of types whose log spelling is plain (string, integers, date, boolean), a writer protocol
delta-rs commits (`WRITER_FEATURES`), no purge to run, `compaction.native_rewrite` on.

As Delta's OPTIMIZE does: in each planned partition, the files under the plan's minimum
size, when there are two or more, are copied (`parquet_copy.copy`: row group by row group,
cast to the table's schema, which Delta's files hold without the partition columns; each
file's own schema checked as it is opened) into files of the target size, in row groups of
at most delta-rs' 1 Mi rows. DuckDB sums the inputs on a thread of its own once pyarrow has
read them (beside the write). Then, before anything is visible: DuckDB reads the written
files back from disk (big ones in two halves at once) and their rows and checksum must be
the inputs' (`parquet_copy.sums`), partition by partition (a partition's rows moved to
another changes two partitions' sums).
A mismatch deletes the written files, commits nothing and raises `RewriteMismatch`. A
match commits one delta-rs transaction at the version read: the inputs removed and the
outputs added (`dataChange` false, each with its statistics from its Parquet footer), the
job's mark in the commit's commitInfo (`timeline.find_job_commits` finds it: never twice).
delta-rs' conflict check fails the commit when another writer removed one of the inputs
since (`Conflict`); an append meanwhile commits beside it. Its post-commit hook writes a
checkpoint when `delta.checkpointInterval` asks.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import Any

from lakewarden import parquet_copy
from lakewarden.formats.base import ATTEMPT_KEY, TASK_KEY
from lakewarden.formats.delta.facts import file_name, partition_key
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.outcomes import RewriteMismatch

# Writer features delta-rs 1.6.6 commits a file rewrite under (a table asking for another,
# e.g. clustering's domain metadata or row tracking, is Spark's).
WRITER_FEATURES = frozenset(
    {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}
)
MAX_LEGACY_WRITER = 4  # writer versions 5 and 6 imply column mapping and identity columns
PARTITION_TYPES = frozenset({"string", "byte", "short", "integer", "long", "date", "boolean"})
CODEC = "snappy"  # Delta's writers' default (Spark's and delta-rs')
ROW_GROUP_BYTES = 128 << 20
STRING_STATS_CHARS = 32  # Delta's own prefix length for string min/max
# delta.dataSkippingNumIndexedCols' default: statistics for the first 32 columns
INDEXED_COLUMNS_DEFAULT = 32


class Ineligible(Exception):
    """The plan is not a plain copy this path commits: why (Spark's OPTIMIZE runs it)."""


class Conflict(RuntimeError):
    """Another writer committed a change to an input since the rewrite read the table:
    nothing was committed (the attempt is retried, re-planned)."""


@dataclass(frozen=True)
class Source:
    """A live file the rewrite removes."""

    path: str  # as the log spells it (relative to the table)
    local: str  # on this machine
    size: int
    records: int


@dataclass
class Part:
    """One partition's rewrite: its inputs, and the outputs once written."""

    key: str
    values: dict[str, str | None]  # as the log spells them
    inputs: list[Source]
    outputs: list[tuple[str, int]] = field(default_factory=list)  # (location, size)


@dataclass
class Selection:
    """What the rewrite copies, read at `version`."""

    version: int
    table: Any  # delta-rs' DeltaTable at `version`
    timeline: DeltaTimeline
    schema: Any  # pa.Schema of the data files (no partition columns)
    partition_columns: list[str]
    stats_columns: list[str]
    parts: list[Part]


def _arrow_normal(arrow_type: Any) -> Any:
    """An Arrow type as the table's schema names it (delta-rs reads strings as views)."""
    import pyarrow as pa

    if pa.types.is_large_string(arrow_type) or pa.types.is_string_view(arrow_type):
        return pa.string()
    if pa.types.is_large_binary(arrow_type) or pa.types.is_binary_view(arrow_type):
        return pa.binary()
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz in ("+00:00", "Etc/UTC", "Z"):
        return pa.timestamp(arrow_type.unit, tz="UTC")
    return arrow_type


def _castable(got: Any, want: Any) -> bool:
    """Whether a file's column type reads as the table's without changing a value: the
    same, or a timestamp in other units, or Spark's INT96 (nanoseconds, no zone: an
    instant in UTC, as Delta's `timestamp` is) for a `timestamp` column."""
    import pyarrow as pa

    got = _arrow_normal(got)
    if got == want:
        return True
    if not (pa.types.is_timestamp(got) and pa.types.is_timestamp(want)):
        return False
    return bool(got.tz == want.tz or (got.tz is None and want.tz == "UTC"))


def _spelled(value: Any) -> str | None:
    """A typed partition value as Delta's log spells it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def _stats_columns(config: Mapping[str, str], data_columns: list[str]) -> list[str]:
    """The columns Delta keeps statistics of (`delta.dataSkippingStatsColumns`, else the
    first `delta.dataSkippingNumIndexedCols`)."""
    named = config.get("delta.dataSkippingStatsColumns")
    if named:
        wanted = {c.strip() for c in named.split(",")}
        return [c for c in data_columns if c in wanted]
    n = int(config.get("delta.dataSkippingNumIndexedCols") or INDEXED_COLUMNS_DEFAULT)
    return data_columns if n < 0 else data_columns[:n]


def plan_ineligible(plan: Mapping[str, Any]) -> str | None:
    """Why the plan alone rules this path out (no table read), else None."""
    if plan.get("native_rewrite", True) is False:
        return "compaction.native_rewrite is off"
    if plan.get("purge_partitions") is not None:
        return "files with deletion vectors to purge (REORG … APPLY (PURGE))"
    if not plan.get("optimize", True):
        return "the plan has no bin-pack"
    path = str(plan.get("path") or "")
    if parquet_copy.local_path(path) is None:
        return f"{path or 'the table'} is not on a local file system"
    return None


def select(
    path: str, plan: Mapping[str, Any], storage: Mapping[str, str] | None = None
) -> Selection:
    """The table read at its newest version and the files the plan's compaction copies;
    Ineligible saying why this path does not take it."""
    import pyarrow as pa

    from lakewarden.formats.delta.facts import file_rows

    why = plan_ineligible(plan)
    if why is not None:
        raise Ineligible(why)
    timeline = DeltaTimeline(path, storage)
    table = timeline.open_table()
    version = table.version()
    protocol, metadata = table.protocol(), table.metadata()
    config = dict(metadata.configuration or {})
    if config.get("delta.columnMapping.mode", "none") != "none":
        raise Ineligible(f"column mapping ({config['delta.columnMapping.mode']})")
    writer = protocol.min_writer_version
    if writer > MAX_LEGACY_WRITER and writer != 7:
        raise Ineligible(f"Delta writer version {writer}")
    unknown = sorted(set(protocol.writer_features or []) - WRITER_FEATURES)
    if unknown:
        raise Ineligible(f"writer feature(s) {', '.join(unknown)}")
    columns = list(metadata.partition_columns or [])
    types = {f.name: f.type for f in table.schema().fields}
    for c in columns:
        kind = str(getattr(types[c], "type", types[c]))
        if kind not in PARTITION_TYPES:
            raise Ineligible(f"partition column {c!r} of type {kind}")
    arrow = pa.schema(table.schema().to_arrow())
    fields = []
    for f in arrow:
        if f.name in columns:
            continue
        if pa.types.is_nested(f.type):
            raise Ineligible(f"column {f.name!r} of nested type {f.type}")
        fields.append(pa.field(f.name, _arrow_normal(f.type), nullable=f.nullable))
    schema = pa.schema(fields)
    wanted = plan.get("partitions")
    keys = (
        {partition_key(columns, {f"partition.{c}": v.get(c) for c in columns}) for v in wanted}
        if wanted
        else None
    )
    small = int(plan.get("min_file_size_bytes") or plan["target_file_size_bytes"])
    by_key: dict[str, Part] = {}
    for row in file_rows(table, bounds=False):
        if (keys is not None and row.key not in keys) or row.size >= small:
            continue
        if row.has_vector:
            raise Ineligible(f"{row.file.path} has a deletion vector")
        local = parquet_copy.local_path(f"{path.rstrip('/')}/{row.file.path}")
        if local is None or "://" in row.file.path:
            raise Ineligible(f"{row.file.path} is not on a local file system")
        part = by_key.setdefault(
            row.key, Part(row.key, {c: _spelled(row.values[c]) for c in columns}, [])
        )
        part.inputs.append(Source(row.file.path, local, row.size, row.records))
    parts = [p for _, p in sorted(by_key.items()) if len(p.inputs) >= 2]
    # each file's own schema is checked as the copy opens it (`_check_schema`): a footer
    # read here too would be each file's second
    return Selection(
        version, table, timeline, schema, columns, _stats_columns(config, schema.names), parts
    )


def _check_schema(want: Any, seen: set[Any], path: str, found: Any) -> None:
    """Ineligible unless the Parquet file at `path`, whose Arrow schema is `found`, holds
    each column of `want` in a type that reads as the table's (`_castable`); `seen`: the
    schemas already found good (most of a table's files have one)."""
    if found in seen:
        return
    for column in want:
        at = found.get_field_index(column.name)
        if at < 0 or not _castable(found.field(at).type, column.type):
            raise Ineligible(f"{path}'s Parquet schema is not the table's ({column.name})")
    seen.add(found)


def _json_value(value: Any, upper: bool) -> Any:
    """A footer's min (`upper` False) or max as Delta's statistics spell it (as delta-rs
    writes them); None: no bound kept (bytes, NaN, long strings, a decimal without an exact
    JSON number). A timestamp is kept to the millisecond, rounded outwards (a min down, a
    max up), so a reader skipping files by it never skips a file holding the value."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value if len(value) <= STRING_STATS_CHARS else None
    if isinstance(value, Decimal):
        number = float(value)
        return number if math.isfinite(number) and Decimal(repr(number)) == value else None
    if isinstance(value, datetime):
        millis = value.replace(microsecond=value.microsecond // 1000 * 1000)
        if upper and millis != value:
            millis += timedelta(milliseconds=1)
        if value.tzinfo is None:  # timestamp_ntz
            return millis.strftime("%Y-%m-%d %H:%M:%S.") + f"{millis.microsecond // 1000:03d}"
        utc = millis.astimezone(UTC)
        return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    if type(value) is date:
        return value.isoformat()
    return None


def stats_of(local: str, columns: list[str]) -> str:
    """A written file's Delta statistics (numRecords, minValues, maxValues, nullCount of
    `columns`) from its Parquet footer, as the add action's JSON."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(local).metadata
    index = {meta.schema.column(i).name: i for i in range(meta.num_columns)}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in columns:
        i = index.get(name)
        if i is None:
            continue
        lo: Any = None
        hi: Any = None
        count, counted, bounded = 0, True, True
        for g in range(meta.num_row_groups):
            s = meta.row_group(g).column(i).statistics
            if s is None or not s.has_null_count:
                counted = bounded = False
                break
            count += int(s.null_count)
            if not bounded:
                continue
            if s.has_min_max:
                try:
                    a, b = _json_value(s.min, False), _json_value(s.max, True)
                except ValueError:  # a value Python cannot hold (nanoseconds): no bounds
                    a = b = None
                if a is None or b is None:
                    bounded = False  # no exact JSON form: no bounds, the nulls still count
                    continue
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
            elif s.null_count != meta.row_group(g).num_rows:
                bounded = False
        if not counted:
            continue
        nulls[name] = count
        if bounded and lo is not None:
            mins[name], maxs[name] = lo, hi
    return json.dumps(
        {"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
        separators=(",", ":"),
    )


def _copy(
    selection: Selection,
    part: Part,
    base: str,
    target: int,
    read_all: Callable[[], None] | None = None,
) -> parquet_copy.Copied:
    """The partition's inputs copied into new files at the table's root (Delta's paths
    are the log's: a file need not sit in a partition's folder); `read_all()` once they
    have all been read."""
    shape = parquet_copy.Layout(
        selection.schema,
        CODEC,
        None,
        ROW_GROUP_BYTES,
        parquet_copy.group_rows([s.records for s in part.inputs]),
    )

    def new_location() -> str:
        return f"{base}/part-00000-lakewarden-{uuid.uuid4()}-c000.snappy.parquet"

    inputs = [s.local for s in part.inputs]
    check = partial(_check_schema, selection.schema, set())
    return parquet_copy.copy(inputs, shape, target, new_location, read_all=read_all, checked=check)


def _halves(location: str) -> list[tuple[str, tuple[int, int] | None]]:
    """A written file as the pieces DuckDB sums it in, two threads at once: its rows before
    and from the row group boundary nearest its middle (the footer only places the cut:
    the pieces cover every position whatever it says), or whole (one row group)."""
    import pyarrow.parquet as pq

    local = parquet_copy.local_path(location)
    assert local is not None
    meta = pq.ParquetFile(local).metadata
    counts = (meta.row_group(g).num_rows for g in range(meta.num_row_groups))
    ends = list(itertools.accumulate(counts))
    if len(ends) < 2:
        return [(local, None)]
    cut = min(ends[:-1], key=lambda end: abs(2 * end - ends[-1]))
    return [(local, (0, cut)), (local, (cut, 1 << 62))]


def _mismatches(
    selection: Selection,
    summed_in: Mapping[str, Future[tuple[int, int]]],
    pool: Executor,
    hash_outputs: Callable[..., tuple[int, int]],
    split: bool,
) -> tuple[list[str], dict[str, tuple[int, int]]]:
    """The partitions whose written files, read back by DuckDB, are not their inputs
    (`summed_in`, maybe still being summed: the outputs' sums start first), and the
    inputs' sums: `hash_outputs` (`parquet_copy.sums`) on `pool`, each file in halves if
    `split`."""
    columns = list(selection.schema.names)
    summed: dict[str, list[Future[tuple[int, int]]]] = {}
    for part in selection.parts:
        locations = [loc for loc, _ in part.outputs]
        pieces = [h for loc in locations for h in _halves(loc)] if split else None
        summed[part.key] = (
            [pool.submit(hash_outputs, [path], columns, 1, rows) for path, rows in pieces]
            if pieces is not None
            else [pool.submit(hash_outputs, locations, columns, 1)]
        )
    sums_in = {key: future.result() for key, future in summed_in.items()}
    out = []
    for part in selection.parts:
        found = [future.result() for future in summed[part.key]]
        got = (sum(n for n, _ in found), sum(h for _, h in found))
        if got != sums_in[part.key]:
            out.append(
                f"partition {part.key or '(table)'}: {sums_in[part.key][0]} rows (checksum "
                f"{sums_in[part.key][1]}) in, {got[0]} ({got[1]}) written"
            )
    return out, sums_in


def record_check(
    metrics: dict[str, Any],
    wrong: list[str],
    rows: int,
    checksum: int,
    partitions: int,
    seconds: float,
) -> None:
    """A rewrite's check before its commit (a compaction; Spark's Z-order or clustering),
    as the run's `validation` metrics (the inputs' `rows` and `checksum`); `RewriteMismatch`
    with them when partitions are `wrong` (the caller has deleted the written files:
    nothing was committed)."""
    metrics["validation"] = {
        "status": "failed" if wrong else "passed",
        "reader": "duckdb",
        "when": "before the commit",
        "rows": rows,
        "checksum_before": str(checksum),
        "partitions": partitions,
        "seconds": round(seconds, 3),
    }
    if wrong:
        metrics["validation"]["mismatches"] = wrong
        raise RewriteMismatch(
            "the rewrite's written files are not its inputs (read back by DuckDB; "
            "nothing was committed, the files were deleted): " + "; ".join(wrong),
            metrics,
        )
    metrics["validation"].update(rows_after=rows, checksum_after=str(checksum))


def compact(
    path: str,
    plan: Mapping[str, Any],
    mark: Mapping[str, str],
    before_commit: Callable[[], None],
    *,
    storage: Mapping[str, str] | None = None,
    selection: Selection | None = None,
    corrupt: bool = False,
) -> dict[str, Any]:
    """Rewrite the plan's partitions (`select`, unless given), check the written files
    against their inputs, and commit at the version read with `mark` (the job's
    `TASK_KEY`, `ATTEMPT_KEY`) in the commitInfo; `before_commit` is asked right before
    (the policy's last look, a cancel). The run's metrics: what the Spark path reports
    (committed version, files and bytes, validation) and `engine`. Nothing committed when it
    raises; a mismatch raises `RewriteMismatch` with the metrics, an input whose Parquet
    schema is not the table's `Ineligible`. `corrupt`: test-only
    (the `corrupt-rewrite` failpoint), the first written file loses a row, for the check
    to catch."""
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import AddAction, CommitProperties, RemoveAction

    seconds: dict[str, float] = {}
    started = time.perf_counter()
    # Its CPU (the run's cost: no Spark task counts it): this thread's, DuckDB's on it
    # (threads=1), and the copy's and input sums' threads
    cpu_started, elsewhere = time.thread_time(), parquet_copy.ThreadCpu()
    chosen = selection if selection is not None else select(path, plan, storage)
    seconds["plan"] = time.perf_counter() - started
    engine: dict[str, Any] = {"engine": "arrow", "partitions": len(chosen.parts)}
    metrics: dict[str, Any] = {"engine": engine, "read_version": chosen.version}
    if not chosen.parts:
        return nothing_to_compact(metrics, engine, seconds)
    base = parquet_copy.local_path(path.rstrip("/"))
    assert base is not None  # select() checked
    target = int(plan["target_file_size_bytes"])
    columns = list(chosen.schema.names)
    copying = time.perf_counter()
    try:
        # DuckDB sums each partition's inputs once pyarrow has read them, on another thread
        # while pyarrow writes (C++, off the GIL: the write is one thread, the reads took
        # both cores); tiny inputs one after the other (a thread costs more than it saves)
        small = sum(s.size for p in chosen.parts for s in p.inputs) <= parquet_copy.INLINE_BYTES
        with (
            parquet_copy.Inline() if small else ThreadPoolExecutor(max_workers=1) as hashing,
            parquet_copy.Inline() if small else ThreadPoolExecutor(max_workers=2) as pool,
        ):
            hash_inputs = parquet_copy.sums
            if not small:  # on the hashing thread: its CPU counted there
                hash_inputs = partial(elsewhere.timed, parquet_copy.sums)
            summed: dict[str, Future[tuple[int, int]]] = {}

            def sum_inputs(part: Part) -> None:
                if part.key not in summed:  # the plan's inputs, whatever the copy read
                    paths = [s.local for s in part.inputs]
                    summed[part.key] = hashing.submit(hash_inputs, paths, columns, 1)

            for part in chosen.parts:
                copied = _copy(chosen, part, base, target, partial(sum_inputs, part))
                sum_inputs(part)  # unless the copy asked for it
                part.outputs = copied.files
                elsewhere.seconds += copied.elsewhere_cpu_s
            if corrupt:
                _drop_a_row(chosen.parts[0].outputs[0][0])
            seconds["copy"] = time.perf_counter() - copying
            checking = time.perf_counter()
            # the written files read back by DuckDB (big ones in halves, two threads), beside
            # the inputs' sums if they are still going
            wrong, sums_in = _mismatches(chosen, summed, pool, hash_inputs, split=not small)
            seconds["validate"] = time.perf_counter() - checking
        rows = sum(n for n, _ in sums_in.values())
        checksum = sum(h for _, h in sums_in.values())
        record_check(metrics, wrong, rows, checksum, len(chosen.parts), seconds["validate"])
        now = int(time.time() * 1000)
        actions: list[Any] = []
        for part in chosen.parts:
            for source in part.inputs:
                actions.append(RemoveAction(source.path, False, now, source.size, part.values))
            for location, size in part.outputs:
                local = parquet_copy.local_path(location)
                assert local is not None
                actions.append(
                    AddAction(
                        file_name(location),
                        size,
                        part.values,
                        int(os.path.getmtime(local) * 1000),
                        False,
                        stats_of(local, chosen.stats_columns),
                    )
                )
        before_commit()
        committing = time.perf_counter()
        try:
            # the table as read (its version): delta-rs checks what was committed since
            chosen.table.create_write_transaction(
                actions,
                "append",
                schema=chosen.table.schema(),
                partition_by=chosen.partition_columns or None,
                commit_properties=CommitProperties(
                    custom_metadata={**mark, "lakewarden.engine": "arrow"}
                ),
            )
        except CommitFailedError as exc:
            if "concurrent" in str(exc).lower():
                raise Conflict(f"CommitFailedError: {str(exc).splitlines()[0]}") from exc
            raise
        seconds["commit"] = time.perf_counter() - committing
    except BaseException:
        _forget_unless_committed(path, storage, mark, chosen)
        raise
    engine["seconds"] = rounded(seconds)
    engine["driver_cpu_s"] = round(time.thread_time() - cpu_started + elsewhere.seconds, 3)
    # read forward from the version read (delta-rs does not say which version it wrote:
    # the next one, unless other writers committed in between)
    committed = chosen.timeline.job_version_after(int(mark[TASK_KEY]), chosen.version)
    assert committed is not None  # delta-rs returned: it committed
    metrics.update(
        committed_version=committed[0],
        operation=committed[1],
        files_removed=sum(len(p.inputs) for p in chosen.parts),
        files_added=sum(len(p.outputs) for p in chosen.parts),
        bytes_removed=sum(s.size for p in chosen.parts for s in p.inputs),
        bytes_added=sum(size for p in chosen.parts for _, size in p.outputs),
    )
    return metrics


def _forget_unless_committed(
    path: str, storage: Mapping[str, str] | None, mark: Mapping[str, str], chosen: Selection
) -> None:
    """After a failure: the written files deleted, unless the commit landed (a failure
    after delta-rs wrote the version, e.g. its checkpoint): the table references them."""
    try:
        found = DeltaTimeline(path, storage).find_job_commits(int(mark[TASK_KEY]))
    except Exception:
        return  # unknown: a file left behind is VACUUM's, a deleted live file is a loss
    if found is not None and found.summary.get(ATTEMPT_KEY) == mark.get(ATTEMPT_KEY):
        return
    parquet_copy.remove([loc for p in chosen.parts for loc, _ in p.outputs])


def _drop_a_row(location: str) -> None:
    """Write the file at `location` again without its first row (the failpoint's damage)."""
    import pyarrow.parquet as pq

    local = parquet_copy.local_path(location)
    assert local is not None
    pq.write_table(pq.read_table(local).slice(1), local)


def rounded(seconds: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in seconds.items()}


def nothing_to_compact(
    metrics: dict[str, Any], engine: dict[str, Any], seconds: dict[str, float]
) -> dict[str, Any]:
    """A compaction's metrics when no partition has two or more small files to merge."""
    engine["seconds"] = rounded(seconds)
    metrics.update(
        committed_version=None,
        validation={"status": "skipped", "reason": "nothing was committed"},
        note="no partition has two or more files under the minimum size",
    )
    return metrics
