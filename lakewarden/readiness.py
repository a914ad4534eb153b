"""Partition readiness: when a partition is complete and fast to read, for downstream
schedulers (policy section `readiness`).

A partition is *ready* when both hold:

- complete, by the policy's rule: `watermark` — the writer's posted watermark is at or past
  the partition's end; `quiet` — no commit touched it for `quiet_minutes` after the later of
  its end and its last data commit;
- every kind in `require` has *looked at it since its last data commit*: a task of that kind
  planned on a snapshot that includes the partition's last data commit, and ended succeeded
  (the partition rewritten, or judged fine by the planner; not in the run's failed file
  groups) or skipped (the planner found nothing to do on the table). Either way the kind has
  had its say on exactly the data the partition now holds.

A data commit is any commit but a `replace` (a rewrite changes no data); the partitions it
touched are those of the data and delete files it added or removed, read from the manifests
it wrote (pyiceberg). A data commit into a ready partition un-readies it, saying which commit
at what time. The leader's round (services/scheduler/readiness.py) applies all this; explain
and the API only read.

A partition no commit touched (an hour with no data) is *empty*: there is nothing for the
rule or the required kinds to look at. It becomes ready, "no data", when the writer posts a
heartbeat for it ("I ran for it and wrote nothing"), or under the watermark rule when the
watermark passes its end (every period of a time-based field between the earliest one
recorded and the watermark is looked at, at most MAX_EMPTY new ones a round). Without
either, `deadline_minutes` after its end it is *overdue*: not ready, "late: no data and no
heartbeat ...", and alerted (a broken pipeline, not an empty hour). A data commit into an
empty partition makes it a partition with data, judged by the rule (un-readied first if it
was ready).

Every format is read through a `TableLog`: Iceberg's snapshots (`IcebergLog`), Hudi's
timeline and Delta's log (`lakewarden.readiness_logs`); a ready partition is pinned at the
log's commit (`pin_of` says how a reader reads it: an Iceberg tag or snapshot, a Hudi
savepoint or instant, a Delta version).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import (
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    YearTransform,
)
from pyiceberg.types import DateType, IcebergType, TimestampType, TimestamptzType
from sqlalchemy import Select, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from lakewarden.db.models import PartitionReadiness, ReadinessCursor, Task, TaskTransition
from lakewarden.formats.iceberg import partitions as values
from lakewarden.formats.iceberg.table import open_table
from lakewarden.policy.model import ReadinessPolicy
from lakewarden.states import TaskState

# How many commits one round reads back from the current snapshot at most (the first round
# of a table, or after a rollback moved the cursor off the history).
MAX_WALK = 200
# How many empty periods one round records at most (the rest the next round).
MAX_EMPTY = 1000
# How many of a kind's latest finished tasks are asked whether they looked at a partition.
RECENT_TASKS = 20
READY_EVENT, UNREADY_EVENT = "partition_ready", "partition_unready"
_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class ReadinessProblem(ValueError):
    """The table cannot be judged as the policy asks (says what to fix)."""


# --- the partition field ------------------------------------------------------------


@dataclass(frozen=True)
class PartitionField:
    column: str
    source_id: int
    source_type: IcebergType
    transform: Transform[Any, Any]


_TRANSFORMS = (IdentityTransform, HourTransform, DayTransform, MonthTransform, YearTransform)


def partition_field(table: Table, column: str) -> PartitionField:
    """The field of the table's current spec that partitions by `column`, or why none can
    be judged: the column is missing, unpartitioned, or partitioned by bucket/truncate."""
    schema = table.schema()
    try:
        source = schema.find_field(column)
    except ValueError as exc:
        raise ReadinessProblem(f"readiness.partition: the table has no column {column!r}") from exc
    on_column = [f for f in table.spec().fields if f.source_id == source.field_id]
    usable = [f for f in on_column if isinstance(f.transform, _TRANSFORMS)]
    if not usable:
        how = ", ".join(str(f.transform) for f in on_column) or "not partitioned by it"
        raise ReadinessProblem(
            f"readiness.partition: column {column!r} must be a partition source with an "
            f"identity, hour, day, month or year transform; the table's spec has: {how}"
        )
    return PartitionField(column, source.field_id, source.field_type, usable[0].transform)


def time_based(field: PartitionField) -> bool:
    """Whether the field's partitions end in time (the watermark rule needs that)."""
    if isinstance(field.transform, IdentityTransform):
        return isinstance(field.source_type, DateType)
    return True


