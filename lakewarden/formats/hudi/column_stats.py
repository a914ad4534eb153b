"""Hudi's column-stats index (issue 32 §1): per base and log file, each indexed column's
min, max and null count, kept in the `column_stats` partition of the table's metadata table
(`.hoodie/metadata/`), which Spark's data skipping reads (`hoodie.enable.data.skipping`).

`read_state` reads, with no JVM, whether the index exists and is current:
`hoodie.properties` names the metadata table's built partitions
(`hoodie.table.metadata.partitions`: `files`, `column_stats`, ...) and those being built
(`…partitions.inflight`); the index definition (`hoodie.table.index.defs.path`) its
columns; the metadata table's own timeline whether it holds the data table's newest write
(a metadata deltacommit is named by the data instant it records); the data timeline the
`indexing` instants (Hudi's async indexer).

`build` runs Hudi's async indexer, the way Hudi builds an index beside a live writer: a
write client (the bundle's `SparkRDDWriteClient`, through py4j: the Spark bundle has no
procedure for it, `HoodieIndexer` is in hudi-utilities) schedules an `indexing` instant
for `column_stats` under the table's lock and then builds it from the files up to that
instant and catches up with the commits that landed meanwhile. A writer keeps the index
current only with `hoodie.metadata.index.column.stats.enable=true` (Hudi 1.x's Spark
default); with it false its next commit deletes the partition (`deleteMetadataIndexIfNecessary`),
and with `hoodie.metadata.enable=false` the whole metadata table (docs/hudi.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyarrow import fs as pafs

from lakewarden.formats.hudi.jobs import concurrency, keep_version
from lakewarden.formats.hudi.timeline import WRITE_ACTIONS, HudiTimeline, NotAHudiTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COLUMN_STATS = "column_stats"
FILES = "files"  # the metadata table's file listing: built first, whenever it exists
PARTITIONS = "hoodie.table.metadata.partitions"
INFLIGHT = "hoodie.table.metadata.partitions.inflight"
INDEX_DEFS = "hoodie.table.index.defs.path"
INDEXING = "indexing"  # the async indexer's action on the data timeline
META_FIELD = "_hoodie_"  # Hudi's own columns (commit time, record key, ...), always indexed
METADATA_DIR = ".hoodie/metadata"


def _listed(value: str | None) -> set[str]:
    return {p.strip() for p in (value or "").split(",") if p.strip()}


@dataclass(frozen=True)
class IndexState:
    """What the table says of its column-stats index (pure data, unit-testable)."""

    table_version: int
    metadata_table: bool  # the metadata table exists (its `files` partition is built)
    built: bool  # `column_stats` is a built partition of it
    inflight: bool  # `column_stats` is being built (an indexing not finished)
    columns: list[str] = field(default_factory=list)  # the user columns it indexes
    index_files: int = 0  # files in the metadata table's column_stats folder
    latest_write: str | None = None  # the data table's newest completed write instant
    # the metadata table holds that write (None: no metadata table, or no write)
    synced: bool | None = None
    pending_indexing: list[str] = field(default_factory=list)  # indexing instants not done
    completed_indexing: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """As plain data (the `/hudi` health's `column_stats_index`)."""
        return {
            "metadata_table": self.metadata_table,
            "exists": self.built,
            "building": self.inflight or bool(self.pending_indexing),
            "columns": self.columns,
            "index_files": self.index_files,
            "current": self.built and bool(self.synced),
            "latest_write": self.latest_write,
            "pending_indexing": self.pending_indexing,
        }


def _index_columns(timeline: HudiTimeline) -> list[str]:
    """The user columns of the table's column-stats index definition ([]: none found)."""
    path = timeline.properties.get(INDEX_DEFS)
    if not path:
        return []
    try:
        with timeline.fs.open_input_stream(f"{timeline.base}/{path}") as f:
            defs = json.loads(f.read().decode())
    except (FileNotFoundError, OSError, ValueError):
        return []
    found = (defs.get("indexDefinitions") or {}).get(COLUMN_STATS) or {}
    return [c for c in found.get("sourceFields") or [] if not str(c).startswith(META_FIELD)]


def _index_files(timeline: HudiTimeline) -> int:
    folder = f"{timeline.base}/{METADATA_DIR}/{COLUMN_STATS}"
    infos = timeline.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    return sum(1 for i in infos if i.type == pafs.FileType.File and not i.base_name.startswith("."))


def _synced(timeline: HudiTimeline, instant: str) -> bool:
    """Whether the metadata table's timeline completed the deltacommit of data `instant`."""
    try:
        meta = HudiTimeline(f"{timeline.base_path.rstrip('/')}/{METADATA_DIR}", timeline.storage)
    except (NotAHudiTable, ValueError):
        return False
    return any(i.requested == instant and i.action == "deltacommit" for i in meta.completed())


def read_state(timeline: HudiTimeline) -> IndexState:
    props = timeline.properties
    built, inflight = _listed(props.get(PARTITIONS)), _listed(props.get(INFLIGHT))
    instants = timeline.instants()
    writes = [i for i in timeline.completed(instants) if i.action in WRITE_ACTIONS]
    latest = writes[-1].requested if writes else None
    metadata = FILES in built
    return IndexState(
        table_version=timeline.table_version,
        metadata_table=metadata,
        built=COLUMN_STATS in built,
        inflight=COLUMN_STATS in inflight,
        columns=_index_columns(timeline) if COLUMN_STATS in built else [],
        index_files=_index_files(timeline) if COLUMN_STATS in built else 0,
        latest_write=latest,
        synced=_synced(timeline, latest) if metadata and latest else None,
        pending_indexing=[i.requested for i in timeline.pending(instants) if i.action == INDEXING],
        completed_indexing=[
            i.requested for i in timeline.completed(instants) if i.action == INDEXING
        ],
    )


def index_options(timeline: HudiTimeline, columns: list[str]) -> dict[str, str]:
    """The write config of an indexing: the metadata table on, the column-stats index on
    for `columns` ([]: Hudi's default, the first 32), the partition-stats index off (this
    job builds one index), the table's lock and version (`formats.hudi.jobs`)."""
    options = {
        "hoodie.table.name": timeline.properties.get("hoodie.table.name", ""),
        **concurrency(timeline.base_path),
        **keep_version(timeline.table_version),
        "hoodie.metadata.enable": "true",
        "hoodie.metadata.index.column.stats.enable": "true",
        "hoodie.metadata.index.partition.stats.enable": "false",
        "hoodie.embed.timeline.server": "false",
    }
    if columns:
        options["hoodie.metadata.index.column.stats.column.list"] = ",".join(columns)
    return options


def build(
    spark: SparkSession,
    timeline: HudiTimeline,
    columns: list[str],
    instant: str | None = None,
    scheduled: Callable[[str], None] = lambda instant: None,
) -> dict[str, Any]:
    """Build the column-stats index with Hudi's async indexer: schedule an `indexing`
    instant (or resume `instant`, an earlier attempt's), told to `scheduled` before it
    runs, then run it. What it did: the instant, and up to which data instant it indexed."""
    jvm: Any = spark._jvm
    hudi = jvm.org.apache.hudi
    config = (
        hudi.config.HoodieWriteConfig.newBuilder()
        .withPath(timeline.base_path)
        .withProps(index_options(timeline, columns))
        .build()
    )
    context = hudi.client.common.HoodieSparkEngineContext(spark.sparkContext._jsc)
    client = hudi.client.SparkRDDWriteClient(context, config)
    try:
        if instant is None:
            made = client.scheduleIndexing([hudi.metadata.MetadataPartitionType.COLUMN_STATS], [])
            if not made.isPresent():
                return {"indexing_instant": None, "note": "Hudi scheduled no indexing"}
            instant = str(made.get())
            scheduled(instant)
        done = client.index(instant)
    finally:
        client.close()
    upto = None
    if done.isPresent():
        infos = done.get().getIndexPartitionInfos()
        upto = [str(i.getIndexUptoInstant()) for i in infos] if infos is not None else None
    return {"indexing_instant": instant, "indexed": done.isPresent(), "index_upto": upto}
