"""The latest file slices of some partitions of a Hudi table, from a listing of those
partitions' folders and the timeline: what hudi-rs' file-system view gives there, without
its walk of every partition folder (hudi-rs 0.5 lists every leaf folder of the table to
find the ones its partition filters keep, and so reads the whole table to plan one
partition). Incremental planning's lister (`hudi.incremental`).

The view is hudi-rs' own (`FileLister`, `FileGroup`, `TimelineView`), read against its
source, with the same inputs:
- as of the latest completed write (`commit`, `deltacommit`, `replacecommit`);
- a base file's name is `<file id>_<write token>_<instant>.parquet`, a log file's
  `.<file id>_<instant>.log.<version>_<write token>`; a file group is its base files'
  slices (keyed by base instant) with each log file in the slice of the newest base
  instant not after the log's instant (timeline layout 2: not after its completion);
  a file group of log files alone is left to hudi-rs (it makes a slice of them);
- on timeline layout 2, a file whose instant has not completed is left out;
- a file group a completed replacecommit replaced is left out;
- the base file's in-memory bytes are hudi-rs' estimate: its on-disk size times the
  compression ratio of one sample base file's footer (the smallest base file path of the
  newest write that names one; none if that path is not Parquet). The sample is the
  table's, not the partition's: a write that names a newer one changes every partition's
  estimate (`rescaled`).

Whatever this does not follow raises `NotListable`, and the caller asks hudi-rs: a table
whose metadata table hudi-rs reads (table version 8+ with its `files` partition), a base
file format other than Parquet, a name hudi-rs would refuse, a log file no slice takes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyarrow import fs as pafs

from lakewarden.formats.hudi.facts import PartitionFacts, PartitionSlices
from lakewarden.formats.hudi.timeline import WRITE_ACTIONS, HudiTimeline, Instant

PARTITION_METADATA = ".hoodie_partition_metadata"
# Base file formats hudi-rs knows but this lister does not read (no footer estimate).
OTHER_BASE_FORMATS = (".orc", ".hfile", ".lance")


class NotListable(ValueError):
    """hudi-rs would build this view another way (or refuse it): ask hudi-rs."""


@dataclass(frozen=True)
class ViewBasis:
    """What hudi-rs' view of a partition takes from the timeline."""

    as_of: str  # the newest completed write's requested time
    completion: Mapping[str, str] | None  # layout 2: requested -> completed time; else None
    replaced: frozenset[tuple[str, str]]  # (partition, file id) a replacecommit replaced
    compression_ratio: float | None  # the estimator's; None: hudi-rs has none


@dataclass(frozen=True)
class Sample:
    """The base file hudi-rs' estimator reads (`sample_base_file_path_at_or_before`): the
    smallest base file path of the newest write (requested time) that names one."""

    instant: str | None  # None: no write names one
    path: str | None

    def newer(self, instant: Instant, meta: Mapping[str, Any]) -> Sample:
        """This sample, or the write `instant`'s if it is newer and names a base file."""
        paths = list(base_file_paths(meta)) if instant.action in WRITE_ACTIONS else []
        if paths and (self.instant is None or instant.requested > self.instant):
            return Sample(instant.requested, min(paths))
        return self


NO_SAMPLE = Sample(None, None)


def find_sample(timeline: HudiTimeline, done: Iterable[Instant]) -> Sample:
    """The sample, reading the completed writes newest first until one names a base file."""
    for instant in reversed(writes(done)):
        try:
            found = NO_SAMPLE.newer(instant, timeline.read_instant(instant))
        except (OSError, ValueError):
            continue  # hudi-rs skips metadata it cannot read
        if found.path is not None:
            return found
    return NO_SAMPLE