def policy_problem(table: Table | TableLog, policy: ReadinessPolicy) -> str | None:
    """What makes an enabled readiness section unusable on this table, or None."""
    if not policy.enabled or policy.partition is None:
        return None
    try:
        field = as_log(table).field(policy.partition)
    except ReadinessProblem as exc:
        return str(exc)
    if policy.rule == "watermark" and not time_based(field):
        return (
            f"readiness.rule watermark needs partitions that end in time: {field.column!r} is "
            f"partitioned by {field.transform} of a {field.source_type}; use a date or "
            'timestamp column (day/hour/month/year, or identity of a date), or rule "quiet"'
        )
    if policy.deadline_minutes is not None and not time_based(field):
        return (
            f"readiness.deadline_minutes needs partitions that end in time: {field.column!r} is "
            f"partitioned by {field.transform} of a {field.source_type}; use a date or "
            "timestamp column, or leave deadline_minutes unset"
        )
    return None


def partition_label(field: PartitionField, raw: Any) -> tuple[str, datetime | None]:
    """A partition value as people and tags name it, and when the partition ends in time:
    day 2026-11-23, hour 2026-11-23-05, month 2026-11, year 2026; identity values as they
    are (a date's end is the next day; other identity values have no end)."""
    if raw is None:
        return "null", None
    t = field.transform
    if isinstance(t, DayTransform) or (
        isinstance(t, IdentityTransform) and isinstance(field.source_type, DateType)
    ):
        day = raw if isinstance(raw, date) else values.day(int(raw))
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        return day.isoformat(), start + timedelta(days=1)
    if isinstance(t, HourTransform):
        start = values.hour_start(int(raw))
        return start.strftime("%Y-%m-%d-%H"), start + timedelta(hours=1)
    if isinstance(t, MonthTransform):
        start = values.month_start(int(raw))
        return f"{start.year:04d}-{start.month:02d}", values.month_start(int(raw) + 1)
    if isinstance(t, YearTransform):
        return f"{1970 + int(raw):04d}", values.year_start(int(raw) + 1)
    if isinstance(field.source_type, TimestampType | TimestamptzType) and isinstance(raw, int):
        raw = values.micros(raw)
    return (raw.isoformat() if isinstance(raw, datetime) else str(raw)), None


