"""Incremental planning of a Hudi table (issue 32 §5): its latest file slices from the
instants completed after a cursor, not from the whole table.

A planning process keeps, per table, the latest file slices of each partition as it last
planned them (`facts.PartitionSlices`), and the cursor: the completed instants it had seen
then, and the table services then pending. The next plan reads the timeline, and of each
instant completed since, the partitions it touched (a write's `partitionToWriteStats`, a
replacecommit's `partitionToReplaceFileIds` too: a clustering, an insert overwrite, a
`delete_partition`; a clean's `partitionMetadata`), and lists only those partitions with
hudi-rs (its file-system view pruned by partition filters): the same slices a listing of
the whole table gives there. A partition left with no slice is gone from the plan.

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

    @property
    def slices(self) -> int:
        return sum(len(p.log_files_per_slice) for p in self.parts.values())


@dataclass
class Read:
    """How the last `slices` call of a table read it."""

    how: str = FULL  # FULL | INCREMENTAL | CHECKED
    instants: int = 0  # completed instants read after the cursor
    partitions: int = 0  # partitions listed again
    mismatch: bool = False
    why_full: str = ""

    def explain(self) -> str:
        if self.how == FULL:
            return ""
        text = (
            f"read {self.instants} instant(s) completed since the last plan, listed "
            f"{self.partitions} partition(s) again"
        )
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
        done = timeline.completed()
        seen = frozenset(i.file_name for i in done)
        services = _services(timeline)
        read = Read()
        parts = None
        if kept is not None and self.max_slices:
            kept.plans += 1
            try:
                parts = self._incremental(timeline, kept, done, services, read)
            except NotPerPartition as exc:
                read.why_full = str(exc)
            if parts is not None and kept.plans % max(1, self.full_every) == 0:
                parts = self._checked(timeline, parts, read)
        if parts is None:
            parts = full_slices(timeline)
            read.how = FULL
        self.last[path] = read
        self._keep(path, _Kept(seen, services, parts, kept.plans if kept else 0))
        return dict(parts)

    def _incremental(
        self,
        timeline: HudiTimeline,
        kept: _Kept,
        done: list[Instant],
        services: frozenset[str],
        read: Read,
    ) -> dict[str, PartitionSlices]:
        names = {i.file_name for i in done}
        gone = kept.seen - names
        if gone:
            raise NotPerPartition(f"instant {min(gone)} left the active timeline")
        if services != kept.services:
            raise NotPerPartition("a table service was scheduled or dropped since")
        new = [i for i in done if i.file_name not in kept.seen]
        touched: set[str] = set()
        for instant in new:
            if instant.action not in PER_PARTITION:
                raise NotPerPartition(f"{instant.action} {instant.requested} completed since")
            touched |= touched_partitions(instant.action, timeline.read_instant(instant))
        parts = dict(kept.parts)
        if touched:
            from hudi import HudiReadOptions  # the `hudi` extra

            table = timeline.table()
            fields = partition_fields(timeline.properties)
            for partition in sorted(touched):
                filters = partition_filters(fields, partition)
                found = table.get_file_slices(HudiReadOptions(filters=filters))
                listed = fold(s for s in found if s.partition_path == partition)
                if partition in listed:
                    parts[partition] = listed[partition]
                else:
                    parts.pop(partition, None)  # deleted, or every file group replaced
        read.how, read.instants, read.partitions = INCREMENTAL, len(new), len(touched)
        return parts

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


def _comparable(parts: dict[str, PartitionSlices]) -> dict[str, Any]:
    """Partitions' folds with their slices' order left out (hudi-rs lists in any order)."""
    return {
        k: (vars(p.facts), sorted(p.base_file_sizes), sorted(p.log_files_per_slice))
        for k, p in parts.items()
    }


def _services(timeline: HudiTimeline) -> frozenset[str]:
    return frozenset(i.file_name for i in timeline.pending() if i.action not in IN_FLIGHT_WRITES)


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