def check_listable(timeline: HudiTimeline) -> None:
    """Raise NotListable where hudi-rs reads the table otherwise than by listing."""
    props = timeline.properties
    if (props.get("hoodie.table.base.file.format") or "PARQUET").upper() != "PARQUET":
        raise NotListable("its base file format is not Parquet")
    if timeline.table_version >= 8:
        parts = {p.strip() for p in props.get("hoodie.table.metadata.partitions", "").split(",")}
        enabled = props.get("hoodie.metadata.enable", "false").strip().lower() == "true"
        if enabled or "files" in parts:
            raise NotListable("hudi-rs reads its files from the metadata table")


def writes(done: Iterable[Instant]) -> list[Instant]:
    """The completed writes hudi-rs' timeline loads, by requested time."""
    return sorted((i for i in done if i.action in WRITE_ACTIONS), key=lambda i: i.requested)


def replaced_by(meta: Mapping[str, Any]) -> set[tuple[str, str]]:
    """The file groups a replacecommit's metadata names as replaced."""
    found = meta.get("partitionToReplaceFileIds") or {}
    return {(str(p), str(f)) for p, fids in found.items() for f in fids or []}


def basis(
    timeline: HudiTimeline,
    done: list[Instant],
    replaced: frozenset[tuple[str, str]],
    ratio: float | None,
) -> ViewBasis:
    """The view's inputs: `done` the completed instants, `replaced` the file groups every
    completed replacecommit on it replaced, `ratio` the sample's (`compression_ratio`)."""
    check_listable(timeline)
    loaded = writes(done)
    if not loaded:
        raise NotListable("no completed write")
    as_of = loaded[-1].requested
    completion = None
    if timeline.layout >= 2:
        # hudi-rs orders its instants by time: where the newest requested write is not the
        # last to complete, its as-of is not surely ours
        if max(loaded, key=lambda i: (i.seq, i.requested)).requested != as_of:
            raise NotListable("its newest write is not the last to complete")
        completion = {i.requested: i.completed or i.requested for i in loaded}
    return ViewBasis(as_of, completion, replaced, ratio)


def compression_ratio(timeline: HudiTimeline, sample: Sample) -> float | None:
    """hudi-rs' `FileStatsEstimator`: uncompressed / compressed bytes of the row groups of
    the sample base file; None where hudi-rs has no estimator (no sample, not Parquet, a
    footer it cannot read)."""
    path = sample.path
    if path is None or not path.endswith(".parquet"):
        return None
    import pyarrow.parquet as pq

    try:
        with timeline.fs.open_input_file(f"{timeline.base.rstrip('/')}/{path}") as f:
            footer = pq.ParquetFile(f).metadata
    except (OSError, ValueError):
        return None
    groups = [footer.row_group(n) for n in range(footer.num_row_groups)]
    on_disk = sum(g.column(c).total_compressed_size for g in groups for c in range(g.num_columns))
    uncompressed = sum(g.total_byte_size for g in groups)
    return uncompressed / on_disk if on_disk > 0 else 1.0


def base_file_paths(meta: Mapping[str, Any]) -> Iterable[str]:
    """`HoodieCommitMetadata::iter_base_file_paths`: each write stat's base file (in its
    partition), or its path where it names no log files."""
    for partition, stats in (meta.get("partitionToWriteStats") or {}).items():
        for stat in stats or []:
            base = stat.get("baseFile")
            if base:
                yield f"{partition}/{base}" if partition else str(base)
            elif stat.get("logFiles") is None and stat.get("path"):
                yield str(stat["path"])


def partition_slices(
    timeline: HudiTimeline, partition: str, view: ViewBasis
) -> PartitionSlices | None:
    """The partition's latest file slices, folded as `facts.fold` folds hudi-rs' (None:
    no slice, or no such folder)."""
    folder = "/".join(p for p in (timeline.base.rstrip("/"), partition) if p)
    infos = timeline.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    files = [(i.base_name, int(i.size or 0)) for i in infos if i.type == pafs.FileType.File]
    return _fold(_latest(partition, files, view), view.compression_ratio)


# A group's slices: base instant -> (base file bytes, log files' bytes).
_Slices = dict[str, tuple[int, list[int]]]


