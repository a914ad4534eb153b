"""A Hudi table's timeline read from its instant files, as the seam's `Commit`s.

File names, by timeline layout (`hoodie.timeline.layout.version`):
- layout 2 (table versions 8, 9; Hudi 1.x), in `.hoodie/timeline/`:
  `<requested>.<action>.requested`, `<requested>.<action>.inflight`, and on completion
  `<requested>_<completed>.<action>`;
- layout 1 (table version 6), in `.hoodie/`: `<ts>.<action>.requested`,
  `<ts>.<action>.inflight` (a commit's is `<ts>.inflight`), and `<ts>.<action>` completed.

A commit's id is its requested instant time (what Hudi names an instant by, and what
`TIMESTAMP AS OF` and the procedures take); its `seq` is the completion time (the
requested time in layout 1, which has none), so commits sort in the order they landed.
A compaction completes as a `commit` of the compaction's requested time.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pyarrow import fs as pafs

from lakewarden.formats.base import MARKER_PREFIX, Commit, CommitId, TimelinePage, marker_of
from lakewarden.formats.hudi.storage import storage_for
from lakewarden.formats.warehouse import filesystem
from lakewarden.object_store import reader_options

# Instant times: yyyyMMddHHmmss[SSS]; Hudi's own format, in the table's timezone.
_TIME = r"\d{14}(?:\d{3})?"
_COMPLETED_V2 = re.compile(rf"^(?P<req>{_TIME})_(?P<done>{_TIME})\.(?P<action>[a-z]+)$")
_PENDING = re.compile(rf"^(?P<req>{_TIME})\.(?P<action>[a-z]+)\.(?P<state>requested|inflight)$")
_COMPLETED_V1 = re.compile(rf"^(?P<req>{_TIME})\.(?P<action>[a-z]+)$")
_INFLIGHT_COMMIT_V1 = re.compile(rf"^(?P<req>{_TIME})\.inflight$")

# Actions whose completed file is a HoodieCommitMetadata (or its replace subtype).
WRITE_ACTIONS = frozenset({"commit", "deltacommit", "replacecommit"})


class NotAHudiTable(ValueError):
    """The base path has no `.hoodie/hoodie.properties`: say which path."""


class UnsupportedTableVersion(ValueError):
    """A table version lakewarden (and hudi-rs) does not read: 6, 8 and 9 only."""


SUPPORTED_TABLE_VERSIONS = frozenset({6, 8, 9})


@dataclass(frozen=True)
class Instant:
    """One instant file of the timeline."""

    requested: str
    action: str
    state: Literal["requested", "inflight", "completed"]
    completed: str | None  # layout 2's completion time; None before completion or in layout 1
    file_name: str

    @property
    def seq(self) -> int:
        return int(self.completed or self.requested)


def parse_instant(name: str) -> Instant | None:
    """The instant a timeline file's name spells, or None (not an instant file)."""
    if m := _COMPLETED_V2.match(name):
        return Instant(m["req"], m["action"], "completed", m["done"], name)
    if m := _PENDING.match(name):
        return Instant(m["req"], m["action"], m["state"], None, name)  # type: ignore[arg-type]
    if m := _INFLIGHT_COMMIT_V1.match(name):
        return Instant(m["req"], "commit", "inflight", None, name)
    if m := _COMPLETED_V1.match(name):
        return Instant(m["req"], m["action"], "completed", None, name)
    return None


def instant_millis(instant_time: str, tz: Any = None) -> int:
    """An instant time as ms since the epoch; `tz` None reads it in the local timezone,
    as Hudi writes it by default (`hoodie.table.timeline.timezone=LOCAL`)."""
    fmt = "%Y%m%d%H%M%S%f" if len(instant_time) == 17 else "%Y%m%d%H%M%S"
    text = instant_time + "000" if len(instant_time) == 17 else instant_time
    at = datetime.strptime(text, fmt)
    return int((at.replace(tzinfo=tz) if tz else at.astimezone()).timestamp() * 1000)


