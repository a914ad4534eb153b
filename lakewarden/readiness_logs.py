"""Readiness on Hudi and Delta tables (issues 28, 29): each format's log as the
`readiness.TableLog` the rule reads, built on what the format's own modules read
(`formats.hudi.partitions`, `formats.delta.partitions`; no JVM).

- Delta: a commit is a log version (its id and order are the version). A partition ready
  now is pinned at the newest version: a reader reads it with `VERSION AS OF n`
  (`deltalake.DeltaTable(path, version=n)`). Delta has no tags: the version is recorded
  with the partition, and the clean kind's VACUUM keeps the files it reads for the
  policy's `tag_retention_days` (`kinds.delta`).
- Hudi: a commit is a completed write instant (its id the requested instant time as a
  number, its order the completion time). A partition ready now is pinned at the newest
  completed write instant: a reader reads it with `as.of.instant` (Spark's datasource
  option; `TIMESTAMP AS OF '<instant>'` in SQL; hudi-rs' `as_of_timestamp`).

A partition field of either is an identity of its column (neither format transforms
partition values): a `date` column's partitions end in time (the watermark rule and
deadlines work on it), any other's are named by their value and judged by quiet time.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Any

from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, StringType

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.formats.base import Commit as LogCommit
from lakewarden.formats.delta import catalog as delta_catalog
from lakewarden.formats.delta import partitions as delta_parts
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.formats.hudi import catalog as hudi_catalog
from lakewarden.formats.hudi import partitions as hudi_parts
from lakewarden.formats.hudi.timeline import WRITE_ACTIONS, HudiTimeline, parse_instant
from lakewarden.formats.warehouse import table_path
from lakewarden.readiness import (
    MAX_WALK,
    Commit,
    DataCommit,
    PartitionField,
    ReadinessProblem,
    TableLog,
    partition_label,
)

# Hudi's default partition path for a null value.
_HUDI_NULL = "__HIVE_DEFAULT_PARTITION__"


def identity_field(column: str, log_type: str) -> PartitionField:
    """An identity partition field of `column`: a date when the log says so."""
    source_type = DateType() if log_type == "date" else StringType()
    return PartitionField(column, -1, source_type, IdentityTransform())


def _raw(field: PartitionField, value: str | None) -> Any:
    """A partition value as the log spells it, typed for `partition_label`."""
    if value is None or value == _HUDI_NULL:
        return None
    if isinstance(field.source_type, DateType):
        try:
            return date.fromisoformat(value)
        except ValueError:
            return int(value)  # days since 1970, as a date may be written
    return value


def _touched(field: PartitionField, values: set[Any]) -> dict[str, tuple[Any, datetime | None]]:
    out: dict[str, tuple[Any, datetime | None]] = {}
    for value in values:
        try:
            raw = _raw(field, value)
        except ValueError:
            raw = value
        label, end = partition_label(field, raw) if not isinstance(raw, str) else (raw, None)
        out[label] = (raw, end)
    return out


def _commit(c: LogCommit) -> Commit:
    return Commit(int(c.id), datetime.fromtimestamp(c.at_ms / 1000, tz=UTC), c.seq)


class DeltaLog:
    """A Delta table's log as readiness reads it."""

    format = "delta"

    def __init__(self, timeline: DeltaTimeline) -> None:
        self.timeline = timeline
        self._versions = timeline.versions()

    def field(self, column: str) -> PartitionField:
        try:
            return identity_field(column, delta_parts.partition_column_type(self.timeline, column))
        except delta_parts.NotAPartitionColumn as exc:
            raise ReadinessProblem(str(exc)) from exc

    def data_commits_after(self, cursor: int | None, field: PartitionField) -> list[DataCommit]:
        # The newest MAX_WALK versions after the cursor (as Iceberg's walk back from main).
        head = self.pin()
        if head is not None:
            cursor = max(cursor if cursor is not None else -1, head - MAX_WALK)
        page = self.timeline.since(str(cursor), MAX_WALK)
        out = []
        for c in page.commits:
            values = delta_parts.touched_values(c, field.column)
            if values:
                out.append(DataCommit(_commit(c), _touched(field, values)))
        return out

    def sequence_of(self, commit_id: int) -> int | None:
        return commit_id  # a version is its own order, also once its file is cleaned up

    def pin(self) -> int | None:
        return self._versions[-1] if self._versions else None


class HudiLog:
    """A Hudi table's timeline as readiness reads it."""

    format = "hudi"

    def __init__(self, timeline: HudiTimeline) -> None:
        self.timeline = timeline
        self._completed = timeline.completed()

    def field(self, column: str) -> PartitionField:
        try:
            return identity_field(column, hudi_parts.partition_field_type(self.timeline, column))
        except hudi_parts.NotAPartitionField as exc:
            raise ReadinessProblem(str(exc)) from exc

    def data_commits_after(self, cursor: int | None, field: PartitionField) -> list[DataCommit]:
        # The newest MAX_WALK instants after the cursor (as Iceberg's walk back from main).
        ids = [i.requested for i in self._completed]
        at = _instant(cursor) if cursor is not None else None
        start = ids.index(at) + 1 if at in ids else 0
        if len(ids) - start > MAX_WALK:
            at = ids[len(ids) - MAX_WALK - 1]
        page = self.timeline.since(at, MAX_WALK)
        out = []
        for c in page.commits:
            if hudi_parts.is_data_commit(c):
                values = hudi_parts.touched_values(self.timeline, c, field.column)
                if values:
                    out.append(DataCommit(_commit(c), _touched(field, set(values))))
        return out

    def sequence_of(self, commit_id: int) -> int | None:
        instant = _instant(commit_id)
        return next((i.seq for i in self._completed if i.requested == instant), None)

    def pin(self) -> int | None:
        writes = [i for i in self._completed if i.action in WRITE_ACTIONS]
        return int(writes[-1].requested) if writes else None


def _instant(commit_id: int) -> str:
    return str(commit_id)


def head_of(table_format: str, head_token: str | None) -> int | None:
    """The commit a Hudi or Delta table's head token names (`managed_tables.metadata_location`:
    the newest commit file the poller ingested), as readiness' cursor spells commits: a
    Delta version, a Hudi instant time (a savepoint's is the instant it savepoints). None:
    no token, or not one of these formats'."""
    if head_token is None:
        return None
    if table_format == "delta":
        match = re.fullmatch(r"(\d{20})\.json", head_token)
        return int(match.group(1)) if match else None
    if table_format == "hudi":
        instant = parse_instant(head_token)
        return int(instant.requested) if instant is not None else None
    return None


def location(table_format: str, entry: CatalogEntry, ref: TableRef) -> str:
    """What a reader names the table by in a pin (`readiness.pin_of`): a Hudi or Delta
    table's path, an Iceberg table's catalog.namespace.name."""
    if table_format in ("hudi", "delta"):
        return table_path(entry, ref)
    return f"{entry.name}.{ref.dotted}"


def path_log(table_format: str, entry: CatalogEntry, ref: TableRef) -> TableLog:
    """The readiness log of a Hudi or Delta table (a path catalog's)."""
    if table_format == "delta":
        return DeltaLog(delta_catalog.open_timeline(entry, ref))
    if table_format == "hudi":
        return HudiLog(hudi_catalog.open_timeline(entry, ref))
    raise ReadinessProblem(f"readiness does not read {table_format} tables")