def _ordinal(field: PartitionField, at: datetime) -> int:
    """The number of the period of a time-based field that holds `at` (the raw partition
    value of its transform: hours, days, months or years since 1970)."""
    at = at.astimezone(UTC)
    t = field.transform
    if isinstance(t, HourTransform):
        return int((at - _EPOCH).total_seconds() // 3600)
    if isinstance(t, MonthTransform):
        return (at.year - 1970) * 12 + at.month - 1
    if isinstance(t, YearTransform):
        return at.year - 1970
    return (at.date() - _EPOCH.date()).days  # day, or identity of a date


def _period(field: PartitionField, ordinal: int) -> tuple[str, datetime]:
    """The label and end of a time-based field's period number `ordinal`."""
    raw: Any = ordinal
    if isinstance(field.transform, IdentityTransform):
        raw = values.day(ordinal)
    label, end = partition_label(field, raw)
    assert end is not None
    return label, end


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# How a period of each time transform is named, with an example (for a bad name's 422).
_FORMS = {
    HourTransform: ("YYYY-MM-DD-HH", "2026-11-23-05"),
    DayTransform: ("YYYY-MM-DD", "2026-11-23"),
    MonthTransform: ("YYYY-MM", "2026-11"),
    YearTransform: ("YYYY", "2026"),
}
_PATTERNS = {
    HourTransform: re.compile(r"(\d{4})-(\d{2})-(\d{2})-(\d{2})"),
    DayTransform: re.compile(r"(\d{4})-(\d{2})-(\d{2})"),
    MonthTransform: re.compile(r"(\d{4})-(\d{2})"),
    YearTransform: re.compile(r"(\d{4})"),
}


def parse_partition(field: PartitionField, text: str) -> tuple[str, datetime | None]:
    """A partition named as `partition_label` names it, checked against the field: (the
    label, its end). A name of another form (another granularity, not a date) raises
    ReadinessProblem saying the expected form, with an example. Identity values of other
    types are taken as they are (they have no end)."""
    if not time_based(field):
        if not text or len(text) > 255:
            raise ReadinessProblem("a partition is 1 to 255 characters")
        return text, None
    kind = DayTransform if isinstance(field.transform, IdentityTransform) else type(field.transform)
    form, example = _FORMS[kind]
    match = _PATTERNS[kind].fullmatch(text)
    wrong = ReadinessProblem(
        f"partition {text[:40]!r} is not a period of {field.column!r} (partitioned by "
        f"{field.transform}): name it {form}, e.g. {example}"
    )
    if match is None:
        raise wrong
    parts = [int(g) for g in match.groups()] + [1, 1, 0][len(match.groups()) - 1 :]
    try:
        start = datetime(parts[0], parts[1], parts[2], parts[3], tzinfo=UTC)
        return _period(field, _ordinal(field, start))
    except (ValueError, OverflowError):  # no such day or hour; past year 9999
        raise wrong from None


@dataclass(frozen=True)
class EmptyPeriods:
    """The periods of a time-based field no recorded partition names: (label, end) each,
    oldest first, and how many more there were past the cap."""

    periods: list[tuple[str, datetime]]
    more: int = 0


def empty_periods(
    field: PartitionField,
    recorded_ends: Iterable[datetime],
    until: datetime,
    limit: int = MAX_EMPTY,
) -> EmptyPeriods:
    """The periods from the earliest recorded one up to the last ending at or before
    `until` that no recorded partition (by its end) is: at most `limit`, oldest first."""
    ends = {_ordinal(field, end) - 1 for end in recorded_ends}
    if not ends:
        return EmptyPeriods([])
    first, stop = min(ends), _ordinal(field, until)  # the periods before `stop` have ended
    out: list[tuple[str, datetime]] = []
    ordinal = first
    while ordinal < stop and len(out) < limit:
        if ordinal not in ends:
            out.append(_period(field, ordinal))
        ordinal += 1
    more = (stop - ordinal) - sum(1 for o in ends if ordinal <= o < stop) if ordinal < stop else 0
    return EmptyPeriods(out, max(more, 0))


def next_deadline(field: PartitionField, deadline: timedelta, now: datetime) -> datetime:
    """When the next period of a time-based field becomes overdue: the first one whose end
    plus `deadline` is after `now`."""
    _, end = _period(field, _ordinal(field, now - deadline))
    return end + deadline


@dataclass(frozen=True)
class Pin:
    """How a reader reads a ready partition as it was when it became ready."""

    format: str
    kind: str  # tag | snapshot (Iceberg), version (Delta), savepoint | instant (Hudi)
    commit: str  # the snapshot id, Delta version or Hudi instant, as text
    read: str  # how a reader pins it


def pin_of(table_format: str, commit: int | None, tag: str | None, location: str) -> Pin | None:
    """The pin of a partition made ready at `commit` (its `tag`: Iceberg's tag, or the
    Hudi savepoint made of it), read at `location` (the table's name or path)."""
    if commit is None:
        return None
    if table_format == "delta":
        return Pin(
            "delta",
            "version",
            str(commit),
            f"SELECT * FROM delta.`{location}` VERSION AS OF {commit}; "
            f"deltalake.DeltaTable('{location}', version={commit})",
        )
    if table_format == "hudi":
        return Pin(
            "hudi",
            "savepoint" if tag else "instant",
            str(commit),
            f"spark.read.format('hudi').option('as.of.instant', '{commit}').load('{location}'); "
            f"SELECT * FROM <table> TIMESTAMP AS OF '{commit}'",
        )
    if tag:
        return Pin("iceberg", "tag", str(commit), f"SELECT * FROM {location} VERSION AS OF '{tag}'")
    return Pin(
        "iceberg", "snapshot", str(commit), f"SELECT * FROM {location} VERSION AS OF {commit}"
    )


def tag_name(partition: str) -> str:
    """`ready-<partition>`, with anything but letters, digits, `_` and `-` as `_`."""
    return "ready-" + _TAG_UNSAFE.sub("_", partition)[:200]


# --- commits and the partitions they touched ---------------------------------------------


@dataclass(frozen=True)
class Commit:
    snapshot_id: int
    at: datetime
    sequence_number: int | None = None  # None: its snapshot is no longer in the metadata

    @classmethod
    def of(cls, snapshot: Snapshot) -> Commit:
        at = datetime.fromtimestamp(snapshot.timestamp_ms / 1000, tz=UTC)
        return cls(snapshot.snapshot_id, at, snapshot.sequence_number)

    @classmethod
    def stored(cls, table: TableLog, snapshot_id: int, at: datetime) -> Commit:
        return cls(snapshot_id, at, table.sequence_of(snapshot_id))


def is_data_commit(snapshot: Snapshot) -> bool:
    """Every commit but a rewrite (`replace`: the same rows in other files)."""
    operation = snapshot.summary.operation.value if snapshot.summary else None
    return operation != "replace"


def commits_after(table: Table, after_snapshot_id: int | None) -> list[Snapshot]:
    """The current branch's commits newer than `after_snapshot_id`, oldest first. After a
    rollback the cursor is off main's history: the commits after the point where the two
    histories part, not main's whole past read again as new (which made every ready
    partition flap). At most MAX_WALK (also when the cursor's snapshot has expired)."""
    cursor = None if after_snapshot_id is None else str(after_snapshot_id)
    page = open_table(table).timeline().since(cursor, MAX_WALK)
    return [commit.native for commit in page.commits]


def touched_partitions(
    table: Table, snapshot: Snapshot, field: PartitionField
) -> dict[str, tuple[Any, datetime | None]]:
    """The partitions of `field` whose files `snapshot` added or removed (data and delete
    files; read from the manifests it wrote): label -> (raw value, end). Files of a spec
    without the field are not counted (they belong to no partition of it)."""
    positions: dict[int, int | None] = {}
    for spec_id, spec in table.specs().items():
        positions[spec_id] = next(
            (
                i
                for i, f in enumerate(spec.fields)
                if f.source_id == field.source_id and f.transform == field.transform
            ),
            None,
        )
    out: dict[str, tuple[Any, datetime | None]] = {}
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue  # carried over unchanged from an earlier commit
        at = positions.get(manifest.partition_spec_id)
        if at is None:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.status == ManifestEntryStatus.EXISTING:
                continue
            if entry.snapshot_id not in (None, snapshot.snapshot_id):
                continue
            raw = entry.data_file.partition[at]
            label, end = partition_label(field, raw)
            out[label] = (raw, end)
    return out


# --- a table's log, whatever its format ---------------------------------------------------


@dataclass(frozen=True)
class DataCommit:
    """A commit that changed data, and the partitions of the field it touched: label ->
    (raw value, end)."""

    commit: Commit
    touched: dict[str, tuple[Any, datetime | None]]


@runtime_checkable
class TableLog(Protocol):
    """What readiness reads of a table: its partition field, its data commits from a
    cursor, the order of a stored commit, and the commit a partition ready now is pinned
    at. A commit id is an int here (an Iceberg snapshot id, a Hudi instant time, a Delta
    version: what `partition_readiness.snapshot_id` stores). Iceberg's is `IcebergLog`;
    Hudi's and Delta's are in `lakewarden.readiness_logs`."""

    @property
    def format(self) -> str: ...

    def field(self, column: str) -> PartitionField:
        """The partition field of `column`, or ReadinessProblem saying why none."""
        ...

    def data_commits_after(self, cursor: int | None, field: PartitionField) -> list[DataCommit]:
        """The data commits after `cursor`, oldest first (at most MAX_WALK commits read)."""
        ...

    def sequence_of(self, commit_id: int) -> int | None:
        """The commit's place in the table's order (None: no longer in the log)."""
        ...

    def pin(self) -> int | None:
        """The commit a partition becoming ready now is pinned at (None: no commit yet)."""
        ...


class IcebergLog:
    """An Iceberg table's snapshots (pyiceberg) as readiness reads them."""

    format = "iceberg"

    def __init__(self, table: Table) -> None:
        self.table = table

    def field(self, column: str) -> PartitionField:
        return partition_field(self.table, column)

    def data_commits_after(self, cursor: int | None, field: PartitionField) -> list[DataCommit]:
        return [
            DataCommit(Commit.of(s), touched_partitions(self.table, s, field))
            for s in commits_after(self.table, cursor)
            if is_data_commit(s)
        ]

    def sequence_of(self, commit_id: int) -> int | None:
        snapshot = self.table.metadata.snapshot_by_id(commit_id)
        return snapshot.sequence_number if snapshot else None

    def pin(self) -> int | None:
        current = self.table.current_snapshot()
        return current.snapshot_id if current else None


def as_log(table: Table | TableLog) -> TableLog:
    """A log as it is; a pyiceberg table as its `IcebergLog`."""
    return table if isinstance(table, TableLog) else IcebergLog(table)


# --- the rule (pure) -----------------------------------------------------------------


@dataclass(frozen=True)
class PartitionFacts:
    partition: str
    end: datetime | None
    last_commit: Commit
    # The required kinds that have not looked at it since its last commit.
    missing_kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Judgement:
    ready: bool
    complete: bool
    reason: str
    # What it still waits for, each said in words (empty when ready).
    waiting_for: tuple[str, ...]
    missing_kinds: tuple[str, ...] = ()  # the required kinds among them


def judge(
    policy: ReadinessPolicy, facts: PartitionFacts, watermark: datetime | None, now: datetime
) -> Judgement:
    """Whether the partition is ready now under `policy`, and why (or what it waits for)."""
    complete, why = _completeness(policy, facts, watermark, now)
    waiting = [] if complete else [why]
    waiting += [
        f"{kind} to run on it since its last commit {facts.last_commit.snapshot_id}"
        for kind in facts.missing_kinds
    ]
    if waiting:
        reason = "waiting for " + "; ".join(waiting)
        return Judgement(False, complete, reason, tuple(waiting), facts.missing_kinds)
    kinds = f"; {', '.join(policy.require)} ran on it since" if policy.require else ""
    return Judgement(True, True, why + kinds, ())


def _completeness(
    policy: ReadinessPolicy, facts: PartitionFacts, watermark: datetime | None, now: datetime
) -> tuple[bool, str]:
    last = facts.last_commit
    if policy.rule == "watermark":
        if facts.end is None:
            return False, f"an end in time: partition {facts.partition} has none (watermark rule)"
        if watermark is None:
            return False, f"a watermark at or past {facts.end.isoformat()}: none posted yet"
        if watermark < facts.end:
            return False, (
                f"the watermark to reach {facts.end.isoformat()} (the partition's end): it is "
                f"at {watermark.isoformat()}"
            )
        return True, (
            f"complete: watermark {watermark.isoformat()} >= its end {facts.end.isoformat()}"
        )
    quiet = timedelta(minutes=policy.quiet_minutes)
    start = max(last.at, facts.end) if facts.end is not None else last.at
    since = "its last commit" if start == last.at else "its end"
    due = start + quiet
    if now < due:
        left = (due - now).total_seconds() / 60
        return False, (
            f"{left:.1f} min more quiet (until {due.isoformat()}: {policy.quiet_minutes:g} min "
            f"after {since})"
        )
    return True, (
        f"complete: no commit touched it for {policy.quiet_minutes:g} min after {since} "
        f"(last commit {last.snapshot_id} at {last.at.isoformat()})"
    )


@dataclass(frozen=True)
class Heartbeat:
    """The writer's word that it ran for a partition and wrote nothing."""

    at: datetime
    by: str


def judge_empty(
    policy: ReadinessPolicy,
    partition: str,
    end: datetime | None,
    heartbeat: Heartbeat | None,
    watermark: datetime | None,
    now: datetime,
) -> tuple[Judgement, bool]:
    """Whether a partition no commit touched is ready now, and whether it is overdue: ready
    "no data" on the writer's heartbeat, or when the watermark (rule `watermark`) passed its
    end; overdue `deadline_minutes` after its end without either. There is no data for the
    required kinds to look at."""
    if heartbeat is not None:
        why = f"no data: writer heartbeat at {heartbeat.at.isoformat()} by {heartbeat.by}"
        return Judgement(True, True, why, ()), False
    passed = end is not None and watermark is not None and watermark >= end
    if policy.rule == "watermark" and passed:
        assert end is not None and watermark is not None
        why = (
            f"no data: the watermark {watermark.isoformat()} passed its end "
            f"{end.isoformat()} and no commit touched it"
        )
        return Judgement(True, True, why, ()), False
    if end is not None and policy.deadline_minutes is not None:
        due = end + timedelta(minutes=policy.deadline_minutes)
        if now >= due:
            why = (
                f"late: no data and no heartbeat {policy.deadline_minutes:g} min after its end "
                f"{end.isoformat()} (due {due.isoformat()}): check the writer, or post a "
                "heartbeat if it ran and had nothing to write"
            )
            return Judgement(False, False, why, (why,)), True
    waits = "data, or the writer's heartbeat"
    if policy.rule == "watermark":
        waits += ", or the watermark to pass its end"
    return Judgement(False, False, f"waiting for {waits}", (waits,)), False


# --- have the required kinds looked at it? -------------------------------------------


@dataclass(frozen=True)
class Look:
    """A finished task of a required kind: what it saw, and what it failed to rewrite."""

    kind: str
    task_id: int
    planned_on: int | None  # the snapshot its plan was made on (succeeded tasks)
    planned_at: datetime | None  # when its planning started
    failed_values: tuple[Any, ...]  # each failed file group's partition values


def recent_looks(session: Session, table_id: int, kinds: Sequence[str]) -> list[Look]:
    """The latest finished (succeeded or skipped) tasks of `kinds` on the table."""
    if not kinds:
        return []
    planned_at = (
        select(func.max(TaskTransition.at))
        .where(TaskTransition.task_id == Task.id, TaskTransition.to_state == TaskState.PLANNING)
        .scalar_subquery()
    )
    looks: list[Look] = []
    for kind in kinds:
        rows = session.execute(
            select(Task.id, Task.plan, Task.result, planned_at.label("planned_at"))
            .where(
                Task.table_id == table_id,
                Task.kind == kind,
                Task.state.in_([TaskState.SUCCEEDED, TaskState.SKIPPED]),
            )
            .order_by(Task.id.desc())
            .limit(RECENT_TASKS)
        )
        for task_id, plan, result, at in rows:
            failed = (result or {}).get("failed_partitions") or []
            looks.append(
                Look(
                    kind,
                    task_id,
                    _planned_on(plan or {}),
                    at,
                    tuple(v for p in failed if isinstance(p, dict) for v in p.values()),
                )
            )
    return looks


def _planned_on(plan: dict[str, Any]) -> int | None:
    """The commit a plan was made on: an Iceberg plan's snapshot, a Delta plan's version."""
    for key in ("snapshot_id", "version"):
        if isinstance(plan.get(key), int):
            return int(plan[key])
    return None


def missing_kinds(
    table: TableLog,
    field: PartitionField,
    required: Iterable[str],
    looks: Sequence[Look],
    partition: str,
    last_commit: Commit,
) -> tuple[str, ...]:
    """The required kinds none of whose tasks looked at the partition since `last_commit`:
    planned on it or a later snapshot (by sequence number; by planning time when a snapshot
    is gone or the task was skipped), and the partition not among its failed file groups."""
    return tuple(
        kind
        for kind in required
        if not any(
            look.kind == kind
            and _saw(table, look, last_commit)
            and not _failed(field, look, partition)
            for look in looks
        )
    )


def _saw(table: TableLog, look: Look, commit: Commit) -> bool:
    if look.planned_on is not None and commit.sequence_number is not None:
        planned = table.sequence_of(look.planned_on)
        if planned is not None:
            return planned >= commit.sequence_number
    return look.planned_at is not None and look.planned_at >= commit.at


def _failed(field: PartitionField, look: Look, partition: str) -> bool:
    for value in look.failed_values:
        try:
            if partition_label(field, value)[0] == partition:
                return True
        except (TypeError, ValueError, OverflowError):  # a value of another field
            continue
    return False


# --- stored state -----------------------------------------------------------------------


def cursor_of(session: Session, table_id: int) -> ReadinessCursor | None:
    return session.get(ReadinessCursor, table_id)


def partitions_query(
    table_id: int, column: str, ready: bool | None = None
) -> Select[PartitionReadiness]:
    """The table's recorded partitions of `column`: ready, not ready, or both (None)."""
    query = select(PartitionReadiness).where(
        PartitionReadiness.table_id == table_id, PartitionReadiness.column == column
    )
    return query if ready is None else query.where(PartitionReadiness.ready.is_(ready))


def partitions(session: Session, table_id: int, column: str) -> list[PartitionReadiness]:
    return list(session.scalars(partitions_query(table_id, column)))


def post_watermark(
    session: Session, table_id: int, watermark: datetime, by: str
) -> tuple[bool, datetime | None]:
    """Move the table's watermark forward to `watermark` (the same value again succeeds).
    Returns (stored, the watermark now): not stored when the stored one is later (a
    watermark never goes back: what it declared complete stays complete)."""
    stmt = (
        pg_insert(ReadinessCursor)
        .values(table_id=table_id, watermark=watermark, watermark_by=by, watermark_at=func.now())
        .on_conflict_do_update(
            index_elements=[ReadinessCursor.table_id],
            set_={"watermark": watermark, "watermark_by": by, "watermark_at": func.now()},
            where=ReadinessCursor.watermark.is_(None) | (ReadinessCursor.watermark <= watermark),
        )
        .returning(ReadinessCursor.watermark)
    )
    moved = session.execute(stmt).scalar_one_or_none()
    if moved is not None:
        return True, moved
    return False, session.scalar(
        select(ReadinessCursor.watermark).where(ReadinessCursor.table_id == table_id)
    )


@dataclass(frozen=True)
class HeartbeatRecorded:
    at: datetime
    last_commit_snapshot_id: int | None  # None: no commit touched it
    last_commit_at: datetime | None
    ready: bool


def post_heartbeat(
    session: Session,
    table_id: int,
    column: str,
    partition: str,
    end: datetime | None,
    by: str,
) -> HeartbeatRecorded:
    """Record the writer's heartbeat for a partition ("I ran for it and wrote nothing"):
    a partition no commit touched becomes ready, no data, in the leader's next round; one
    with data keeps its rule (the heartbeat is recorded and changes nothing)."""
    beat = {"heartbeat_at": func.now(), "heartbeat_by": by, "updated_at": func.now()}
    row = session.execute(
        pg_insert(PartitionReadiness)
        .values(
            table_id=table_id,
            column=column,
            partition=partition,
            partition_end=end,
            reason="no data: a writer heartbeat; ready in the leader's next round",
            **beat,
        )
        .on_conflict_do_update(index_elements=["table_id", "column", "partition"], set_=beat)
        .returning(
            PartitionReadiness.heartbeat_at,
            PartitionReadiness.last_commit_snapshot_id,
            PartitionReadiness.last_commit_at,
            PartitionReadiness.ready,
        )
    ).one()
    at, snapshot_id, commit_at, ready = row
    assert at is not None  # just set
    return HeartbeatRecorded(at, snapshot_id, commit_at, ready)


# --- one table, assessed ------------------------------------------------------------------


@dataclass(frozen=True)
class Assessed:
    """A partition after the table's unread commits, judged."""

    partition: str
    end: datetime | None
    last_commit: Commit | None  # None: no commit touched it (empty)
    was_ready: bool
    # Why a commit since the last round un-readied it (it was ready and a commit touched it).
    late: str | None
    judgement: Judgement
    # Empty and past its deadline with no heartbeat (judge_empty): alerted.
    overdue: bool = False

    @property
    def becomes_ready(self) -> bool:
        """Judged ready, and not ready now (or un-readied by a late commit this round)."""
        return self.judgement.ready and (not self.was_ready or self.late is not None)


@dataclass(frozen=True)
class Assessment:
    field: PartitionField
    # The commit a partition ready now is pinned at (`TableLog.pin`): Iceberg's current
    # snapshot (tagged on), Delta's newest version, Hudi's newest write instant.
    snapshot_id: int | None
    watermark: datetime | None
    partitions: list[Assessed]
    # When the next round must look for empty periods even if nothing else changed.
    empty_due_at: datetime | None = None
    format: str = "iceberg"  # how `snapshot_id` pins a ready partition (`pin_of`)

    def becoming_ready(self) -> list[Assessed]:
        return [p for p in self.partitions if p.becomes_ready]


@dataclass(frozen=True)
class StoredPartition:
    ready: bool
    end: datetime | None
    last_commit_snapshot_id: int | None  # None: no commit touched it (empty)
    last_commit_at: datetime | None
    heartbeat: Heartbeat | None = None


@dataclass(frozen=True)
class Recorded:
    """What the database holds of a table's readiness: read first, in a short transaction,
    so that reading the table (catalog, manifests) holds no transaction open."""

    scanned_snapshot_id: int | None
    watermark: datetime | None
    partitions: dict[str, StoredPartition]
    looks: list[Look]


def _heartbeat(row: PartitionReadiness) -> Heartbeat | None:
    if row.heartbeat_at is None:
        return None
    return Heartbeat(row.heartbeat_at, row.heartbeat_by or "unknown")


def recorded(session: Session, table_id: int, policy: ReadinessPolicy) -> Recorded:
    cursor = cursor_of(session, table_id)
    rows = partitions(session, table_id, policy.partition) if policy.partition else []
    same_column = cursor is not None and cursor.scanned_column == policy.partition
    return Recorded(
        cursor.scanned_snapshot_id if cursor and same_column else None,
        cursor.watermark if cursor else None,
        {
            r.partition: StoredPartition(
                r.ready,
                r.partition_end,
                r.last_commit_snapshot_id,
                r.last_commit_at,
                _heartbeat(r),
            )
            for r in rows
        },
        recent_looks(session, table_id, policy.require),
    )


def assess(
    known: Recorded, table: Table | TableLog, policy: ReadinessPolicy, now: datetime
) -> Assessment:
    """Read the table's commits since the last round, and judge every partition that is not
    ready after them (no database access: `known` was read before). The leader's round
    stores the result; explain shows it."""
    if policy.partition is None:
        raise ReadinessProblem("readiness.partition is not set")
    table = as_log(table)
    field = table.field(policy.partition)
    touched: dict[str, tuple[datetime | None, Commit]] = {}
    for data in table.data_commits_after(known.scanned_snapshot_id, field):
        for label, (_, end) in data.touched.items():
            touched[label] = (end, data.commit)
    empty, due, capped = _empty(field, known, touched, policy, now)
    out: list[Assessed] = []
    for label in sorted(set(known.partitions) | set(touched) | set(empty)):
        row = known.partitions.get(label)
        was_ready = row is not None and row.ready
        late = None
        if label in touched:
            end, commit = touched[label]
            if was_ready:
                late = (
                    f"late commit {commit.snapshot_id} at {commit.at.isoformat()} touched "
                    f"partition {label}"
                )
        elif row is not None and row.ready:
            continue  # ready, and no commit touched it since: nothing to judge
        elif row is None or row.last_commit_snapshot_id is None or row.last_commit_at is None:
            end = row.end if row is not None else empty[label]
            heartbeat = row.heartbeat if row is not None else None
            judged, overdue = judge_empty(policy, label, end, heartbeat, known.watermark, now)
            if row is None and capped is not None:
                judged = replace(judged, reason=f"{judged.reason} ({capped})")
            out.append(Assessed(label, end, None, False, None, judged, overdue))
            continue
        else:
            end = row.end
            commit = Commit.stored(table, row.last_commit_snapshot_id, row.last_commit_at)
        missing = missing_kinds(table, field, policy.require, known.looks, label, commit)
        judgement = judge(policy, PartitionFacts(label, end, commit, missing), known.watermark, now)
        out.append(Assessed(label, end, commit, was_ready, late, judgement))
    return Assessment(field, table.pin(), known.watermark, out, due, table.format)


def _empty(
    field: PartitionField,
    known: Recorded,
    touched: dict[str, tuple[datetime | None, Commit]],
    policy: ReadinessPolicy,
    now: datetime,
) -> tuple[dict[str, datetime], datetime | None, str | None]:
    """The periods no partition recorded or touched names that have something to say: under
    the watermark rule those it passed (ready, no data), with a deadline those past it
    (overdue); label -> end. And when the next round must look again although nothing else
    changed (the next period's deadline; at once when this round stopped at MAX_EMPTY), and
    what to say of the cap when it did."""
    if not time_based(field):
        return {}, None, None
    until = []
    if policy.rule == "watermark" and known.watermark is not None:
        until.append(min(known.watermark, now))
    deadline = None
    if policy.deadline_minutes is not None:
        deadline = timedelta(minutes=policy.deadline_minutes)
        until.append(now - deadline)
    if not until:
        return {}, None, None
    ends = [p.end for p in known.partitions.values() if p.end is not None]
    ends += [end for end, _ in touched.values() if end is not None]
    found = empty_periods(field, ends, max(until), MAX_EMPTY)
    due = next_deadline(field, deadline, now) if deadline is not None else None
    capped = None
    if found.more:
        due = now
        capped = (
            f"this round recorded the first {len(found.periods)} empty periods; "
            f"{found.more} more follow in the next rounds"
        )
    return {label: end for label, end in found.periods if label not in touched}, due, capped


def explain_readiness(
    session: Session, table_id: int, table: Table | TableLog, policy: ReadinessPolicy, now: datetime
) -> dict[str, Any]:
    """explain's `readiness` entry: which partitions would become ready now and why, and
    what the others wait for (quiet time left, the watermark, a required kind)."""
    section = {
        "enabled": policy.enabled,
        "partition": policy.partition,
        "rule": policy.rule,
        "require": list(policy.require),
    }
    if not policy.enabled:
        return {**section, "summary": "readiness is disabled by policy", "partitions": []}
    try:
        found = assess(recorded(session, table_id, policy), table, policy, now)
    except ReadinessProblem as exc:
        return {**section, "summary": f"cannot judge: {exc}", "partitions": []}
    items = []
    for p in found.partitions:
        items.append(
            {
                "partition": p.partition,
                "ready": p.was_ready and p.late is None,
                "would_become_ready": p.becomes_ready,
                "would_become_unready": p.late is not None and not p.judgement.ready,
                "reason": (f"{p.late}; " if p.late else "") + p.judgement.reason,
                "waiting_for": list(p.judgement.waiting_for),
                "last_commit_snapshot_id": p.last_commit.snapshot_id if p.last_commit else None,
                "last_commit_at": p.last_commit.at if p.last_commit else None,
                "no_data": p.last_commit is None,
                "overdue": p.overdue,
            }
        )
    ready = [str(i["partition"]) for i in items if i["would_become_ready"]]
    waiting = [str(i["partition"]) for i in items if not i["would_become_ready"]]
    summary = "no partition would become ready now"
    if ready:
        summary = f"would become ready now: {', '.join(ready)}"
    if waiting:
        summary += f"; {len(waiting)} not ready: {', '.join(waiting[:10])}"
    return {**section, "watermark": found.watermark, "summary": summary, "partitions": items}
