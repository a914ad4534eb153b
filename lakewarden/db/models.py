"""SQLAlchemy models: the control plane's whole state.

The schema itself is owned by Alembic (`migrations/`); a test checks the two agree.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from lakewarden.states import (
    OPEN_TASK_STATES,
    WAITING_TASK_STATES,
    AlertState,
    CatalogType,
    RunMode,
    RunState,
    TableFormatName,
    TaskState,
    sql_in,
)

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _one_of(column: str, states: type[StrEnum]) -> CheckConstraint:
    """CHECK that `column` holds one of `states` (named ck_<table>_<column>)."""
    return CheckConstraint(sql_in(column, states), name=column)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSONB, datetime: DateTime(timezone=True)}


class ManagedTable(Base):
    """An Iceberg table lakewarden looks after, with its current policy."""

    __tablename__ = "managed_tables"
    __table_args__ = (
        UniqueConstraint("catalog", "namespace", "name"),
        _one_of("format", TableFormatName),
        # The fleet list sorted worst health first (GET /api/v1/tables?sort=health).
        Index(
            "ix_managed_tables_live_health",
            "health_score",
            "id",
            postgresql_where=text("retired_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    catalog: Mapped[str] = mapped_column(String(255))
    namespace: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    policy: Mapped[dict[str, Any]]
    policy_version: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    # Its table format (lakewarden.formats): "iceberg", "hudi" or "delta".
    format: Mapped[str] = mapped_column(String(16), server_default=text("'iceberg'"))
    # The catalog's metadata pointer last ingested; the poller compares against it.
    metadata_location: Mapped[str | None] = mapped_column(Text)
    # A REST catalog's ETag for the load that saw that pointer (lakewarden.catalogs.rest_loads).
    catalog_etag: Mapped[str | None] = mapped_column(Text)
    current_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    # Health as the leader last measured it, and since when it is below the SLO.
    health_score: Mapped[int | None] = mapped_column(Integer)
    health_measured_at: Mapped[datetime | None]
    unhealthy_since: Mapped[datetime | None]
    # The signals that fired at that measurement (health.model.Signal as dicts): [] none
    # fired, NULL not measured. Written and cleared together with health_score.
    health_signals: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(server_default=func.now())
    # Unregistered: no longer managed, its history kept; registering again continues it.
    retired_at: Mapped[datetime | None]
    # Why it is retired: unregistered, dropped from the catalog, opted out, or maintained
    # by another optimizer (lakewarden.catalogs.foreign).
    retired_reason: Mapped[str | None] = mapped_column(Text)
    # How it came to be managed: "api" (registered) or "rule:<id>" (a management rule).
    managed_by: Mapped[str] = mapped_column(String(64), server_default=text("'api'"))
    # The owner opted it out: no management rule picks it up again until this is cleared.
    opt_out: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    # The metadata pointer health was last measured at (a moved one is measured first).
    health_metadata_location: Mapped[str | None] = mapped_column(Text)


class Catalog(Base):
    """An Iceberg catalog registered through the API (the settings-configured one is the
    default entry and has no row: lakewarden.catalogs). `properties` are pyiceberg's own
    catalog properties; a secret is stored only as a reference ({"env": NAME} or
    {"file": PATH}), resolved when the catalog is loaded, never echoed back."""

    __tablename__ = "catalogs"
    __table_args__ = (_one_of("type", CatalogType),)

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    type: Mapped[str] = mapped_column(String(16))
    properties: Mapped[dict[str, Any]]
    poll_interval_s: Mapped[float] = mapped_column(Float, server_default=text("30"))
    poll_concurrency: Mapped[int] = mapped_column(Integer, server_default=text("4"))
    # The region whose scheduler leader runs this catalog's tables (lakewarden.catalogs.regions).
    region: Mapped[str] = mapped_column(String(32), server_default=text("'default'"))
    # Bumped on every change: processes reload a catalog whose version moved.
    version: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    created_by: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(server_default=func.now())


class CatalogPoll(Base):
    """When a catalog is next due for a poll, and how the last one went. A replica polls a
    catalog only when it wins the due time (`lakewarden.events.poller`), so each catalog
    is polled once per interval however many API replicas run."""

    __tablename__ = "catalog_polls"

    catalog: Mapped[str] = mapped_column(String(128), primary_key=True)
    due_at: Mapped[datetime] = mapped_column(server_default=func.now())
    polled_by: Mapped[str | None] = mapped_column(String(255))
    polled_at: Mapped[datetime | None]
    duration_ms: Mapped[int | None] = mapped_column(BigInteger)
    tables_seen: Mapped[int | None] = mapped_column(Integer)
    tables_refreshed: Mapped[int | None] = mapped_column(Integer)
    catalog_requests: Mapped[int | None] = mapped_column(Integer)
    # Whether commits of this JDBC catalog are heard through the NOTIFY trigger (None: REST).
    commit_trigger: Mapped[bool | None] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text)
    # A Hive catalog: the last event of its metastore's notification log followed, and when
    # the log is next due (one replica follows it: lakewarden.events.metastore).
    notification_id: Mapped[int | None] = mapped_column(BigInteger)
    notifications_due_at: Mapped[datetime | None]


class ManagementRule(Base):
    """Auto-management: every table of `catalog` whose namespace matches the `namespace`
    glob and whose name matches an `include` glob and no `exclude` glob is managed with
    `policy` (over the namespace defaults), unless it opted out or another optimizer
    maintains it."""

    __tablename__ = "management_rules"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    catalog: Mapped[str] = mapped_column(String(128), index=True)
    namespace: Mapped[str] = mapped_column(String(255), server_default=text("'*'"))
    include: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[\"*\"]'::jsonb"))
    exclude: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
    policy: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    enabled: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    created_by: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(server_default=func.now())


class PolicyVersion(Base):
    """Every policy a table has had, so a change can be traced and undone."""

    __tablename__ = "policy_versions"

    table_id: Mapped[int] = mapped_column(
        ForeignKey("managed_tables.id", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    policy: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    author: Mapped[str | None] = mapped_column(String(255))  # who set it (the caller)


class TimelineEvent(Base):
    """One commit of a managed table. Unique per (table, commit): an Iceberg snapshot's
    id in `snapshot_id` (bigint, as every Iceberg query reads it), another format's commit
    id (a Hudi instant) in `commit_id` (text); exactly one of the two. `commit` is the
    seam's string id either way."""

    __tablename__ = "timeline_events"
    __table_args__ = (
        UniqueConstraint("table_id", "snapshot_id"),
        UniqueConstraint("table_id", "commit_id"),
        CheckConstraint("(snapshot_id IS NULL) <> (commit_id IS NULL)", name="one_commit_id"),
        # A table's newest event and commit cursor, found by a probe (lakewarden.history).
        Index("ix_timeline_events_table_newest", "table_id", "id"),
        Index("ix_timeline_events_table_sequence", "table_id", "sequence_number"),
        Index("ix_timeline_events_table_received", "table_id", "received_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    table_id: Mapped[int] = mapped_column(
        ForeignKey("managed_tables.id", ondelete="CASCADE"), index=True
    )
    # Non-null for an Iceberg table's event (the typing keeps today's Iceberg code exact).
    snapshot_id: Mapped[int] = mapped_column(BigInteger, nullable=True)
    commit_id: Mapped[str | None] = mapped_column(Text)
    parent_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    sequence_number: Mapped[int | None] = mapped_column(BigInteger)
    operation: Mapped[str | None] = mapped_column(String(32))
    summary: Mapped[dict[str, Any]]
    metadata_location: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(16))  # notify | webhook | poll | register
    committed_at: Mapped[datetime | None]
    received_at: Mapped[datetime] = mapped_column(server_default=func.now())
    # What policy evaluation made of this event: "task:<id>", "no-action", ...
    decision: Mapped[str | None] = mapped_column(String(32))
    decision_detail: Mapped[dict[str, Any] | None]
    # Commits before this one that were never read (lakewarden.events.ingest.gap_before).
    gap_before: Mapped[dict[str, Any] | None]

    @property
    def commit(self) -> str:
        """The commit id as the format seam spells it (lakewarden.formats.base.CommitId)."""
        return self.commit_id if self.commit_id is not None else str(self.snapshot_id)


