"""Hudi's table services through Hudi's own Spark procedures, on a Hudi-family session
(`lakewarden.spark.session`, `family="hudi"`): compaction and clustering (`run_compaction`,
`run_clustering`: planned, then executed by instant), clean (`run_clean`) and timeline
archival (`archive_commits`), savepoints and restore (`create_savepoint`,
`rollback_to_savepoint`, `delete_savepoint`: a rewrite's undo). A table without Hudi's
metadata table is served with `hoodie.metadata.enable=false` (a procedure's write client
would otherwise build one): in the procedure's options, or for those without options, in
the session's conf (`with_metadata`), which Hudi's write client reads too.

Compaction is planned first (`op => 'schedule'`, which returns the instant it planned) and
then executed by that instant (`op => 'execute', instants => …`): the procedures take no
extra metadata, so the planned instant is lakewarden's mark on the commit (research note
§2), and a retry finds it completed (done) or still pending (run again: Hudi rolls back
the failed inflight attempt first). An instant someone else planned is never run here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakewarden.catalogs.catalog import IDENTIFIER
from lakewarden.formats.hudi import lock as hudi_lock
from lakewarden.formats.hudi.storage import storage_for
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.outcomes import PlanRejected
from lakewarden.spark.sql import column, path_literal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_INSTANT_DIGITS = (14, 17)

# Hudi's multi-writer concurrency control, for lakewarden's jobs beside a live writer
# (docs/hudi.md, "Beside a live writer"): optimistic concurrency, a lock every writer of the
# table shares (`formats.hudi.lock`: by default a file Hudi creates atomically in the
# table's own `.hoodie/`), and failed writes rolled back lazily by the cleaner once their
# heartbeat expired, never eagerly by the next writer that starts (the default, which would
# roll back a live writer's inflight commit, or ours). The writer must set the same keys.
LOCK_PROVIDER = hudi_lock.CLASSES[hudi_lock.FILESYSTEM]
LOCK_EXPIRE_MINUTES = hudi_lock.FILESYSTEM_EXPIRE_MINUTES
# How often a lakewarden job touches its instant's heartbeat (Hudi's default is 60 s). A
# killed attempt's instant is taken for dead after `HEARTBEAT_TOLERABLE_MISSES` of these, so
# the retry waits 30 s instead of 2 minutes; a touch every 15 s costs one small write. Any
# other writer that judges our heartbeat by a longer interval of its own (Flink's 60 s)
# still sees it fresh.
HEARTBEAT_INTERVAL_S = 15
HEARTBEAT_TOLERABLE_MISSES = 2  # Hudi's default, set explicitly: the expiry below needs it
CONCURRENCY = {
    "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
    "hoodie.write.lock.provider": LOCK_PROVIDER,
    "hoodie.write.lock.filesystem.expire": str(LOCK_EXPIRE_MINUTES),
    "hoodie.cleaner.policy.failed.writes": "LAZY",
    "hoodie.client.heartbeat.interval_in_ms": str(HEARTBEAT_INTERVAL_S * 1000),
    "hoodie.client.heartbeat.tolerable.misses": str(HEARTBEAT_TOLERABLE_MISSES),
}
# Where the file-system lock cannot serve (an object store creates no file atomically, and
# Hudi refuses the file-system lock there) and the catalog names no other: the job's own
# JVM's lock, which no other process shares (docs/hudi.md).
IN_PROCESS_LOCK = hudi_lock.CLASSES[hudi_lock.IN_PROCESS]


def concurrency(base_path: str, props: Mapping[str, str] | None = None) -> dict[str, str]:
    """Hudi's concurrency settings for a job on the table at `base_path`: `CONCURRENCY` with
    the lock the catalog's properties (`props`; by default those `table_storage` set for the
    table) choose (`formats.hudi.lock`)."""
    props = storage_for(base_path) if props is None else props
    base = {k: v for k, v in CONCURRENCY.items() if not k.startswith("hoodie.write.lock.")}
    return {
        **base,
        **hudi_lock.options(
            base_path, props, lambda: HudiTimeline(base_path).properties["hoodie.table.name"]
        ),
    }


def with_concurrency(spark: SparkSession, base_path: str) -> None:
    """Hudi's concurrency control (`concurrency`) in the session's conf, which every
    procedure's write client reads (as `with_metadata`)."""
    for key, value in concurrency(base_path).items():
        spark.conf.set(key, value)