def read_properties(fs: pafs.FileSystem, base: str) -> dict[str, str]:
    """`.hoodie/hoodie.properties` (Java properties: `key=value`, `#` comments)."""
    try:
        with fs.open_input_stream(f"{base}/.hoodie/hoodie.properties") as f:
            text = f.read().decode()
    except (FileNotFoundError, OSError) as exc:
        raise NotAHudiTable(
            f"{base} is not a Hudi table: it has no .hoodie/hoodie.properties"
        ) from exc
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip().replace("\\:", ":")
    return props


class HudiTimeline:
    """The timeline of the Hudi table at `base_path` (implements the seam's `Timeline`)."""

    def __init__(self, base_path: str, storage: Mapping[str, str] | None = None) -> None:
        """`storage`: the catalog's resolved properties (credentials of an object store);
        None: those a Hudi job set for its table (`storage.table_storage`), if any."""
        self.base_path = base_path
        self.storage = dict(storage) if storage is not None else storage_for(base_path)
        self.fs, self.base = filesystem(base_path, self.storage)
        self.properties = read_properties(self.fs, self.base)
        version = int(self.properties.get("hoodie.table.version", "0"))
        if version not in SUPPORTED_TABLE_VERSIONS:
            raise UnsupportedTableVersion(
                f"{base_path}: Hudi table version {version} is not supported (6, 8 and 9 "
                "are: Hudi 0.14 to 1.x); upgrade the table with Hudi's own upgrade"
            )
        self.table_version = version
        self.layout = int(self.properties.get("hoodie.timeline.layout.version", "1"))
        folder = self.properties.get("hoodie.timeline.path", "timeline")
        self.folder = f"{self.base}/.hoodie/{folder}" if version >= 8 else f"{self.base}/.hoodie"

    def table(self) -> Any:
        """hudi-rs' table, with the catalog's object-store credentials (`reader_options`)."""
        from hudi import HudiTable  # the `hudi` extra: only where Hudi tables are read

        return HudiTable(self.base_path, reader_options(self.storage, self.base_path))

    # --- instants -------------------------------------------------------------------

    def instants(self) -> list[Instant]:
        """Every instant file of the active timeline, in requested-time order."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.folder, allow_not_found=True))
        out = [
            i
            for info in infos
            if info.type == pafs.FileType.File
            for i in [parse_instant(info.base_name)]
            if i is not None
        ]
        return sorted(out, key=lambda i: (i.requested, i.file_name))

    def completed(self, instants: list[Instant] | None = None) -> list[Instant]:
        """Completed instants, in the order they completed. `instants`: a listing of the
        timeline already read (`instants()`), for a caller that reads it once; else it is
        listed now (so in `pending` and `written_ago_s`)."""
        return sorted(
            (
                i
                for i in (self.instants() if instants is None else instants)
                if i.state == "completed"
            ),
            key=lambda i: (i.seq, i.requested),
        )

    def pending(self, instants: list[Instant] | None = None) -> list[Instant]:
        """Requested or inflight instants not (yet) completed, one per requested time: its
        furthest state. A compaction's completion is a `commit` of the same time."""
        instants = self.instants() if instants is None else instants
        done = {i.requested for i in instants if i.state == "completed"}
        furthest: dict[str, Instant] = {}
        for i in instants:
            later = i.requested not in furthest or i.state == "inflight"
            if i.state != "completed" and i.requested not in done and later:
                furthest[i.requested] = i
        return [furthest[k] for k in sorted(furthest)]

    def written_ago_s(self, now: float, instants: list[Instant] | None = None) -> float | None:
        """Seconds since the newest completed delta commit landed (its instant file's time
        on storage: the writer's time zone plays no part), None if there is none."""
        deltas = [i for i in self.completed(instants) if i.action == "deltacommit"]
        if not deltas:
            return None
        info = self.fs.get_file_info(f"{self.folder}/{deltas[-1].file_name}")
        return None if info.mtime is None else max(0.0, now - info.mtime.timestamp())

    def head_token(self) -> str | None:
        """The newest completed instant's file name: equal tokens, nothing new to read."""
        done = self.completed()
        return done[-1].file_name if done else None

    def read_instant(self, instant: Instant) -> dict[str, Any]:
        """An instant file's content: Avro (table version 8+) or JSON (6); {} when empty."""
        with self.fs.open_input_stream(f"{self.folder}/{instant.file_name}") as f:
            raw = f.read()
        if not raw:
            return {}
        if raw[:4] == b"Obj\x01":
            import fastavro  # the `hudi` extra: only where a Hudi table's instants are read

            for record in fastavro.reader(io.BytesIO(raw)):
                return dict(record) if isinstance(record, dict) else {}
            return {}
        data: dict[str, Any] = json.loads(raw)
        return data

    # --- the seam -------------------------------------------------------------------

    def head_id(self) -> CommitId | None:
        done = self.completed()
        return done[-1].requested if done else None

    def head(self) -> Commit | None:
        """The newest completed instant as a commit (the registration's baseline)."""
        done = self.completed()
        return self.commit(done[-1], done[-2] if len(done) > 1 else None) if done else None

    def commit(self, instant: Instant, parent: Instant | None) -> Commit:
        meta = self.read_instant(instant)
        return Commit(
            id=instant.requested,
            parent=parent.requested if parent else None,
            seq=instant.seq,
            at_ms=instant_millis(instant.completed or instant.requested),
            operation=instant.action,
            summary=summarize(instant.action, meta),
            native=meta,
        )

    def since(self, cursor: CommitId | None, limit: int) -> TimelinePage:
        """Completed instants after `cursor` (a requested time), oldest first, at most
        `limit` (the oldest ones: the next call goes on from the last). A cursor no longer
        on the active timeline (archived, or rolled back by a restore) is off history:
        everything on it then comes."""
        done = self.completed()
        ids = [i.requested for i in done]
        off = cursor is not None and cursor not in ids
        start = ids.index(cursor) + 1 if cursor is not None and not off else 0
        page = done[start : start + limit]
        commits = [
            self.commit(i, done[start + n - 1] if start + n else None) for n, i in enumerate(page)
        ]
        return TimelinePage(commits, cursor_off_history=off)

    def find_job_commits(self, task_id: int) -> Commit | None:
        """The newest completed instant stamped with task `task_id` in its extraMetadata."""
        done = self.completed()
        for n in range(len(done) - 1, -1, -1):
            commit = self.commit(done[n], done[n - 1] if n else None)
            marker = marker_of(commit.summary)
            if marker is not None and marker.task_id == task_id:
                return commit
        return None


