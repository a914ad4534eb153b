"""What health and explain read of a Hudi table: its file-system view (hudi-rs file
slices: file groups, base and log files per partition) and its timeline (pending
compactions and clustering, timeline length). Python only, no JVM."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from lakewarden.formats.hudi.timeline import WRITE_ACTIONS, HudiTimeline, Instant


@dataclass
class PartitionFacts:
    """One partition's latest file slices."""

    file_groups: int = 0
    base_files: int = 0
    base_bytes: int = 0
    log_files: int = 0
    log_bytes: int = 0
    max_log_files_per_slice: int = 0


@dataclass
class HudiFacts:
    """A Hudi table at its latest completed instant."""

    base_path: str
    table_type: str  # COPY_ON_WRITE | MERGE_ON_READ
    table_version: int
    head: str | None  # newest completed instant (requested time)
    timeline_length: int  # completed instants on the active timeline
    pending: dict[str, int]  # action -> pending instants (compaction, clustering, ...)
    partitions: dict[str, PartitionFacts] = field(default_factory=dict)
    base_file_sizes: list[int] = field(default_factory=list)
    log_files_per_slice: list[int] = field(default_factory=list)

    head_write: str | None = None  # newest completed write commit (a savepoint can hold it)

    @property
    def file_groups(self) -> int:
        return sum(p.file_groups for p in self.partitions.values())

    @property
    def log_files(self) -> int:
        return sum(p.log_files for p in self.partitions.values())

    @property
    def log_bytes(self) -> int:
        return sum(p.log_bytes for p in self.partitions.values())

    def summary(self) -> dict[str, Any]:
        """The facts as plain data (the health endpoint's `facts`)."""
        return {
            "format": "hudi",
            "table_type": self.table_type,
            "table_version": self.table_version,
            "head": self.head,
            "timeline_length": self.timeline_length,
            "pending": dict(self.pending),
            "file_groups": self.file_groups,
            "base_files": sum(p.base_files for p in self.partitions.values()),
            "base_bytes": sum(p.base_bytes for p in self.partitions.values()),
            "log_files": self.log_files,
            "log_bytes": self.log_bytes,
            "max_log_files_per_slice": max(self.log_files_per_slice, default=0),
            "partitions": {k: vars(v) for k, v in sorted(self.partitions.items())},
        }


def pending_services(
    timeline: HudiTimeline, instants: list[Instant] | None = None
) -> dict[str, int]:
    """Pending instants per action; a clustering is a pending `replacecommit` or
    `clustering` (table version 8+ names it so). `instants`: the listing already read."""
    out: dict[str, int] = defaultdict(int)
    for instant in timeline.pending(instants):
        out[instant.action] += 1
    return dict(out)


@dataclass
class PartitionSlices:
    """One partition's latest file slices, folded once: what `read_facts` adds up per read
    without a pass over every slice (`hudi.incremental` keeps these between plans)."""

    facts: PartitionFacts
    base_file_sizes: list[int]  # hudi-rs' in-memory estimate (`base_file_byte_size`)
    log_files_per_slice: list[int]
    # The same base files' bytes on storage: the estimate is these times a ratio hudi-rs
    # takes from one sample file of the table, which a later write can change.
    disk_sizes: list[int] = field(default_factory=list)


def fold(slices: Iterable[Any]) -> dict[str, PartitionSlices]:
    """hudi-rs' file slices by partition, each partition folded."""
    out: dict[str, PartitionSlices] = {}
    for s in slices:
        part = out.get(s.partition_path)
        if part is None:
            part = out[s.partition_path] = PartitionSlices(PartitionFacts(), [], [])
        facts = part.facts
        facts.file_groups += 1
        logs = list(s.log_file_sizes or [])
        if s.base_file_name:
            part.disk_sizes.append(int(s.base_file_size))
            facts.base_files += 1
            facts.base_bytes += int(s.base_file_byte_size)
            part.base_file_sizes.append(int(s.base_file_byte_size))
        facts.log_files += len(logs)
        facts.log_bytes += sum(int(n) for n in logs)
        facts.max_log_files_per_slice = max(facts.max_log_files_per_slice, len(logs))
        part.log_files_per_slice.append(len(logs))
    return out


def full_slices(timeline: HudiTimeline) -> dict[str, PartitionSlices]:
    """Every partition's latest file slices (hudi-rs' file-system view of the whole table)."""
    return fold(timeline.table().get_file_slices())


def read_facts(
    base_path: str,
    timeline: HudiTimeline | None = None,
    slices: Callable[[HudiTimeline], dict[str, PartitionSlices]] | None = None,
) -> HudiFacts:
    """The table's facts now (hudi-rs for the file slices; the timeline for the rest).
    `slices`: where the file slices come from (`hudi.incremental`'s cache, for a plan); by
    default hudi-rs lists the whole table."""
    timeline = timeline or HudiTimeline(base_path)
    instants = timeline.instants()  # listed once for what follows
    completed = timeline.completed(instants)
    facts = HudiFacts(
        base_path=base_path,
        table_type=timeline.properties.get("hoodie.table.type", "COPY_ON_WRITE"),
        table_version=timeline.table_version,
        head=completed[-1].requested if completed else None,
        timeline_length=len(completed),
        pending=pending_services(timeline, instants),
        head_write=next(
            (i.requested for i in reversed(completed) if i.action in WRITE_ACTIONS), None
        ),
    )
    if not completed:
        return facts
    for key, part in sorted((slices or full_slices)(timeline).items()):  # one order
        facts.partitions[key] = PartitionFacts(**vars(part.facts))
        facts.base_file_sizes.extend(part.base_file_sizes)
        facts.log_files_per_slice.extend(part.log_files_per_slice)
    return facts