class Task(Base):
    """One maintenance action on one table, from birth to a terminal state."""

    __tablename__ = "tasks"
    __table_args__ = (
        # At most one open task per (table, kind): the idempotency key of task creation.
        Index(
            "uq_tasks_open_table_kind",
            "table_id",
            "kind",
            unique=True,
            postgresql_where=text(sql_in("state", OPEN_TASK_STATES)),
        ),
        # The claimable rows, for the workers' SKIP LOCKED claim.
        Index(
            "ix_tasks_claimable",
            "priority",
            "id",
            postgresql_where=text(sql_in("state", WAITING_TASK_STATES)),
        ),
        Index("ix_tasks_state", "state"),
        # A table's newest task of a kind, found by a probe (lakewarden.history).
        Index("ix_tasks_table_kind", "table_id", "kind", "id"),
        # Each table's last success per kind, newest first (last_success_by_kind).
        Index(
            "ix_tasks_last_success",
            "table_id",
            "kind",
            "updated_at",
            postgresql_where=text(sql_in("state", TaskState.SUCCEEDED)),
        ),
        _one_of("state", TaskState),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    table_id: Mapped[int] = mapped_column(
        ForeignKey("managed_tables.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16))  # a TaskState
    priority: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    pool: Mapped[str] = mapped_column(String(64), server_default=text("'default'"))
    # Why it exists: the event or request that made it and the numbers that crossed.
    trigger: Mapped[dict[str, Any]]
    plan: Mapped[dict[str, Any] | None]
    result: Mapped[dict[str, Any] | None]
    reason: Mapped[str | None] = mapped_column(Text)  # skip/failure/cancel reason
    attempt: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    max_attempts: Mapped[int] = mapped_column(Integer, server_default=text("3"))
    not_before: Mapped[datetime] = mapped_column(server_default=func.now())
    holder: Mapped[str | None] = mapped_column(String(255))
    heartbeat_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(server_default=func.now())
    # Its table's TableFilesAdded.added as it was created (set by a trigger, migration
    # 0034): the files added since are the sum now less this. None before that migration.
    files_added_mark: Mapped[int | None] = mapped_column(BigInteger)


class TaskTransition(Base):
    """The full state history of a task: every guarded transition appends a row."""

    __tablename__ = "task_transitions"
    __table_args__ = (_one_of("from_state", TaskState), _one_of("to_state", TaskState))

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(255))
    reason: Mapped[str | None] = mapped_column(Text)
    leader_epoch: Mapped[int | None] = mapped_column(BigInteger)
    at: Mapped[datetime] = mapped_column(server_default=func.now())


class JobRun(Base):
    """One attempt at executing a planned task on Spark."""

    __tablename__ = "job_runs"
    __table_args__ = (
        UniqueConstraint("task_id", "attempt"),
        # The runs running now (/metrics's gauge), apart from the history.
        Index(
            "ix_job_runs_running",
            "task_id",
            postgresql_where=text(sql_in("state", RunState.RUNNING)),
        ),
        _one_of("state", RunState),
        _one_of("mode", RunMode),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))  # a RunState
    scheduler_id: Mapped[str] = mapped_column(String(255))
    leader_epoch: Mapped[int] = mapped_column(BigInteger)
    spark_app_id: Mapped[str | None] = mapped_column(String(255))
    spark_job_group: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[datetime] = mapped_column(server_default=func.now())
    finished_at: Mapped[datetime | None]
    duration_ms: Mapped[int | None] = mapped_column(BigInteger)
    metrics: Mapped[dict[str, Any] | None]  # files/bytes rewritten, files added, ...
    committed_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    error: Mapped[str | None] = mapped_column(Text)
    log_tail: Mapped[str | None] = mapped_column(Text)
    # "session" (the scheduler's warm session) or "application" (spark-submit: below).
    mode: Mapped[str] = mapped_column(String(16), server_default=RunMode.SESSION.value)
    master: Mapped[str | None] = mapped_column(String(255))
    deploy_mode: Mapped[str | None] = mapped_column(String(16))
    # Kubernetes: "<namespace>:<driver pod>"; a local process: "pid:<host>:<pid>".
    submission_id: Mapped[str | None] = mapped_column(String(255))
    heartbeat_at: Mapped[datetime | None]  # the application's, while it runs
    # Its Spark UI while it runs, its history server page once it ended (tasks.runs.run_ui_url).
    ui_url: Mapped[str | None] = mapped_column(Text)


class MetricCount(Base):
    """A /metrics counter or histogram bucket, folded from `metric_deltas` (migration 0024):
    `family` task_state | task_latency | run_state | job_duration; `label` the state, or
    the bucket's upper bound (`le`, not cumulative; "+Inf" above the last); `total` the
    sum of the observed values."""

    __tablename__ = "metric_counts"

    family: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    label: Mapped[str] = mapped_column(String(32), primary_key=True)
    n: Mapped[int] = mapped_column(BigInteger)
    total: Mapped[float] = mapped_column(Float)


class MetricDelta(Base):
    """What a task or run change added to a MetricCount (negative: it moved back), appended
    by the triggers of migration 0024 in the change's own transaction; folded by the
    leader (lakewarden.history)."""

    __tablename__ = "metric_deltas"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    family: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(32))
    label: Mapped[str] = mapped_column(String(32))
    n: Mapped[int] = mapped_column(BigInteger)
    total: Mapped[float] = mapped_column(Float)


