"""Incremental planning of a Hudi table (issue 32 §5): its latest file slices from the
instants completed after a cursor, not from the whole table.

A planning process keeps, per table, the latest file slices of each partition as it last
planned them (`facts.PartitionSlices`), and the cursor: the completed instants it had seen
then, and the table services then pending. The next plan reads the timeline, and of each
instant completed since, the partitions it touched (a write's `partitionToWriteStats`, a
replacecommit's `partitionToReplaceFileIds` too: a clustering, an insert overwrite, a
`delete_partition`; a clean's `partitionMetadata`), and lists only those partitions'
folders (`hudi.slices`: the slices hudi-rs' view of the whole table gives there, built as
hudi-rs builds them); where hudi-rs would read them otherwise (its metadata table, a base
format other than Parquet, a name it reads its own way), hudi-rs' view pruned by partition
filters lists them (it walks every partition folder to find them: slower, the same
slices). A partition left with no slice is gone from the plan.

In full instead: the first plan of a table in this process; an instant seen at the cursor
gone from the active timeline (archived, or a restore); an instant completed since that is
not a write, a clean or a savepoint (a rollback, a restore, an index: what they change is
not said per partition); a table service scheduled or dropped since (a pending compaction
splits the slices it plans); a partition path that is not the table's partition fields
(unpartitioned, URL-encoded); and every `plan_full_every`-th plan, which lists the table
in full as well and compares: a difference is logged as an error, and the full listing is
what is planned and kept. Bounded by `plan_cache_files` (file slices held; the least
recently planned tables go first); 0 turns it off. The process's memory, as Iceberg's
manifests (`lakewarden.manifest_cache`).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from lakewarden.formats.hudi import slices
from lakewarden.formats.hudi.facts import PartitionSlices, fold, full_slices
from lakewarden.formats.hudi.timeline import WRITE_ACTIONS, HudiTimeline, Instant
from lakewarden.manifest_cache import PerProcess

log = logging.getLogger(__name__)

FULL = "full"
INCREMENTAL = "incremental"
CHECKED = "checked"
# Completed actions whose changes to the latest file slices are said per partition.
PER_PARTITION = WRITE_ACTIONS | {"clean", "savepoint"}
# Pending actions that are writes in flight: hudi-rs' view leaves their files out until
# they complete (then they are read as completed instants).
IN_FLIGHT_WRITES = frozenset({"commit", "deltacommit"})


class NotPerPartition(ValueError):
    """What changed is not said per partition: list the table in full."""


@dataclass
class _Kept:
    seen: frozenset[str]  # the completed instants' file names at the cursor
    services: frozenset[str]  # the pending table services' file names then
    parts: dict[str, PartitionSlices]
    plans: int = 0
    # The file groups the completed replacecommits replaced (read once, at the first
    # incremental plan; then from the new ones): the lister leaves them out.
    replaced: frozenset[tuple[str, str]] | None = None
    # The sample file of hudi-rs' byte estimate and its ratio, as the kept slices were
    # estimated (None: not yet read, at the first incremental plan).
    sample: slices.Sample | None = None
    ratio: float | None = None

    @property
    def slices(self) -> int:
        return sum(len(p.log_files_per_slice) for p in self.parts.values())


@dataclass
class Read:
    """How the last `slices` call of a table read it."""

    how: str = FULL  # FULL | INCREMENTAL | CHECKED
    instants: int = 0  # completed instants read after the cursor
    partitions: int = 0  # partitions listed again
    lister: str = ""  # who listed them: "storage" (their folders) or "hudi-rs"
    mismatch: bool = False
    why_full: str = ""

    def explain(self) -> str:
        if self.how == FULL:
            return ""
        text = (
            f"read {self.instants} instant(s) completed since the last plan, listed "
            f"{self.partitions} partition(s) again"
        )
        if self.lister:
            text += " from their folders" if self.lister == "storage" else " with hudi-rs"
        if self.how == CHECKED:
            verdict = "DIFFERED: cache dropped" if self.mismatch else "the same"
            text += f"; checked against a full listing ({verdict})"
        return text


@dataclass
class HudiSlicesCache:
    """The latest file slices of the tables this process planned, by base path."""

    max_slices: int
    full_every: int
    _kept: OrderedDict[str, _Kept] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    last: dict[str, Read] = field(default_factory=dict)  # base path -> its last read

    def slices(self, timeline: HudiTimeline) -> dict[str, PartitionSlices]:
        """The table's latest file slices by partition (`read_facts`' `slices`)."""
        path = timeline.base_path
        with self._lock:
            kept = self._kept.pop(path, None)  # one plan of a table at a time holds it
        listed = timeline.instants()  # once, for the completed and the pending
        done = timeline.completed(listed)
        seen = frozenset(i.file_name for i in done)
        services = _services(timeline, listed)
        read = Read()
        parts = None
        state = _Kept(seen, services, {}, kept.plans if kept else 0)
        if kept is not None and self.max_slices:
            kept.plans += 1
            state.plans = kept.plans
            try:
                parts = self._incremental(timeline, kept, done, services, read, state)
            except NotPerPartition as exc:
                read.why_full = str(exc)
            if parts is not None and kept.plans % max(1, self.full_every) == 0:
                parts = self._checked(timeline, parts, read)
        if parts is None:
            parts = full_slices(timeline)
            read.how = FULL
            state = _Kept(seen, services, {}, state.plans)
        state.parts = parts
        self.last[path] = read
        self._keep(path, state)
        return dict(parts)

    def _incremental(
        self,
        timeline: HudiTimeline,
        kept: _Kept,
        done: list[Instant],
        services: frozenset[str],
        read: Read,
        state: _Kept,
    ) -> dict[str, PartitionSlices]:
        """The slices from the kept ones and what changed since; `state` takes what the
        next plan keeps beside them (the replaced file groups, the byte estimate's sample)."""
        names = {i.file_name for i in done}
        gone = kept.seen - names
        if gone:
            raise NotPerPartition(f"instant {min(gone)} left the active timeline")
        if services != kept.services:
            raise NotPerPartition("a table service was scheduled or dropped since")
        new = [i for i in done if i.file_name not in kept.seen]
        touched: set[str] = set()
        replaced = set(kept.replaced) if kept.replaced is not None else None
        kept_sample, kept_ratio = kept.sample, kept.ratio
        if kept_sample is None:  # the sample as the kept slices were estimated
            before = [i for i in done if i.file_name in kept.seen]
            kept_sample = slices.find_sample(timeline, before)
            kept_ratio = slices.compression_ratio(timeline, kept_sample)
        sample = kept_sample
        for instant in new:
            if instant.action not in PER_PARTITION:
                raise NotPerPartition(f"{instant.action} {instant.requested} completed since")
            meta = timeline.read_instant(instant)
            touched |= touched_partitions(instant.action, meta)
            sample = sample.newer(instant, meta)
            if instant.action == "replacecommit" and replaced is not None:
                replaced |= slices.replaced_by(meta)
        ratio = kept_ratio if sample == kept_sample else slices.compression_ratio(timeline, sample)
        fields = partition_fields(timeline.properties)
        filters = {p: partition_filters(fields, p) for p in sorted(touched)}
        if replaced is None:  # the first incremental plan: every replacecommit once
            replaced = set()
            for instant in done:
                if instant.action == "replacecommit":
                    replaced |= slices.replaced_by(timeline.read_instant(instant))
        state.replaced, state.sample, state.ratio = frozenset(replaced), sample, ratio
        parts = dict(kept.parts)
        if ratio != kept_ratio:  # a write named a newer sample: every estimate moves
            if any(len(p.disk_sizes) != len(p.base_file_sizes) for p in parts.values()):
                raise NotPerPartition("hudi-rs' byte estimate changed; sizes not kept")
            parts = {k: slices.rescaled(p, ratio) for k, p in parts.items()}
        if touched:
            try:
                listed = self._listed(timeline, done, state.replaced, ratio, sorted(touched))
                read.lister = "storage"
            except slices.NotListable as exc:
                log.debug("Hudi table %s: hudi-rs lists: %s", timeline.base_path, exc)
                listed = _hudi_rs_listed(timeline, filters)
                read.lister = "hudi-rs"
            for partition, found in listed.items():
                if found is not None:
                    parts[partition] = found
                else:
                    parts.pop(partition, None)  # deleted, or every file group replaced
        read.how, read.instants, read.partitions = INCREMENTAL, len(new), len(touched)
        return parts

    @staticmethod
    def _listed(
        timeline: HudiTimeline,
        done: list[Instant],
        replaced: frozenset[tuple[str, str]],
        ratio: float | None,
        partitions: list[str],
    ) -> dict[str, PartitionSlices | None]:
        """The partitions' latest slices from their folders (`slices`), all or none."""
        view = slices.basis(timeline, done, replaced, ratio)
        return {p: slices.partition_slices(timeline, p, view) for p in partitions}

    def _checked(
        self, timeline: HudiTimeline, parts: dict[str, PartitionSlices], read: Read
    ) -> dict[str, PartitionSlices]:
        """List the table in full too and compare; the full listing is kept."""
        full = full_slices(timeline)
        read.how = CHECKED
        read.mismatch = _comparable(full) != _comparable(parts)
        if read.mismatch:
            log.error(
                "incremental listing of Hudi table %s differed from a full one (%d "
                "partitions against %d): the full listing is planned and kept",
                timeline.base_path,
                len(parts),
                len(full),
            )
        return full

    def _keep(self, path: str, kept: _Kept) -> None:
        if not self.max_slices:
            return
        with self._lock:
            self._kept[path] = kept
            held = sum(k.slices for k in self._kept.values())
            while held > self.max_slices and self._kept:
                _, gone = self._kept.popitem(last=False)
                held -= gone.slices


def _hudi_rs_listed(
    timeline: HudiTimeline, filters: dict[str, list[tuple[str, str, str]]]
) -> dict[str, PartitionSlices | None]:
    """The partitions' latest slices from hudi-rs' view pruned to each (it walks every
    partition folder of the table to find them)."""
    from hudi import HudiReadOptions  # the `hudi` extra

    table = timeline.table()
    out: dict[str, PartitionSlices | None] = {}
    for partition, by in filters.items():
        found = table.get_file_slices(HudiReadOptions(filters=by))
        out[partition] = fold(s for s in found if s.partition_path == partition).get(partition)
    return out


def _comparable(parts: dict[str, PartitionSlices]) -> dict[str, Any]:
    """Partitions' folds with their slices' order left out (hudi-rs lists in any order)."""
    return {
        k: (vars(p.facts), sorted(p.base_file_sizes), sorted(p.log_files_per_slice))
        for k, p in parts.items()
    }


def _services(timeline: HudiTimeline, instants: list[Instant]) -> frozenset[str]:
    pending = timeline.pending(instants)
    return frozenset(i.file_name for i in pending if i.action not in IN_FLIGHT_WRITES)


def touched_partitions(action: str, meta: dict[str, Any]) -> set[str]:
    """The partitions a completed instant changed (its metadata's partition maps)."""
    if action in WRITE_ACTIONS:
        return set(meta.get("partitionToWriteStats") or {}) | set(
            meta.get("partitionToReplaceFileIds") or {}
        )
    if action == "clean":
        return set(meta.get("partitionMetadata") or {})
    return set()  # a savepoint changes no file


def partition_fields(properties: dict[str, str]) -> list[str]:
    """The table's partition fields (`hoodie.table.partition.fields`; a custom key
    generator's `field:type` read as the field)."""
    raw = properties.get("hoodie.table.partition.fields", "")
    return [f.split(":", 1)[0].strip() for f in raw.split(",") if f.strip()]


def partition_filters(fields: list[str], partition: str) -> list[tuple[str, str, str]]:
    """hudi-rs filters that prune its view to `partition` (hive-style `f=v` or plain `v`
    segments, one per field)."""
    segments = partition.split("/") if partition else []
    if not fields or len(segments) != len(fields) or "%" in partition:
        raise NotPerPartition(f"partition {partition!r} is not one value per partition field")
    out = []
    for name, segment in zip(fields, segments, strict=True):
        value = segment[len(name) + 1 :] if segment.startswith(f"{name}=") else segment
        out.append((name, "=", value))
    return out


_shared = PerProcess(HudiSlicesCache)
without_cache = _shared.off  # the API's: see `manifest_cache.PerProcess`
shared = _shared.get