def keep_version(table_version: int) -> dict[str, str]:
    """Write settings that keep a table at its own version: Hudi 1.x's write client (the
    bundle's 1.2.0 writes version 9) otherwise upgrades every table it writes, and the
    table's own writer of an older release (a Flink writer on Hudi 0.14: version 6) could
    no longer write it. Never upgrade a writer's table."""
    return {"hoodie.write.table.version": str(table_version), "hoodie.write.auto.upgrade": "false"}


def with_table_version(spark: SparkSession, base_path: str) -> None:
    """`keep_version` of the table at `base_path` in the session's conf, which every
    procedure's write client reads (as `with_concurrency`)."""
    for key, value in keep_version(HudiTimeline(base_path).table_version).items():
        spark.conf.set(key, value)


@dataclass(frozen=True)
class CompactionRun:
    instant: str | None  # the compaction lakewarden planned; None: nothing to compact
    completed: bool  # its commit is on the timeline


def schedule_compaction(spark: SparkSession, base_path: str) -> str | None:
    """Plan a compaction of every file slice with log files (Hudi's default strategy, the
    delta-commit trigger set to one so that the plan is made now); its instant, or None.
    `op => 'schedule'` answers with every pending compaction, also those someone else
    planned earlier (seen on 1.2.0): only an instant that was not pending before is ours."""
    before = {i.requested for i in HudiTimeline(base_path).pending()}
    rows = spark.sql(
        f"CALL run_compaction(op => 'schedule', path => {path_literal(base_path)}, "
        "options => 'hoodie.compact.inline.max.delta.commits=1')"
    ).collect()
    ours = sorted(str(r["timestamp"]) for r in rows if str(r["timestamp"]) not in before)
    return ours[-1] if ours else None


# Hudi's heartbeat of a running table service (`.hoodie/.heartbeat/<instant>`, touched every
# `hoodie.client.heartbeat.interval_in_ms`: `HEARTBEAT_INTERVAL_S` in lakewarden's jobs) is
# taken for a live job until it is `hoodie.client.heartbeat.tolerable.misses` intervals old:
# until then Hudi refuses to execute the instant ("due to heartbeat by concurrent
# writer/job"). The retry judges it by its own settings, which are the same.
HEARTBEAT_EXPIRY_S = float(HEARTBEAT_TOLERABLE_MISSES * HEARTBEAT_INTERVAL_S)


def heartbeat_wait_s(base_path: str, instant: str, now: float) -> float:
    """How long until Hudi takes `instant`'s heartbeat (a killed attempt's) for expired: 0
    when there is none or it has expired (a few seconds' margin past Hudi's rule)."""
    from pyarrow import fs as pafs

    timeline = HudiTimeline(base_path)
    info = timeline.fs.get_file_info(f"{timeline.base}/.hoodie/.heartbeat/{_instant(instant)}")
    if info.type != pafs.FileType.File or info.mtime is None:
        return 0.0
    return max(0.0, info.mtime.timestamp() + HEARTBEAT_EXPIRY_S + 5.0 - now)


def run_compaction(spark: SparkSession, base_path: str, instant: str) -> None:
    """Execute the planned compaction `instant` (and only it)."""
    if not instant.isdigit() or len(instant) not in _INSTANT_DIGITS:
        raise ValueError(f"not a Hudi instant: {instant!r}")
    spark.sql(
        f"CALL run_compaction(op => 'execute', path => {path_literal(base_path)}, "
        f"instants => '{instant}')"
    ).collect()