class TableFilesAdded(Base):
    """A table's running sum of the data files writers added (its events' `added-data-files`,
    our own rewrites not counted), kept by a trigger on timeline_events (migration 0034):
    evaluation's files added since a kind's last task, read without the events."""

    __tablename__ = "table_files_added"

    table_id: Mapped[int] = mapped_column(
        ForeignKey("managed_tables.id", ondelete="CASCADE"), primary_key=True
    )
    added: Mapped[int] = mapped_column(BigInteger)


class TableLastSuccess(Base):
    """When a table last had a task of a kind succeed (the newest `updated_at` of its
    succeeded tasks), kept by the tasks' trigger (migration 0024) as they succeed: the
    per-table /metrics series and the dashboard read it instead of the task history."""

    __tablename__ = "table_last_success"

    table_id: Mapped[int] = mapped_column(
        ForeignKey("managed_tables.id", ondelete="CASCADE"), primary_key=True
    )
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    at: Mapped[datetime]


class LeaderLease(Base):
    """A scheduler lease: a region's (`scheduler`, `scheduler:<region>`) or the fleet-wide
    duties' (lakewarden.catalogs.regions). `epoch` is the fencing token; it grows on every
    takeover."""

    __tablename__ = "leader_lease"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255))
    epoch: Mapped[int] = mapped_column(BigInteger)
    acquired_at: Mapped[datetime]
    renewed_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class ProcessHeartbeat(Base):
    """Every running api, worker and scheduler process, and what it holds."""

    __tablename__ = "process_heartbeats"

    process_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))  # api | worker | scheduler
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(server_default=func.now())
    last_seen: Mapped[datetime] = mapped_column(server_default=func.now())
    current_task_id: Mapped[int | None] = mapped_column(BigInteger)