def _latest(
    partition: str, files: list[tuple[str, int]], view: ViewBasis
) -> list[tuple[int, list[int]]]:
    """Each live file group's slice as of `view.as_of`: (base bytes, log bytes)."""
    bases: dict[str, _Slices] = {}
    logs: dict[str, list[tuple[str, int]]] = {}
    for name, size in files:
        if name.startswith(PARTITION_METADATA) or name.endswith(".crc"):
            continue  # hudi-rs lists neither (a checksum is no log file of a group ".<id>")
        if name.endswith(OTHER_BASE_FORMATS):  # hudi-rs takes them for base files too
            raise NotListable(f"base file {name!r} is not Parquet")
        if name.endswith(".parquet"):
            parts = name[: -len(".parquet")].split("_")
            if len(parts) < 3:
                raise NotListable(f"base file name {name!r}")
            fid, instant = parts[0], parts[2]
            if not _committed(instant, view):
                continue
            slices = bases.setdefault(fid, {})
            if instant in slices:
                raise NotListable(f"two base files of {fid} at {instant}")
            slices[instant] = (size, [])
            continue
        log = parse_log(name)
        if log is None:
            continue  # hudi-rs skips what it cannot read as a log file
        fid, instant = log
        if _committed(instant, view):
            at = view.completion[instant] if view.completion is not None else instant
            logs.setdefault(fid, []).append((at, size))
    alone = set(logs) - set(bases)
    if alone:  # hudi-rs 0.5 makes a file group of log files alone: its slice is its own
        raise NotListable(f"file group {min(alone)} has log files and no base file")
    out = []
    for fid, slices in bases.items():
        for at, size in logs.get(fid, []):
            owner = max((s for s in slices if s <= at), default=None)
            if owner is None:
                raise NotListable(f"a log file of {fid} precedes its base files")
            slices[owner][1].append(size)
        if (partition, fid) in view.replaced:
            continue
        latest = max((s for s in slices if s <= view.as_of), default=None)
        if latest is not None:
            out.append(slices[latest])
    return out


def parse_log(name: str) -> tuple[str, str] | None:
    """(file id, instant) of a log file's name as hudi-rs parses it
    (`.<file id>_<instant>.<ext>.<version>_<write token>`), None where it fails."""
    if not name.startswith("."):
        return None
    fid, sep, rest = name[1:].partition("_")
    middle, sep2, _ = rest.rpartition("_")
    parts = middle.split(".")
    if not sep or not sep2 or len(parts) != 3 or not parts[2].isdigit():
        return None
    if parts[1] != "log":
        raise NotListable(f"log file {name!r} is not a .log (hudi-rs reads it otherwise)")
    return fid, parts[0]


def _committed(instant: str, view: ViewBasis) -> bool:
    return view.completion is None or instant in view.completion


def _fold(found: list[tuple[int, list[int]]], ratio: float | None) -> PartitionSlices | None:
    if not found:
        return None
    part = PartitionSlices(PartitionFacts(), [], [])
    facts = part.facts
    for size, logs in found:
        byte_size = estimate(size, ratio)
        part.disk_sizes.append(size)
        facts.file_groups += 1
        facts.base_files += 1
        facts.base_bytes += byte_size
        part.base_file_sizes.append(byte_size)
        facts.log_files += len(logs)
        facts.log_bytes += sum(logs)
        facts.max_log_files_per_slice = max(facts.max_log_files_per_slice, len(logs))
        part.log_files_per_slice.append(len(logs))
    return part


def estimate(size: int, ratio: float | None) -> int:
    """hudi-rs' in-memory bytes of a base file of `size` bytes on storage."""
    return int(size * ratio) if ratio is not None and size > 0 else 0


def rescaled(part: PartitionSlices, ratio: float | None) -> PartitionSlices:
    """The partition's slices with their base files' estimate taken with `ratio`."""
    sizes = [estimate(size, ratio) for size in part.disk_sizes]
    facts = PartitionFacts(**{**vars(part.facts), "base_bytes": sum(sizes)})
    return PartitionSlices(facts, sizes, part.log_files_per_slice, part.disk_sizes)
