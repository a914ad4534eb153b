"""A Hudi compaction or clustering checked before its commit is visible (issue 30, goal 5):
executed by Hudi's Spark write client without completing, checked, and only then committed.

Hudi 1.2.0's `SparkRDDWriteClient.compact(instant)` (what the `run_compaction` procedure
calls, `shouldComplete=false`) and `cluster(instant, false)` return the write DAG with the
instant inflight; collecting its write statuses writes the new base files, and the commit
is given those statuses (never the DAG again), so it commits exactly the files checked. An
inflight instant's files are no completed instant's: no reader reads them. lakewarden
then reads each written base file back with hudi-rs (`written_digests`) and the file
slices the plan replaces, base file merged with its log files, with hudi-rs too
(`input_digests`, read before the execution): per partition, the rows and their
order-independent checksum must be equal. Then the instant is completed, as the procedure
does right after executing it: `commitCompaction`, or for a clustering Hudi's own
`BaseHoodieTableServiceClient.commitClustering`, which is private in 1.2.0 (what
`cluster(instant, true)` calls: the replaced file ids from the plan, the transaction with
its conflict check, the metadata table, the replacecommit) and is called by Java
reflection (`_commit_clustering`). A mismatch never commits: a compaction's inflight
instant is rolled back (`rollbackInflightCompaction`, which `compact` runs itself before
executing an inflight instant again: the plan requested again, as after any failed
compaction); a clustering's is purged (`purgePendingClustering`: rolled back and its plan
deleted, since a pending clustering keeps writers' updates off its file groups).

A plan with a log-only file group (a bucket index's) is not checked so: hudi-rs 0.5
reads no file slice without a base file (its `FileSlice.base_file` is not optional)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakewarden.formats.digest import Digest, digest_rows
from lakewarden.formats.hudi.storage import storage_for
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.object_store import reader_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Slice:
    """One file slice a compaction or clustering plan replaces: paths relative to the
    table's base."""

    partition: str
    file_id: str
    base: str | None
    logs: tuple[str, ...]


@dataclass(frozen=True)
class Written:
    """One base file the compaction or clustering wrote: its path relative to the table's
    base."""

    partition: str
    file_id: str
    path: str
    records: int  # Hudi's own count (its write stat)


def _relative(partition: str, path: str) -> str:
    """A plan's file (a compaction's names it, a clustering's gives its full path) relative
    to the table's base: its partition and its name."""
    name = path.rsplit("/", 1)[-1]
    return f"{partition}/{name}" if partition else name


# The requested instant that holds a plan: a clustering's is a `replacecommit` in table
# version 6 (timeline layout 1).
PLAN_ACTIONS = {"compaction": ("compaction",), "clustering": ("clustering", "replacecommit")}


def plan_slices(base_path: str, instant: str, kind: str = "compaction") -> list[Slice]:
    """The file slices the requested compaction or clustering (`kind`) `instant` replaces,
    from its plan."""
    timeline = HudiTimeline(base_path)
    found = [
        i
        for i in timeline.instants()
        if i.requested == instant and i.action in PLAN_ACTIONS[kind] and i.state == "requested"
    ]
    if not found:
        raise RuntimeError(f"no {kind} plan {instant} on {base_path}")
    plan = timeline.read_instant(found[0])
    if kind == "compaction":
        ops = plan.get("operations") or []
    else:  # HoodieRequestedReplaceMetadata: the plan's groups of slices
        groups = (plan.get("clusteringPlan") or {}).get("inputGroups") or []
        ops = [s for g in groups for s in g.get("slices") or []]
    out = []
    for op in ops:
        partition = str(op.get("partitionPath") or "")
        base = op.get("dataFilePath")
        out.append(
            Slice(
                partition,
                str(op.get("fileId")),
                _relative(partition, str(base)) if base else None,
                tuple(_relative(partition, str(p)) for p in op.get("deltaFilePaths") or []),
            )
        )
    return out


def _reader(base_path: str) -> Any:
    from hudi import HudiTable

    table = HudiTable(base_path, reader_options(storage_for(base_path), base_path))
    return table.create_file_group_reader_with_options()