class NamespacePolicy(Base):
    """Policy defaults every table of a namespace inherits (a table's own settings win)."""

    __tablename__ = "namespace_policies"

    catalog: Mapped[str] = mapped_column(String(255), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(255), primary_key=True)
    policy: Mapped[dict[str, Any]]
    version: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    updated_at: Mapped[datetime] = mapped_column(server_default=func.now())


class Alert(Base):
    """A condition an operator must see. One row per (rule, key) while it fires; resolved
    when the condition clears; delivered to every configured sink on each change."""

    __tablename__ = "alerts"
    __table_args__ = (
        Index(
            "uq_alerts_open_rule_key",
            "rule",
            "key",
            unique=True,
            postgresql_where=text(sql_in("state", AlertState.RESOLVED, negate=True)),
        ),
        _one_of("state", AlertState),
        _one_of("delivered_state", AlertState),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    rule: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(255))
    severity: Mapped[str] = mapped_column(String(16))  # critical | warning | info
    state: Mapped[str] = mapped_column(String(16))  # an AlertState
    summary: Mapped[str] = mapped_column(Text)
    details: Mapped[dict[str, Any]]
    runbook: Mapped[str | None] = mapped_column(Text)
    first_seen: Mapped[datetime] = mapped_column(server_default=func.now())
    last_seen: Mapped[datetime] = mapped_column(server_default=func.now())
    resolved_at: Mapped[datetime | None]
    acked_by: Mapped[str | None] = mapped_column(String(255))
    acked_at: Mapped[datetime | None]
    # Delivery: the state last delivered to the sinks, and the retry bookkeeping.
    delivered_state: Mapped[str | None] = mapped_column(String(16))
    delivery_attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    next_delivery_at: Mapped[datetime] = mapped_column(server_default=func.now())
    delivery_error: Mapped[str | None] = mapped_column(Text)