def compact(spark: SparkSession, base_path: str, planned: str | None = None) -> CompactionRun:
    """Compact the table: plan (unless a retry passes the instant it `planned` before),
    execute, and read the timeline to see the compaction's commit."""
    timeline = HudiTimeline(base_path)
    if planned is not None and planned in {i.requested for i in timeline.completed()}:
        return CompactionRun(planned, True)  # an earlier attempt finished it
    instant = planned or schedule_compaction(spark, base_path)
    if instant is None:
        return CompactionRun(None, False)
    run_compaction(spark, base_path, instant)
    done = {i.requested: i for i in HudiTimeline(base_path).completed()}
    return CompactionRun(instant, instant in done and done[instant].action == "commit")


def _instant(instant: str) -> str:
    if not instant.isdigit() or len(instant) not in _INSTANT_DIGITS:
        raise ValueError(f"not a Hudi instant: {instant!r}")
    return instant


def _metadata(enabled: bool) -> str:
    return f"hoodie.metadata.enable={'true' if enabled else 'false'}"


# Hudi's layout strategies by the plan's name (`kinds.hudi_clustering`), as the
# run_clustering procedure resolves its `order_strategy`.
LAYOUTS = {"linear": "LINEAR", "z-order": "ZORDER", "hilbert": "HILBERT"}
SORT_COLUMNS = "hoodie.clustering.plan.strategy.sort.columns"


def clustering_options(
    columns: list[str], strategy: str, target_bytes: int, metadata: bool
) -> dict[str, str]:
    """A clustering's write options, for its schedule and its execution alike: the
    executing client reads the layout strategy, the sort columns (a curve's) and the
    target file size from its own config, not from the plan."""
    if strategy not in LAYOUTS:
        raise PlanRejected(f"not a Hudi layout strategy: {strategy!r}")
    size = str(int(target_bytes))
    return {
        SORT_COLUMNS: ",".join(column(c).strip("`") for c in columns),
        "hoodie.layout.optimize.strategy": LAYOUTS[strategy],
        "hoodie.clustering.plan.strategy.small.file.limit": size,
        "hoodie.clustering.plan.strategy.target.file.max.bytes": size,
        "hoodie.metadata.enable": "true" if metadata else "false",
    }


def schedule_clustering(
    spark: SparkSession,
    base_path: str,
    columns: list[str],
    strategy: str,
    target_bytes: int,
    metadata: bool,
) -> str | None:
    """Plan a clustering of the table's base files under `target_bytes`, sorted by
    `columns` with Hudi's layout `strategy` (linear, z-order, hilbert); its instant, or
    None (nothing Hudi would cluster). Only an instant that was not pending before is
    ours (as for compaction)."""
    options = clustering_options(columns, strategy, target_bytes, metadata)
    # The procedure's options are `k=v,…`: the sort columns go as its `order`.
    order = options.pop(SORT_COLUMNS)
    before = {i.requested for i in HudiTimeline(base_path).pending()}
    spark.sql(
        f"CALL run_clustering(op => 'schedule', path => {path_literal(base_path)}, "
        f"order => '{order}', order_strategy => '{strategy}', options => "
        f"'{','.join(f'{k}={v}' for k, v in options.items())}')"
    ).collect()
    ours = sorted(
        i.requested for i in HudiTimeline(base_path).pending() if i.requested not in before
    )
    return ours[-1] if ours else None


def run_clustering(spark: SparkSession, base_path: str, instant: str, metadata: bool) -> None:
    """Execute the planned clustering `instant` (and only it) with the procedure (what a
    plan `formats.hudi.precommit` cannot check runs). Its options cannot carry more than
    one sort column (they are `k=v,…`): Hudi's default layout (linear) executes it."""
    spark.sql(
        f"CALL run_clustering(op => 'execute', path => {path_literal(base_path)}, "
        f"instants => '{_instant(instant)}', options => '{_metadata(metadata)}')"
    ).collect()


def catalog_name(spark: SparkSession, base_path: str) -> str:
    """The table registered in the session's own (in-memory) catalog by its hoodie.properties
    name, for the procedures that take a table name only (`run_clean`); nothing is written
    to the table."""
    name = HudiTimeline(base_path).properties.get("hoodie.table.name", "")
    if not IDENTIFIER.match(name):
        raise PlanRejected(f"a Hudi table name lakewarden will not quote: {name!r}")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS default.`{name}` USING hudi LOCATION {path_literal(base_path)}"
    )
    return f"default.{name}"