def summarize(action: str, meta: Mapping[str, Any]) -> dict[str, str]:
    """The commit's metadata as a flat summary of strings (stored as the event's JSONB):
    for a write, what it wrote (files, records, bytes, partitions) and the writer's
    extraMetadata but the schema; for clean and rollback, what they removed or undid."""
    out: dict[str, str] = {"action": action}
    if action in WRITE_ACTIONS:
        stats = [s for ss in (meta.get("partitionToWriteStats") or {}).values() for s in ss or []]
        out["operation-type"] = str(meta.get("operationType") or "")
        out["partitions"] = str(len(meta.get("partitionToWriteStats") or {}))
        out["files-written"] = str(len(stats))
        out["log-files-written"] = str(sum(1 for s in stats if ".log." in (s.get("path") or "")))
        for key, stat in (
            ("records-written", "numWrites"),
            ("records-inserted", "numInserts"),
            ("records-updated", "numUpdateWrites"),
            ("records-deleted", "numDeletes"),
            ("bytes-written", "totalWriteBytes"),
        ):
            out[key] = str(sum(int(s.get(stat) or 0) for s in stats))
        replaced = meta.get("partitionToReplaceFileIds") or {}
        if replaced:
            out["file-groups-replaced"] = str(sum(len(v or []) for v in replaced.values()))
        if meta.get("compacted"):
            out["compacted"] = "true"
        for key, value in (meta.get("extraMetadata") or {}).items():
            if key != "schema":
                out[f"extra.{key}" if not key.startswith(MARKER_PREFIX) else key] = str(value)
    elif action == "clean":
        out["files-deleted"] = str(meta.get("totalFilesDeleted", ""))
        out["earliest-retained"] = str(meta.get("earliestCommitToRetain", ""))
    elif action in ("rollback", "restore"):
        undone = meta.get("commitsRollback") or meta.get("instantsToRollback") or []
        out["rolled-back"] = ",".join(
            str(u.get("commitTime") if isinstance(u, Mapping) else u) for u in undone
        )
    return out