class TableBlocker(Base):
    """Something that keeps maintenance jobs from starting (a running one finishes). One
    mechanism, three uses:

    - a writer's blocker: a table, until `expires_at` (streaming writers that must not race
      a rewrite). Expired blockers are ignored;
    - an operator's pause: a table, no `expires_at`: until resumed;
    - the global freeze (incidents): no table (every table), no `expires_at`: until
      unfrozen.
    """

    __tablename__ = "table_blockers"
    __table_args__ = (
        # One pause per table and one freeze (NULL table -> 0: table ids start at 1).
        Index(
            "uq_table_blockers_hold",
            text("coalesce(table_id, 0)"),
            unique=True,
            postgresql_where=text("expires_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    table_id: Mapped[int | None] = mapped_column(
        ForeignKey("managed_tables.id", ondelete="CASCADE"), index=True
    )
    holder: Mapped[str] = mapped_column(String(255))
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    expires_at: Mapped[datetime | None]


class KindHold(Base):
    """One kind stopped on one table after its job failed in a way that repeats itself (a
    rewrite that failed validation, the same error N times in a row): no task of the kind
    is created on the table and none already open starts, until an operator acknowledges
    the alert or resumes the kind (lakewarden.holds). Made by the scheduler leader, fenced."""

    __tablename__ = "kind_holds"

    table_id: Mapped[int] = mapped_column(
        ForeignKey("managed_tables.id", ondelete="CASCADE"), primary_key=True
    )
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    # The failed task, and the alert rule that fires for it (acknowledging it lifts the hold).
    task_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id", ondelete="SET NULL"))
    rule: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(Text)
    holder: Mapped[str] = mapped_column(String(255))  # the leader that made it
    leader_epoch: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())


class ApiToken(Base):
    """An API credential. Only the SHA-256 of the secret is kept: the secret is shown once,
    at creation. Checked on every request, so a revocation holds at once on every replica."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    owner: Mapped[str] = mapped_column(String(255))
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))  # the secret's first characters, to tell
    grants: Mapped[list[dict[str, str]]] = mapped_column(JSONB)
    created_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    expires_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    revoked_by: Mapped[str | None] = mapped_column(String(255))
    # The token that minted this one (None: the CLI, or an OIDC caller): revoking a token
    # revokes every token it minted, recursively (lakewarden.auth.tokens.revoke).
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id"), index=True)
    # Minted by the dashboard's login for one browser session: its logout revokes it.
    for_session: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))


class AuditEntry(Base):
    """One state-changing request: who, from where, what, the policy before/after, and the
    outcome. Append-only: triggers (migrations 0008, 0025) refuse UPDATE, DELETE and TRUNCATE.
    Partitioned by month of `at` (migration 0025: whole months past retention are dropped),
    so `at` is part of the key."""

    __tablename__ = "audit_log"
    __table_args__ = (
        Index("ix_audit_log_catalog_namespace", "catalog", "namespace"),
        {"postgresql_partition_by": "RANGE (at)"},
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(server_default=func.now(), index=True, primary_key=True)
    actor: Mapped[str] = mapped_column(String(255), index=True)  # token:<name>, oidc:<sub>
    source: Mapped[str | None] = mapped_column(String(255))  # client address
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(String(64), index=True)  # the route's operation id
    catalog: Mapped[str | None] = mapped_column(String(255))
    namespace: Mapped[str | None] = mapped_column(String(255))
    target: Mapped[str | None] = mapped_column(Text)  # table, task, alert, token...
    status: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(16))  # ok | refused | failed
    change: Mapped[dict[str, Any] | None]  # e.g. {"policy": {"ttl.enabled": [false, true]}}
    detail: Mapped[str | None] = mapped_column(Text)  # why it was refused or failed


class RateCount(Base):
    """Change requests of one credential in one minute, counted by every API replica
    (services/api/rate_limit.py). UNLOGGED (migration 0017): rows live two minutes."""

    __tablename__ = "rate_counts"
    __table_args__ = {"prefixes": ["UNLOGGED"]}

    key: Mapped[str] = mapped_column(String(300), primary_key=True)  # token:<id>, oidc:<sub>
    window_start: Mapped[datetime] = mapped_column(primary_key=True, index=True)
    count: Mapped[int] = mapped_column(Integer)


class PublishAudit(Base):
    """One audit of a table's audit branch head (write-audit-publish, lakewarden.publish):
    what its checks found, and whether main was fast-forwarded to it. Judged once."""

    __tablename__ = "publish_audits"
    __table_args__ = (
        UniqueConstraint("table_id", "branch", "branch_snapshot_id", name="uq_publish_audits_head"),
        Index("ix_publish_audits_table", "table_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    table_id: Mapped[int] = mapped_column(ForeignKey("managed_tables.id", ondelete="CASCADE"))
    branch: Mapped[str] = mapped_column(String(255))
    branch_snapshot_id: Mapped[int] = mapped_column(BigInteger)
    main_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    passed: Mapped[bool]
    published: Mapped[bool]
    rows: Mapped[int | None] = mapped_column(BigInteger)
    checks: Mapped[dict[str, Any]]
    reason: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(server_default=func.now())


class PartitionReadiness(Base):
    """Whether one partition of a table is ready for downstream readers (lakewarden.
    readiness): its state, why, and the commit that last touched it. One row per (table,
    partition column, partition); a late commit into a ready partition un-readies it and
    says so in `unready_reason`."""

    __tablename__ = "partition_readiness"
    __table_args__ = (
        UniqueConstraint("table_id", "column", "partition"),
        CheckConstraint(
            "(last_commit_at IS NULL) = (last_commit_snapshot_id IS NULL)", name="one_last_commit"
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    table_id: Mapped[int] = mapped_column(
        ForeignKey("managed_tables.id", ondelete="CASCADE"), index=True
    )
    column: Mapped[str] = mapped_column(String(255))  # readiness.partition (source column)
    partition: Mapped[str] = mapped_column(String(255))  # e.g. 2026-11-23, 2026-11-23-05
    partition_end: Mapped[datetime | None]  # NULL: an identity value with no end in time
    ready: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    since: Mapped[datetime | None]  # when it became ready (NULL while not ready)
    snapshot_id: Mapped[int | None] = mapped_column(BigInteger)  # the one that made it ready
    reason: Mapped[str | None] = mapped_column(Text)  # why it is ready, or what it waits for
    tag: Mapped[str | None] = mapped_column(String(255))  # ready-<partition>, when tagged
    # NULL: no commit touched it (an empty partition: ready by a writer's heartbeat or the
    # watermark passing it, or late).
    last_commit_at: Mapped[datetime | None]
    last_commit_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    unready_at: Mapped[datetime | None]
    unready_reason: Mapped[str | None] = mapped_column(Text)  # "late commit <id> at <ts> ..."
    # The writer's last heartbeat for it ("I ran for it and wrote nothing"), and by whom.
    heartbeat_at: Mapped[datetime | None]
    heartbeat_by: Mapped[str | None] = mapped_column(String(255))
    # Since when it has been overdue: no commit and no heartbeat past its end and the
    # policy's deadline_minutes (reason "late: ..."; the partition_overdue alert's condition).
    overdue_since: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(server_default=func.now())


class ReadinessCursor(Base):
    """Per table: the writer's posted completeness watermark, and how far the leader has
    read the table's commits for readiness (the next round reads only newer ones)."""

    __tablename__ = "readiness_cursors"

    table_id: Mapped[int] = mapped_column(
        ForeignKey("managed_tables.id", ondelete="CASCADE"), primary_key=True
    )
    watermark: Mapped[datetime | None]  # all data before it is written (the writer says)
    watermark_by: Mapped[str | None] = mapped_column(String(255))
    watermark_at: Mapped[datetime | None]  # when it was posted
    scanned_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    # The partition column it was read for: another one reads the commits again.
    scanned_column: Mapped[str | None] = mapped_column(String(255))
    scanned_at: Mapped[datetime | None]
    # When the round must next look for empty periods though nothing else changed (the next
    # period's deadline; the next round when the last one stopped at its cap). NULL: never.
    empty_due_at: Mapped[datetime | None]


class ReadinessNotification(Base):
    """An outbox of `partition_ready` / `partition_unready` notifications for the alert
    sinks: written in the transaction that changes the partition's state, delivered after
    it (retried with backoff), so none is lost and a quick ready-unready-ready sends all
    three. A notification, not an alert: never firing, never acknowledged."""

    __tablename__ = "readiness_notifications"
    __table_args__ = (
        Index(
            "ix_readiness_notifications_undelivered",
            "id",
            postgresql_where=text("delivered_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    table_id: Mapped[int] = mapped_column(
        ForeignKey("managed_tables.id", ondelete="CASCADE"), index=True
    )
    ready: Mapped[bool] = mapped_column(Boolean)  # partition_ready, else partition_unready
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    delivered_at: Mapped[datetime | None]
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    next_attempt_at: Mapped[datetime] = mapped_column(server_default=func.now())
    error: Mapped[str | None] = mapped_column(Text)


class PoolCapacityRow(Base):
    """A pool's elastic capacity now (settings `pool_capacity`, lakewarden.capacity): the
    jobs it may run at once, and since when it has had a free slot and nothing to run.
    Written by the scheduler leader, fenced; a new leader carries on from it."""

    __tablename__ = "pool_capacity"

    pool: Mapped[str] = mapped_column(String(255), primary_key=True)
    capacity: Mapped[int] = mapped_column(Integer)
    idle_since: Mapped[datetime | None]
    reason: Mapped[str] = mapped_column(Text)  # the last decision's
    changed_at: Mapped[datetime] = mapped_column(server_default=func.now())
    checked_at: Mapped[datetime] = mapped_column(server_default=func.now())


class CapacityDecision(Base):
    """One change of a pool's capacity: from, to, why, and the queue it saw. Made by the
    scheduler leader under its fence; the pools endpoint and `lakewarden pools` show them."""

    __tablename__ = "capacity_decisions"
    __table_args__ = (Index("ix_capacity_decisions_pool", "pool", "id"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    pool: Mapped[str] = mapped_column(String(255))
    before: Mapped[int] = mapped_column(Integer)
    after: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text)
    queued: Mapped[int] = mapped_column(Integer)
    running: Mapped[int] = mapped_column(Integer)
    oldest_wait_s: Mapped[float | None] = mapped_column(Float)
    holder: Mapped[str] = mapped_column(String(255))  # the leader that decided
    leader_epoch: Mapped[int] = mapped_column(BigInteger)
    at: Mapped[datetime] = mapped_column(server_default=func.now())