def run_clean(
    spark: SparkSession, base_path: str, retain_commits: int, metadata: bool
) -> list[dict[str, Any]]:
    """Hudi's cleaner keeping the latest `retain_commits` write commits; its rows
    (`start_clean_time`, `total_files_deleted`, `earliest_commit_to_retain`, ...), none
    when it had nothing to clean."""
    table = catalog_name(spark, base_path)
    rows = spark.sql(
        f"CALL run_clean(table => '{table}', clean_policy => 'KEEP_LATEST_COMMITS', "
        f"retain_commits => {int(retain_commits)}, options => '{_metadata(metadata)}')"
    ).collect()
    return [r.asDict() for r in rows]


def archive(
    spark: SparkSession,
    base_path: str,
    min_commits: int,
    max_commits: int,
    retain: int,
    metadata: bool,
) -> int:
    """Hudi's timeline archival: once the active timeline holds more than `max_commits`
    instants, the oldest go to the archived timeline down to `min_commits` (never one the
    cleaner's `retain` commits need). Hudi's result code (0: done)."""
    rows = spark.sql(
        f"CALL archive_commits(path => {path_literal(base_path)}, "
        f"min_commits => {int(min_commits)}, max_commits => {int(max_commits)}, "
        f"retain_commits => {int(retain)}, enable_metadata => {'true' if metadata else 'false'})"
    ).collect()
    return int(rows[0][0]) if rows else 0


def with_metadata(spark: SparkSession, enabled: bool) -> None:
    """The session's `hoodie.metadata.enable`, for the procedures without options."""
    spark.conf.set("hoodie.metadata.enable", "true" if enabled else "false")


def create_savepoint(
    spark: SparkSession, base_path: str, instant: str, comments: str = "before a lakewarden rewrite"
) -> None:
    """Savepoint the completed commit `instant`: the cleaner keeps what it reads, and the
    table can be restored to it. `comments`: how lakewarden tells why it made it (one of
    its own constants, never outside text)."""
    if not all(c.isalnum() or c in " -" for c in comments):
        raise ValueError(f"not a savepoint comment lakewarden writes: {comments!r}")
    spark.sql(
        f"CALL create_savepoint(path => {path_literal(base_path)}, "
        f"commit_time => '{_instant(instant)}', user => 'lakewarden', "
        f"comments => '{comments}')"
    ).collect()


def restore_to_savepoint(spark: SparkSession, base_path: str, instant: str) -> None:
    """Restore the table to savepoint `instant`: every later instant rolled back."""
    spark.sql(
        f"CALL rollback_to_savepoint(path => {path_literal(base_path)}, "
        f"instant_time => '{_instant(instant)}')"
    ).collect()


def delete_savepoint(spark: SparkSession, base_path: str, instant: str) -> None:
    spark.sql(
        f"CALL delete_savepoint(path => {path_literal(base_path)}, "
        f"instant_time => '{_instant(instant)}')"
    ).collect()


# A TTL's commits carry this key in their extraMetadata (through the datasource's
# commit-metadata prefix, `_`): the task and attempt that made it, so that a retry finds a
# delete an earlier attempt committed and never deletes twice.
TTL_MARK = "_lakewarden.ttl"
# A pre-TTL savepoint's comment: how lakewarden tells its undo points from anyone else's.
PRE_TTL = "lakewarden pre-TTL"