def _digest(batch: Any) -> Digest:
    import pyarrow as pa

    table = pa.Table.from_batches([batch])
    return digest_rows(table, [c for c in table.column_names if c.startswith("_hoodie_")])


def input_digests(base_path: str, slices: Iterable[Slice]) -> dict[str, Digest]:
    """Per partition, the rows of `slices` as hudi-rs reads them (base file merged with
    its log files: what a snapshot read returns for them)."""
    reader = _reader(base_path)
    out: dict[str, Digest] = {}
    for s in slices:
        if s.base is None:  # hudi-rs 0.5 reads no file slice without a base file
            raise ValueError(f"a plan's file slice without a base file: {s}")
        got = _digest(reader.read_file_slice_from_paths(s.base, list(s.logs)))
        out[s.partition] = out.get(s.partition, Digest(0, 0)) + got
    return out


def written_digests(
    base_path: str, written: Iterable[Written]
) -> tuple[dict[str, Digest], list[str]]:
    """Per partition, the rows of the base files the rewrite wrote, read back by
    hudi-rs (plain Parquet, no log files); and the written files that are missing."""
    from pyarrow import fs as pafs

    timeline = HudiTimeline(base_path)
    reader = _reader(base_path)
    out: dict[str, Digest] = {}
    missing = []
    for w in written:
        info = timeline.fs.get_file_info(f"{timeline.base}/{w.path}")
        if info.type != pafs.FileType.File:
            missing.append(w.path)
            continue
        got = _digest(reader.read_file_slice_from_paths(w.path, []))
        out[w.partition] = out.get(w.partition, Digest(0, 0)) + got
    return out, missing


def compare(before: dict[str, Digest], after: dict[str, Digest]) -> dict[str, Any]:
    """The partitions whose rows or checksum differ, and the totals."""
    differ = {
        p: {"rows_before": b.rows, "rows_after": a.rows}
        for p in sorted(set(before) | set(after))
        for b, a in [(before.get(p, Digest(0, 0)), after.get(p, Digest(0, 0)))]
        if b != a
    }
    total_before = sum(before.values(), Digest(0, 0))
    total_after = sum(after.values(), Digest(0, 0))
    return {
        "partitions": len(set(before) | set(after)),
        "partitions_differing": differ,
        "before": total_before,
        "after": total_after,
    }


# Where Hudi 1.2.0 completes a clustering (`Execution._commit_clustering`).
_TABLE_SERVICE_CLIENT = "org.apache.hudi.client.BaseHoodieTableServiceClient"


