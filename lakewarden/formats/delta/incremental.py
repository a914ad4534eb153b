"""Incremental planning of a Delta table (issue 32 §5): its live files from the log
versions after a cursor, not from the whole table.

A planning process keeps, per table, what it read at the version it last planned (the
cursor): delta-rs' table (protocol, metadata, schema), the recent commits' commitInfo and
the live files by partition, each partition folded once (`facts.PartitionFiles`). The next
plan lists the log, reads only the commit files after the cursor (delta-rs does not give
one version's actions), drops the files they `remove`, describes the files they `add`
from the actions themselves (size, partition values and min/max stats typed by the
table's schema as delta-rs types them; the rows a deletion vector hides: its descriptor's
`cardinality`) and folds again only the partitions that changed. Neither delta-rs' table
nor its files are read again. The facts, and so the plans, are the ones a full read
(`facts.read_facts`) gives: tests compare them on real tables.

In full instead: the first plan of a table in this process; a version behind the cursor
(the table written again at its path); a new version's commit file gone; a `metaData` or
`protocol` action (the schema, partition columns or configuration changed); column
mapping (stats under physical names); a path or a stat this reader does not type as
delta-rs does (an escaped path, a type other than the primitive ones); and every
`plan_full_every`-th plan, which reads the table in full as well and compares: a
difference is logged as an error, and the full read is what is planned and kept.
Bounded by `plan_cache_files` (file descriptions held; the least recently planned tables
go first); 0 turns it off. The process's memory, as Iceberg's manifests
(`lakewarden.manifest_cache`): a worker that has not planned a table yet reads it in full.
"""

from __future__ import annotations

import json
import logging
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from lakewarden.catalogs.foreign import DELTA_WINDOW
from lakewarden.formats.delta.facts import (
    PartitionFiles,
    Snapshot,
    file_name,
    file_row,
    file_rows,
    group,
)
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.manifest_cache import PerProcess

log = logging.getLogger(__name__)

FULL = "full"
INCREMENTAL = "incremental"
CHECKED = "checked"
COLUMN_MAPPING = "delta.columnMapping.mode"


class Unreadable(ValueError):
    """Something the incremental reader does not type as delta-rs does: read in full."""


@dataclass
class _Kept:
    snapshot: Snapshot
    parts: dict[str, PartitionFiles]
    plans: int = 0

    @property
    def files(self) -> int:
        return sum(len(p.rows) for p in self.parts.values())


@dataclass
class Read:
    """How the last `files` call of a table read it."""

    how: str = FULL  # FULL | INCREMENTAL | CHECKED
    versions: int = 0  # commit files read after the cursor
    mismatch: bool = False
    why_full: str = ""

    def explain(self) -> str:
        if self.how == FULL:
            return ""
        text = f"read {self.versions} log version(s) after the last plan's"
        if self.how == CHECKED:
            verdict = "DIFFERED: cache dropped" if self.mismatch else "the same"
            text += f"; checked against a full read ({verdict})"
        return text


@dataclass
class DeltaFilesCache:
    """What the tables this process planned held at its last plan of each, by table path."""

    max_files: int
    full_every: int
    _kept: OrderedDict[str, _Kept] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    last: dict[str, Read] = field(default_factory=dict)  # table path -> its last read

    def files(self, timeline: DeltaTimeline) -> tuple[Snapshot, dict[str, PartitionFiles]]:
        """The table's snapshot and live files by partition (`read_facts`' `files`)."""
        path = timeline.path
        with self._lock:
            kept = self._kept.pop(path, None)  # one plan of a table at a time holds it
        read = Read()
        got = None
        if kept is not None and self.max_files:
            kept.plans += 1
            try:
                got = self._incremental(timeline, kept, read)
            except Unreadable as exc:
                read.why_full = str(exc)
            if got is not None and kept.plans % max(1, self.full_every) == 0:
                got = self._checked(timeline, got, read)
        if got is None:
            table = timeline.open_table()
            got = _Kept(Snapshot.of(table), group(file_rows(table)), kept.plans if kept else 0)
            read.how = FULL
        self.last[path] = read
        self._keep(path, got)
        return got.snapshot, dict(got.parts)

    def _incremental(self, timeline: DeltaTimeline, kept: _Kept, read: Read) -> _Kept | None:
        before = kept.snapshot
        versions = timeline.versions()
        head = versions[-1] if versions else -1
        if head < before.version:
            read.why_full = f"version {head} is behind the cursor {before.version}"
            return None
        table = before.table
        config = table.metadata().configuration or {}
        if str(config.get(COLUMN_MAPPING, "none")).lower() != "none":
            read.why_full = "column mapping: stats under physical names"
            return None
        columns = list(table.metadata().partition_columns or [])
        types = _types(json.loads(table.schema().to_json()))
        parts = dict(kept.parts)  # a partition changed is copied, never changed in place
        infos: list[dict[str, Any]] = []
        for v in range(before.version + 1, head + 1):
            try:
                actions = timeline.read_actions(v)
            except (FileNotFoundError, OSError):
                read.why_full = f"version {v}'s commit file is gone"
                return None
            if any("metaData" in a or "protocol" in a for a in actions):
                read.why_full = f"version {v} changed the table's metadata or protocol"
                return None
            info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
            if info is not None:
                infos.append({**info, "version": v})
            # a version's removes, then its adds (a deletion vector's update re-adds a path)
            for a in actions:
                if "remove" in a:
                    _remove(parts, _path(a["remove"]["path"]))
            for a in actions:
                if "add" in a:
                    row = file_row(columns, _flat(a["add"], columns, types), _hidden(a["add"]))
                    _add(parts, row)
        for key, part in list(parts.items()):
            if part is not kept.parts.get(key):
                if part.rows:
                    part.fold()
                else:
                    del parts[key]
        history = (list(reversed(infos)) + before.history)[:DELTA_WINDOW]
        read.how, read.versions = INCREMENTAL, head - before.version
        return _Kept(Snapshot(table, head, history), parts, kept.plans)

    def _checked(self, timeline: DeltaTimeline, kept: _Kept, read: Read) -> _Kept:
        """Read the table in full too and compare; the full read is kept."""
        table = timeline.open_table()
        full = _Kept(Snapshot.of(table), group(file_rows(table)), kept.plans)
        read.how = CHECKED
        rows = {k: p.rows for k, p in kept.parts.items()}
        read.mismatch = (
            rows != {k: p.rows for k, p in full.parts.items()}
            or full.snapshot.version != kept.snapshot.version
            or full.snapshot.history != kept.snapshot.history
        )
        if read.mismatch:
            log.error(
                "incremental read of Delta table %s (version %d) differed from a full one "
                "(%d files against %d): the full read is planned and kept",
                timeline.path,
                full.snapshot.version,
                kept.files,
                full.files,
            )
        return full

    def _keep(self, path: str, kept: _Kept) -> None:
        if not self.max_files:
            return
        with self._lock:
            self._kept[path] = kept
            held = sum(k.files for k in self._kept.values())
            while held > self.max_files and self._kept:
                _, gone = self._kept.popitem(last=False)
                held -= gone.files

    def forget(self, path: str) -> None:
        with self._lock:
            self._kept.pop(path, None)


