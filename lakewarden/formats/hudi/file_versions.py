"""Every file version of a Hudi table still on storage, and which of them Hudi's cleaner
would delete keeping the latest N write commits (`KEEP_LATEST_COMMITS`). Python only, no
JVM: a listing of the table's folders and its file names, read against the timeline.

hudi-rs shows the latest file slices only; the cleaner's work is the older slices (a base
file rewritten by an upsert, a compaction or a clustering leaves the old one behind), so
they are counted here from the files themselves. The rule is the cleaner's
(`CleanPlanner.getFilesToCleanKeepingLatestCommits`): of a file group's slices, the latest
is kept, and so is the newest slice older than the earliest commit to retain (a query as
of that commit reads it); older slices go. A file group a replacecommit (a clustering)
replaced goes whole once that replacecommit is older than the earliest commit to retain,
and is left whole before (Hudi's file-system view no longer lists its slices).
Log files are put in the slice of the newest base instant not after theirs. A slice
whose base file a savepoint reads (a TTL's undo point) is kept, as Hudi's cleaner keeps it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pyarrow import fs as pafs

from lakewarden.formats.hudi.timeline import WRITE_ACTIONS, HudiTimeline

_BASE = re.compile(r"^(?P<fid>[^_]+)_(?P<token>[^_]+)_(?P<instant>\d{14}(?:\d{3})?)\.\w+$")
_LOG = re.compile(r"^\.(?P<fid>[^_]+)_(?P<instant>\d{14}(?:\d{3})?)\.log\.\d+_.+$")


@dataclass
class FileGroup:
    """One file group's files on storage: base files by their instant, log files by theirs."""

    partition: str
    file_id: str
    base: dict[str, int] = field(default_factory=dict)  # base instant -> bytes
    logs: list[tuple[str, int]] = field(default_factory=list)  # (instant, bytes)

    def slices(self) -> dict[str, list[int]]:
        """Each slice's files' sizes, by its base instant (a log-only group: its first log's)."""
        starts = sorted(self.base) or sorted({i for i, _ in self.logs})[:1]
        out: dict[str, list[int]] = {s: ([self.base[s]] if s in self.base else []) for s in starts}
        for instant, size in self.logs:
            owner = max((s for s in starts if s <= instant), default=starts[0])
            out[owner].append(size)
        return out


@dataclass(frozen=True)
class Cleanable:
    """What the cleaner would delete, keeping `retained` write commits."""

    retained: int
    earliest_retained: str | None  # None: no more write commits than retained, nothing goes
    files: int = 0
    bytes: int = 0
    file_groups_replaced: int = 0  # whole file groups a clustering replaced
    slices: int = 0  # older file slices of live file groups
    versions_on_storage: int = 0  # file slices on storage in all
    # Older file slices the cleaner would delete but for a savepoint that reads them.
    kept_by_savepoints: int = 0


def parse_file(name: str) -> tuple[str, str, bool] | None:
    """(file id, instant, is a log file) of a data file's name, or None (not a data file)."""
    if m := _LOG.match(name):
        return m["fid"], m["instant"], True
    if name.startswith(".") or not name.endswith((".parquet", ".orc", ".hfile")):
        return None
    if m := _BASE.match(name):
        return m["fid"], m["instant"], False
    return None


def group_files(files: Iterable[tuple[str, str, int]]) -> dict[tuple[str, str], FileGroup]:
    """File groups of (partition, file name, bytes) listed under the base path."""
    groups: dict[tuple[str, str], FileGroup] = {}
    for partition, name, size in files:
        parsed = parse_file(name)
        if parsed is None:
            continue
        fid, instant, is_log = parsed
        group = groups.setdefault((partition, fid), FileGroup(partition, fid))
        if is_log:
            group.logs.append((instant, size))
        else:
            group.base[instant] = size
    return groups


def list_file_groups(timeline: HudiTimeline) -> dict[tuple[str, str], FileGroup]:
    """Every file group of the table on storage (its `.hoodie` folder left out)."""
    infos = timeline.fs.get_file_info(pafs.FileSelector(timeline.base, recursive=True))
    files = []
    prefix = timeline.base.rstrip("/") + "/"
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        rel = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
        if rel.startswith(".hoodie"):
            continue
        partition, _, name = rel.rpartition("/")
        files.append((partition, name, int(info.size or 0)))
    return group_files(files)