@dataclass
class Execution:
    """A compaction or clustering (`kind`) executed by Hudi's write client, not yet
    committed (`run`); then `commit` or `abort`; `close` always. `options`: the write
    client's own, over the session's hoodie.* conf (a clustering's
    `jobs.clustering_options`)."""

    spark: SparkSession
    base_path: str
    instant: str
    kind: str = "compaction"
    options: dict[str, str] = field(default_factory=dict)
    client: Any = None
    metadata: Any = None
    statuses: Any = None  # the write statuses collected: what the commit commits
    written: list[Written] = field(default_factory=list)

    def run(self) -> list[Written]:
        """Execute the plan (its base files written, the instant inflight) and return the
        files it wrote."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        cli = jvm.org.apache.hudi.HoodieCLIUtils
        # As the run_compaction and run_clustering procedures make their client: the
        # session's hoodie.* conf (metadata table, concurrency, table version:
        # `jobs.with_*`) apply.
        options = cli.extractOptions("")
        for key, value in self.options.items():  # a Scala map: values may hold commas
            options = options.updated(key, value)
        self.client = cli.createHoodieWriteClient(
            self.spark._jsparkSession, self.base_path, options, jvm.scala.Option.apply(None)
        )
        if self.kind == "clustering":
            self.metadata = self.client.cluster(self.instant, False)
        else:
            self.metadata = self.client.compact(self.instant)
        statuses = self.statuses = self.metadata.getWriteStatuses().collect()  # the write
        errors = sum(int(s.getTotalErrorRecords()) for s in statuses if s.hasErrors())
        if errors:
            raise RuntimeError(f"{self.kind} {self.instant} failed to write {errors} records")
        for status in statuses:
            if status.isMetadataTable():
                continue
            stat = status.getStat()
            self.written.append(
                Written(
                    str(stat.getPartitionPath() or ""),
                    str(stat.getFileId()),
                    str(stat.getPath()),
                    int(stat.getNumWrites()),
                )
            )
        return self.written

    def commit(self) -> None:
        """Complete the instant: its commit on the timeline (readers see it now)."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        # The statuses collected, not the write's DAG: Hudi persists that, but a cached
        # block lost (an executor gone) would be computed again, writing files no check read.
        jsc = self.spark.sparkContext._jsc
        self.metadata.setWriteStatuses(jsc.parallelize(self.statuses, max(1, len(self.statuses))))
        if self.kind == "clustering":
            self._commit_clustering()
            return
        empty = jvm.org.apache.hudi.common.util.Option.empty()
        self.client.commitCompaction(self.instant, self.metadata, empty)

    def _commit_clustering(self) -> None:
        """Hudi's own completion of a clustering, private in 1.2.0
        (`BaseHoodieTableServiceClient.commitClustering(metadata, table, instant)`, what
        `cluster(instant, true)` runs): called by reflection, on a table made now, as
        `commitCompaction` makes its own. Hudi's classes are in the unnamed module: Java
        17 lets `setAccessible` open them."""
        jvm = self.spark.sparkContext._jvm
        gateway = self.spark.sparkContext._gateway
        assert jvm is not None and gateway is not None
        services = self.client.getTableServiceClient()
        owner = services.getClass()
        while owner is not None and owner.getName() != _TABLE_SERVICE_CLIENT:
            owner = owner.getSuperclass()
        found = [
            m
            for m in (owner.getDeclaredMethods() if owner is not None else [])
            if m.getName() == "commitClustering" and m.getParameterCount() == 3
        ]
        if len(found) != 1:
            raise RuntimeError(
                f"Hudi's {_TABLE_SERVICE_CLIENT}.commitClustering(metadata, table, instant) "
                "is not there: not the Hudi release lakewarden's clustering check was made for"
            )
        method = found[0]
        method.setAccessible(True)
        table = jvm.org.apache.hudi.table.HoodieSparkTable.create(
            self.client.getConfig(), self.client.getEngineContext()
        )
        args = gateway.new_array(jvm.java.lang.Object, 3)
        args[0], args[1], args[2] = self.metadata, table, self.instant
        method.invoke(services, args)

    def abort(self, keep_plan: bool = True) -> None:
        """Roll the inflight instant back (Hudi's rollback: the files it wrote deleted); it
        never completes. A compaction's plan is requested again (a retry executes it), or,
        not `keep_plan`, unscheduled too (`CompactionAdminClient.unscheduleCompactionPlan`:
        a plan left requested keeps its file groups out of every later plan); a
        clustering's is purged (`purgePendingClustering`): a pending clustering keeps
        writers' updates off its file groups."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        if self.kind == "clustering":
            if not self.client.purgePendingClustering(self.instant):
                raise RuntimeError(f"clustering {self.instant} was not inflight: not purged")
            return
        table = jvm.org.apache.hudi.table.HoodieSparkTable.create(
            self.client.getConfig(), self.client.getEngineContext()
        )
        inflight = (
            table.getMetaClient().getInstantGenerator().getCompactionInflightInstant(self.instant)
        )
        table.rollbackInflightCompaction(inflight, self.client.getTransactionManager())
        if not keep_plan:
            admin = jvm.org.apache.hudi.client.CompactionAdminClient(
                self.client.getEngineContext(), self.base_path
            )
            try:  # validated (skip: false), one at a time, for real (dry run: false)
                admin.unscheduleCompactionPlan(self.instant, False, 1, False)
            finally:
                admin.close()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