def _remove(parts: dict[str, PartitionFiles], path: str) -> None:
    for key, part in parts.items():
        if path in part.rows:
            parts[key] = _copy(part)
            del parts[key].rows[path]
            return


def _add(parts: dict[str, PartitionFiles], row: Any) -> None:
    part = parts.get(row.key)
    part = _copy(part) if part is not None else PartitionFiles(row.key, row.values, {})
    part.rows[row.file.path] = row
    parts[row.key] = part


def _copy(part: PartitionFiles) -> PartitionFiles:
    return PartitionFiles(part.key, part.values, dict(part.rows))


def _path(path: str) -> str:
    if "%" in path:  # delta-rs shows paths unescaped: not matched here
        raise Unreadable(f"an escaped path in the log ({path})")
    return path


def _hidden(add: Mapping[str, Any]) -> dict[str, int]:
    dv = add.get("deletionVector")
    return {file_name(add["path"]): int(dv.get("cardinality") or 0)} if dv else {}


_UTC = ZoneInfo("UTC")
Parse = Callable[[Any], Any]


def _timestamp(value: Any) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(_UTC)


def _parser(kind: Any) -> Parse | dict[str, Any] | None:
    """How delta-rs types a value of Delta type `kind` (a stat or a partition value)."""
    if isinstance(kind, dict):
        if kind.get("type") == "struct":
            return _types(kind)
        return None
    if kind in ("long", "integer", "short", "byte"):
        return int
    if kind == "double":
        return float
    if kind == "float":
        return lambda v: struct.unpack("f", struct.pack("f", float(v)))[0]
    if kind == "string":
        return str
    if kind == "boolean":
        return lambda v: v if isinstance(v, bool) else str(v).lower() == "true"
    if kind == "date":
        return lambda v: date.fromisoformat(str(v))
    if kind == "timestamp":
        return _timestamp
    if kind == "timestamp_ntz":
        return lambda v: datetime.fromisoformat(str(v).rstrip("Z"))
    if isinstance(kind, str) and kind.startswith("decimal"):
        return lambda v: Decimal(str(v))
    return None


def _types(struct: Mapping[str, Any]) -> dict[str, Any]:
    return {f["name"]: _parser(f["type"]) for f in struct.get("fields", [])}


def _flat(add: Mapping[str, Any], columns: list[str], types: dict[str, Any]) -> dict[str, Any]:
    """An add action as delta-rs shows it (`get_add_actions(flatten=True)`)."""
    row: dict[str, Any] = {"path": _path(add["path"]), "size_bytes": int(add["size"])}
    values = add.get("partitionValues") or {}
    for c in columns:
        raw = values.get(c)
        parse = types.get(c)
        if raw is not None and not callable(parse):
            raise Unreadable(f"partition column {c}'s type")
        row[f"partition.{c}"] = None if raw is None or raw == "" else parse(raw)  # type: ignore[misc]
    stats = json.loads(add["stats"]) if add.get("stats") else {}
    row["num_records"] = stats.get("numRecords")
    for side, name in (("min", "minValues"), ("max", "maxValues")):
        _stats(row, side, stats.get(name) or {}, types, "")
    return row


def _stats(
    row: dict[str, Any], side: str, values: Mapping[str, Any], types: Mapping[str, Any], prefix: str
) -> None:
    for name, value in values.items():
        kind = types.get(name)
        if isinstance(value, dict) and isinstance(kind, dict):
            _stats(row, side, value, kind, f"{prefix}{name}.")
        elif value is None:
            row[f"{side}.{prefix}{name}"] = None
        elif callable(kind):
            row[f"{side}.{prefix}{name}"] = kind(value)
        else:
            raise Unreadable(f"column {prefix}{name}'s stats")


_shared = PerProcess(DeltaFilesCache)
without_cache = _shared.off  # the API's: see `manifest_cache.PerProcess`
shared = _shared.get