def _write_options(base_path: str, operation: str, mark: str, metadata: bool) -> dict[str, str]:
    """The datasource options that write to the existing table at `base_path` as its
    hoodie.properties describe it (record key, partition fields, key generator)."""
    props = HudiTimeline(base_path).properties
    name = props.get("hoodie.table.name", "")
    if not IDENTIFIER.match(name):
        raise PlanRejected(f"a Hudi table name lakewarden will not quote: {name!r}")
    options = {
        "hoodie.table.name": name,
        "hoodie.datasource.write.operation": operation,
        "hoodie.datasource.write.recordkey.field": props.get("hoodie.table.recordkey.fields", ""),
        "hoodie.datasource.write.partitionpath.field": ",".join(
            f.split(":", 1)[0] for f in props.get("hoodie.table.partition.fields", "").split(",")
        ),
        "hoodie.metadata.enable": "true" if metadata else "false",
        "hoodie.embed.timeline.server": "false",
        "hoodie.clean.automatic": "false",
        "hoodie.compact.inline": "false",
        "hoodie.archive.automatic": "false",
        "hoodie.datasource.write.commitmeta.key.prefix": "_",
        TTL_MARK: mark,
        **concurrency(base_path),
        **keep_version(int(props.get("hoodie.table.version", "0"))),
    }
    for key, table_key in (
        ("hoodie.datasource.write.keygenerator.class", "hoodie.table.keygenerator.class"),
        ("hoodie.datasource.write.precombine.field", "hoodie.table.precombine.field"),
        (
            "hoodie.datasource.write.hive_style_partitioning",
            "hoodie.datasource.write.hive_style_partitioning",
        ),
        (
            "hoodie.datasource.write.partitionpath.urlencode",
            "hoodie.datasource.write.partitionpath.urlencode",
        ),
    ):
        if props.get(table_key):
            options[key] = props[table_key]
    return options


def delete_partitions(
    spark: SparkSession, base_path: str, partitions: list[str], mark: str, metadata: bool
) -> None:
    """Hudi's `delete_partition` of the table's `partitions` (paths relative to the base
    path): a replacecommit that replaces every file group in them, no data read or
    written; its extraMetadata carries `mark`."""
    if not partitions or any("," in p for p in partitions):
        raise PlanRejected(f"partitions lakewarden will not delete: {partitions!r}")
    options = _write_options(base_path, "delete_partition", mark, metadata)
    options["hoodie.datasource.write.partitions.to.delete"] = ",".join(partitions)
    empty = spark.read.format("hudi").load(base_path).limit(0)
    empty.write.format("hudi").options(**options).mode("append").save(base_path)


def delete_rows(
    spark: SparkSession, base_path: str, condition: str, mark: str, metadata: bool
) -> None:
    """Hudi's `delete` of the rows matching `condition` (a Spark SQL predicate lakewarden
    built from typed values, never plan text): a commit whose write stats count them
    (`numDeletes`); its extraMetadata carries `mark`."""
    options = _write_options(base_path, "delete", mark, metadata)
    rows = spark.read.format("hudi").load(base_path).where(condition)
    rows.write.format("hudi").options(**options).mode("append").save(base_path)


def rewrite_one_row(
    spark: SparkSession, base_path: str, mark: str, metadata: bool, new_key: bool = False
) -> None:
    """Test-only (the `corrupt-rewrite-then-write` failpoint): another writer's commit, one
    of the table's rows upserted as it is; `new_key`: inserted under a new record key (a
    writer's update of a file group a clustering not yet committed replaces conflicts with
    the clustering: Hudi fails the write)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType, StringType

    options = _write_options(base_path, "upsert", mark, metadata)
    rows = spark.read.format("hudi").load(base_path).limit(1)
    rows = rows.drop(*[c for c in rows.columns if c.startswith("_hoodie_")])
    if new_key:
        for key in options["hoodie.datasource.write.recordkey.field"].split(","):
            kind = rows.schema[key].dataType
            if isinstance(kind, NumericType):
                rows = rows.withColumn(key, F.col(key) + F.lit(10**12).cast(kind))
            elif isinstance(kind, StringType):
                rows = rows.withColumn(key, F.concat(F.col(key), F.lit("-failpoint")))
    rows.write.format("hudi").options(**options).mode("append").save(base_path)


def create_ttl_savepoint(spark: SparkSession, base_path: str, instant: str) -> None:
    """Savepoint `instant` before a TTL deletes (its undo point, kept per the policy)."""
    spark.sql(
        f"CALL create_savepoint(path => {path_literal(base_path)}, "
        f"commit_time => '{_instant(instant)}', user => 'lakewarden', "
        f"comments => '{PRE_TTL}')"
    ).collect()