def cleanable(
    groups: Mapping[tuple[str, str], FileGroup],
    write_commits: list[str],
    replaced: Mapping[str, Iterable[tuple[str, str]]],
    retained: int,
    savepointed: frozenset[tuple[str, str, str]] = frozenset(),
) -> Cleanable:
    """What KEEP_LATEST_COMMITS with `retained` commits deletes: `write_commits` are the
    completed write instants (requested times, in order), `replaced` the file groups (partition,
    file id) each completed replacecommit replaced, by its instant, `savepointed` the slices
    (partition, file id, base instant) a savepoint reads: those stay."""
    versions = sum(len(g.slices()) for g in groups.values())
    if len(write_commits) <= retained:
        return Cleanable(retained, None, versions_on_storage=versions)
    earliest = write_commits[-retained]
    gone = {key for instant, keys in replaced.items() if instant < earliest for key in keys}
    every = {key for keys in replaced.values() for key in keys}
    files = size = whole = old = kept = 0
    for key, group in groups.items():
        every_slice = group.slices()
        slices = {
            start: sizes
            for start, sizes in every_slice.items()
            if (group.partition, group.file_id, start) not in savepointed
        }
        # what would go but for a savepoint (said in the verdict: a savepoint blocks it)
        would_go = list(every_slice) if key in gone else []
        if key not in every:
            older_all = [s for s in sorted(every_slice)[:-1] if s < earliest]
            would_go = older_all[:-1]
        kept += sum(1 for s in would_go if (group.partition, group.file_id, s) in savepointed)
        if key in gone:
            whole += bool(slices)
            files += sum(len(s) for s in slices.values())
            size += sum(sum(s) for s in slices.values())
            continue
        if key in every:  # replaced, not yet old enough: the cleaner leaves it whole
            continue
        starts = sorted(slices)
        older = [s for s in starts[:-1] if s < earliest]
        for s in older[:-1]:  # the newest slice older than the earliest retained stays
            old += 1
            files += len(slices[s])
            size += sum(slices[s])
    return Cleanable(retained, earliest, files, size, whole, old, versions, kept)


def table_cleanable(timeline: HudiTimeline, retained: int) -> Cleanable:
    """`cleanable` of the table as it is on storage now."""
    done = timeline.completed()
    writes = sorted(i.requested for i in done if i.action in WRITE_ACTIONS)
    replaced: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for i in done:
        if i.action == "replacecommit":
            meta = timeline.read_instant(i)
            for part, fids in (meta.get("partitionToReplaceFileIds") or {}).items():
                replaced[i.requested].extend((part, f) for f in fids or [])
    return cleanable(list_file_groups(timeline), writes, replaced, retained, savepointed(timeline))


def savepointed(timeline: HudiTimeline) -> frozenset[tuple[str, str, str]]:
    """The slices (partition, file id, base instant) a completed savepoint reads."""
    out = set()
    for i in timeline.completed():
        if i.action != "savepoint":
            continue
        for part, meta in (timeline.read_instant(i).get("partitionMetadata") or {}).items():
            for name in (meta or {}).get("savepointDataFile") or []:
                parsed = parse_file(name)
                if parsed is not None and not parsed[2]:
                    out.add((part, parsed[0], parsed[1]))
    return frozenset(out)


def instants_read_by_latest_slices(timeline: HudiTimeline) -> int:
    """How many completed write instants, newest first, reach back to the oldest one whose
    files a latest file slice reads (its base file's instant, or its first log file's).
    Timeline archival must leave at least these on the active timeline: a reader that
    reads the active timeline only (hudi-rs 0.5, lakewarden's validation) takes a log file
    of an archived delta commit for an uncommitted one and skips its records."""
    oldest: str | None = None
    for group in list_file_groups(timeline).values():
        slices = group.slices()
        start = max(slices)
        oldest = start if oldest is None else min(oldest, start)
    if oldest is None:
        return 0
    return sum(
        1 for i in timeline.completed() if i.action in WRITE_ACTIONS and i.requested >= oldest
    )


def savepoint_comments(timeline: HudiTimeline) -> dict[str, str]:
    """Each completed savepoint's instant and its comment (who made it, and why)."""
    return {
        i.requested: str(timeline.read_instant(i).get("comments") or "")
        for i in timeline.completed()
        if i.action == "savepoint"
    }
