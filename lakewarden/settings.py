"""One settings class for every service, read from `LAKEWARDEN_*` variables."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from lakewarden.states import RunMode


def _default_data_dir() -> Path:
    return Path.home() / ".lakewarden"


DEFAULT_REGION = "default"
# A region's name: lowercase letters, digits and dashes (it names a lease, a Helm
# deployment and a metric label).
REGION_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?")


def check_region_name(name: str) -> str:
    """`name` if it is a valid region name; ValueError saying what to fix."""
    if not REGION_NAME.fullmatch(name):
        raise ValueError(
            f"region {name!r}: use 1-32 lowercase letters, digits or dashes "
            "(not starting or ending with a dash)"
        )
    return name


class PoolCapacity(BaseModel):
    """A pool's elastic capacity (`pool_capacity`): how many of its jobs may run at once,
    between `min` and `max`, raised by the leader while its queue waits and lowered once
    slots stay idle (lakewarden.capacity)."""

    model_config = ConfigDict(extra="forbid")

    min: int = Field(default=1, ge=0, le=10_000)
    max: int = Field(ge=1, le=10_000)
    # Up (by `step`) while every slot is busy and the oldest runnable task waited longer
    # than this, or more tasks are runnable than this many per slot.
    scale_up_wait_s: float = Field(default=30.0, ge=0)
    scale_up_queued_per_slot: float = Field(default=2.0, gt=0)
    step: int = Field(default=1, ge=1, le=10_000)
    # Down to what runs (never below min) once a slot stayed free with nothing runnable
    # for this long.
    scale_down_idle_s: float = Field(default=120.0, ge=0)

    @model_validator(mode="after")
    def _min_below_max(self) -> PoolCapacity:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LAKEWARDEN_", extra="ignore")

    # --- state -----------------------------------------------------------------
    # Control-plane database. Unset: an embedded Postgres is started in data_dir.
    # Secrets (passwords in URLs, webhook tokens) are left out of repr: a Settings in a log
    # line or a traceback shows none of them.
    database_url: str | None = Field(default=None, repr=False)
    # The schema's owner, for `lakewarden migrate` only: the services connect as the role of
    # database_url, which migrate grants what they need (INSERT and SELECT on audit_log, no
    # more), so they cannot switch the audit trail's trigger off. Unset: migrate as
    # database_url's role (one role owns and uses the schema: the audit trail is only as
    # safe as that role). The embedded Postgres sets both up itself.
    migration_database_url: str | None = Field(default=None, repr=False)
    data_dir: Path = Field(default_factory=_default_data_dir)
    embedded_pg_port: int = 54329

    # --- Iceberg catalog ---------------------------------------------------------
    catalog_name: str = "lake"
    # "jdbc" (default: the Iceberg JDBC catalog in the control-plane database)
    # "rest" (an Iceberg REST catalog at catalog_uri) or "hive" (a Hive Metastore at
    # catalog_uri, thrift://host:port).
    catalog_type: str = "jdbc"
    # JDBC catalog database; defaults to the control-plane database.
    catalog_database_url: str | None = Field(default=None, repr=False)
    catalog_uri: str | None = None  # REST catalog URI, or the metastore's thrift:// URI
    warehouse: str | None = None  # default: file://<data_dir>/warehouse
    # More properties of this catalog, as a JSON object: pyiceberg's and Iceberg-Java's
    # names (an S3 warehouse's `s3.endpoint`, `s3.region`; `hadoop.*` for HDFS), each
    # credential a reference ({"env": "LW_SECRET_…"} or {"file": …}), never a value.
    catalog_properties: dict[str, str | dict[str, str]] = Field(default_factory=dict)

    # --- Spark -------------------------------------------------------------------
    spark_master: str = "local[2]"
    spark_jars: str | None = None  # comma-separated explicit jar paths
    spark_packages: str | None = None  # Maven coordinates, when Maven is reachable
    spark_driver_memory: str = "2g"
    # Extra spark.* settings (JSON); may hold s3 keys.
    spark_conf: dict[str, str] = Field(default_factory=dict, repr=False)
    # Where the pinned jars (lakewarden/spark/jars.lock) are fetched once and kept: one cache
    # per machine, shared by every data dir on it.
    jars_cache_dir: Path = Field(default_factory=lambda: Path.home() / ".cache" / "lakewarden")
    # The Maven repository the pinned jars come from (a mirror: Nexus, Artifactory, ...).
    maven_repository: str = "https://repo1.maven.org/maven2"
    # Spark's web UI of the scheduler's session and of each submitted application (off:
    # it listens on every interface, Spark's choice; SPARK_LOCAL_IP narrows it). A port in
    # use (several applications on one host) makes Spark take the next one.
    spark_ui_enabled: bool = False
    spark_ui_port: int = Field(default=4040, ge=1024, le=65535)
    # Spark event logs (for a history server) go here: a directory, or a URI (s3a://, ...).
    spark_event_log_dir: str | None = None
    # A Spark history server reading spark_event_log_dir: each job run links to its app there.
    spark_history_url: str | None = None
    # The scheduler deletes its Spark log files (driver WARN/ERROR lines, submitted
    # applications' output, under data_dir) last written longer ago than this.
    spark_log_retention_days: float = Field(default=7, gt=0, le=3650)

    # --- API ---------------------------------------------------------------------
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    # Proxies whose X-Forwarded-For / X-Forwarded-Proto are believed: comma-separated
    # addresses or networks ("10.0.0.5,10.1.0.0/16"; "*": any). They set the client address
    # the audit records and the scheme. Empty: the headers are ignored (X-Forwarded-Host
    # always is; services/api/headers.py).
    trusted_proxies: str = ""
    # The dashboard's cookie is Secure (sent over https only). Unset: on, unless the API
    # binds to a loopback address (plain http on one machine); over https always.
    cookie_secure: bool | None = None
    listen_for_commits: bool = True  # LISTEN on the catalog's commit trigger
    poll_interval_s: float = 30.0  # polling fallback for missed commits

    # --- access (docs/security.md) --------------------------------------------------
    # Every endpoint needs a credential except /healthz and /readyz, and /metrics when this
    # is on (a Prometheus that cannot send a bearer token).
    metrics_public: bool = False
    # Mutating calls per minute per credential, counted in Postgres and shared by every API
    # replica (services/api/rate_limit.py); more get 429 + Retry-After.
    mutations_per_minute: int = Field(default=300, ge=1)
    # The longest an API token may live (days); a longer or never-expiring one is refused
    # (API and CLI alike), so a leaked token lapses on its own.
    token_max_days: float = Field(default=90, ge=1 / 24, le=3650)
    # The dashboard's login mints a token of this lifetime for the browser session (a child
    # of the pasted one, its grants, never outliving it); logout revokes it.
    session_token_hours: float = Field(default=12, ge=0.1, le=24 * 30)
    # OIDC bearer tokens (optional): JWTs signed by the issuer's keys (its JWKS), their
    # claims mapped to grants. Unset issuer: only lakewarden's own API tokens are accepted.
    oidc_issuer: str | None = None
    oidc_jwks_url: str | None = None  # default: <issuer>/.well-known/jwks.json
    oidc_audience: str | None = None
    oidc_subject_claim: str = "sub"
    oidc_groups_claim: str = "groups"
    # Claim value -> grants, e.g. {"lake-admins": ["admin"], "oncall": ["operator@lake/sales*"]}
    oidc_grants: dict[str, list[str]] = Field(default_factory=dict)
    # What a registered catalog's secret reference may name (lakewarden.secret_refs):
    # {"file": PATH} a regular file inside this directory of mounted secrets (default
    # <data_dir>/secrets), {"env": NAME} a variable whose name starts with this prefix and
    # is no LAKEWARDEN_* setting. Else an admin could read any file the API can (through a
    # catalog's errors, or sent to a REST endpoint of their choice) or its database URL.
    secrets_dir: Path | None = None
    secrets_env_prefix: str = "LW_SECRET_"

    # --- worker ------------------------------------------------------------------
    worker_poll_interval_s: float = 5.0  # fallback: a new pending task wakes the worker
    heartbeat_interval_s: float = 5.0
    stale_after_s: float = 30.0  # a holder silent this long loses its work
    # Incremental planning (lakewarden.manifest_cache; formats.hudi.incremental and
    # formats.delta.incremental, each bounded apart): a planning process keeps the data
    # files its plans listed, by manifest, for at most this many files (~350 bytes each),
    # and reads only the manifests written since (Hudi: the partitions the instants since
    # touched; Delta: the log versions since). 0: every plan lists every file.
    plan_cache_files: int = Field(default=1_000_000, ge=0, le=100_000_000)
    # Every Nth plan of a table also lists it in full and compares (a difference is logged
    # as an error and that table's cache dropped). 1: every plan is checked.
    plan_full_every: int = Field(default=20, ge=1, le=1_000_000)

    # --- regions (docs/deployment.md#regions) ---------------------------------------
    # Every region's name (JSON, e.g. ["default", "eu-west"]): a catalog is registered in
    # one of them; the settings-configured catalog is in DEFAULT_REGION ("default").
    regions: list[str] = Field(default_factory=lambda: [DEFAULT_REGION], min_length=1)
    # The region a scheduler leads or stands by for: its leader runs only the tables of
    # that region's catalogs, under a lease of that region's own. A worker given one plans
    # only that region's tasks (`pinned_region`); without it, every region's.
    region: str = DEFAULT_REGION

    # --- scheduler -----------------------------------------------------------------
    # A standby takes over within lease_ttl_s of the leader's death (it tries again right
    # when the lease lapses); the leader renews every lease_renew_interval_s, so it has
    # three tries before its own margin (80% of the TTL) runs out.
    lease_ttl_s: float = 8.0
    lease_renew_interval_s: float = 2.0
    # Dispatch wakes on a NOTIFY when a task is planned or a job ends (lakewarden.tasks.
    # wakeup); this poll is the fallback for a notification lost while reconnecting.
    scheduler_poll_interval_s: float = 5.0
    # Spark jobs one scheduler runs at once on its session (FAIR-shared). 0: by the cores
    # of spark_master (JOBS_PER_CORE per core; a cluster master counts as 2 cores).
    max_concurrent_jobs: int = Field(default=0, ge=0)
    # Jobs running at once per pool, across all schedulers of a region (JSON, e.g.
    # {"default": 4}): each region has its own pools.
    pool_limits: dict[str, int] = Field(default_factory=dict)
    # Hard quota per pool: Spark minutes its jobs may use in any trailing hour, across all
    # schedulers (JSON, e.g. {"big": 30}); past it, its tasks wait (lakewarden.policy.quotas).
    pool_quotas: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    # How a pool's jobs run (JSON, e.g. {"big": "application"}): "session" (default: in the
    # scheduler's warm Spark session) or "application" (each job its own Spark application
    # through spark-submit: lakewarden.spark.submit, lakewarden.jobs.application_entry).
    pool_modes: dict[str, RunMode] = Field(default_factory=dict)
    max_concurrent_applications: int = Field(default=4, ge=1)  # per scheduler
    # Session families whose jobs the leader runs in a warm host of the family (JSON, e.g.
    # ["delta", "hudi"]): one long-lived process per family holding its Spark session,
    # running the family's attempts one after another, instead of a spark-submit (a JVM)
    # per attempt (services.scheduler.family_hosts, lakewarden.jobs.family_host). Off by
    # default: a host keeps a driver JVM on the leader's machine, and one long job of the
    # family delays the next. Client deploy mode only (cluster mode: one application each).
    warm_families: list[Literal["hudi", "delta"]] = Field(default_factory=list)
    # A warm host with nothing to run for this long exits (started again on demand).
    warm_family_idle_s: float = Field(default=600.0, gt=0)
    # Elastic capacity per pool (JSON, e.g. {"big": {"min": 1, "max": 8}}; off for a pool
    # not listed): the leader raises the jobs the pool may run at once while its queue
    # waits and lowers them when idle, within min..max (lakewarden.capacity; fields in
    # PoolCapacity). A POOL_LIMITS entry of the same pool still caps it.
    pool_capacity: dict[str, PoolCapacity] = Field(default_factory=dict)
    capacity_interval_s: float = Field(default=5.0, gt=0)  # how often the leader decides
    application_master: str | None = None  # default: spark_master
    # cluster: the driver runs on the cluster (Kubernetes: a pod; YARN: the AM's container)
    application_deploy_mode: Literal["client", "cluster"] = "client"
    application_driver_memory: str = "1g"
    spark_master_web_url: str | None = None  # a standalone master's web UI (its /json)
    # A `yarn` master's ResourceManager web address (http://rm:8088): each application's
    # status, YARN's diagnostics, and kill go through its REST API. spark-submit finds the
    # ResourceManager itself in $HADOOP_CONF_DIR's yarn-site.xml.
    yarn_resourcemanager_url: str | None = None
    kubernetes_namespace: str = "default"
    kubernetes_image: str | None = None  # the lakewarden image, for driver and executors
    # The Kubernetes Secret whose keys are the secret LAKEWARDEN_* variables (database URL,
    # ...): a driver pod gets them by reference, never by value on a command line.
    kubernetes_secret: str | None = None
    # A submitted application refused as fenced (its leader was deposed) tries to report
    # for this long while a new leader re-attaches it, then leaves the verdict to that leader.
    application_report_deadline_s: float = 120.0
    # Start Spark when the scheduler starts (standbys too), so a job or failover finds it warm.
    spark_warmup: bool = True
    sweep_interval_s: float = 60.0  # how often the leader looks for due TTL/clean work
    # Tables per sweep transaction: each batch is one short fenced transaction.
    sweep_batch_size: int = Field(default=500, ge=1, le=100_000)
    # The health watch measures tables in batches of this many, for at most
    # health_budget_s per round (every alert_interval_s), moved metadata pointers first.
    health_batch_size: int = Field(default=100, ge=1, le=100_000)
    health_budget_s: float = Field(default=10.0, gt=0)
    retry_base_s: float = 10.0
    retry_cap_s: float = 600.0
    # A kind whose runs on a table fail this many times in a row with the same error is
    # held there until an operator acknowledges the alert or resumes it (lakewarden.holds;
    # a rewrite that fails validation is held at once). 0: never held for repeated errors.
    hold_after_same_failures: int = Field(default=3, ge=0, le=100)

    # --- alerting --------------------------------------------------------------
    alert_webhook_url: str | None = Field(default=None, repr=False)  # generic JSON
    alert_slack_url: str | None = Field(default=None, repr=False)  # Slack incoming webhook
    alert_alertmanager_url: str | None = Field(default=None, repr=False)  # + /api/v2/alerts
    alert_interval_s: float = 15.0
    # Open alerts are sent to Alertmanager again this often (at the next alert round), well
    # within its resolve_timeout (5 min): it forgets an alert it stops hearing of.
    alert_resend_interval_s: float = Field(default=60.0, gt=0)
    health_interval_s: float = 300.0  # how often the leader re-measures each table
    alert_backlog_age_s: float = 3600.0  # oldest waiting task older than this
    alert_no_leader_s: float = 60.0  # no scheduler lease for longer than this
    alert_slow_factor: float = 3.0  # a job running this many times its median
    alert_slow_min_s: float = 300.0  # ...and at least this long

    # Failpoint for fault tests: a worker sleeps this long after claiming, before planning.
    fault_plan_delay_s: float = 0.0
    # ...and a job sleeps this long once its application id is recorded, before its work.
    fault_job_delay_s: float = 0.0
    # Test-only failpoint that corrupts a rewrite after it commits (lakewarden.spark.
    # validation): "corrupt-rewrite" drops one output file under the task's commit tags;
    # "corrupt-rewrite-then-write" also appends a writer's row after it (a Delta rewrite:
    # "corrupt-rewrite" fails its validation, which its RESTORE then undoes; a Hudi one:
    # another writer's commit after it, which its undo must not roll back). A Hudi
    # compaction is corrupted before its commit instead (a written file loses a row);
    # "ttl-miscount-row" makes a Hudi or Delta row-level TTL miscount what its commit
    # deleted (its guard must undo it); "renumber-rewrite" writes an Iceberg rewrite's rows
    # again as new rows (the same values, new v3 row ids); "fail-before-commit" fails a
    # Hudi rewrite checked before its commit once it has written its files (as a lost
    # executor or a cancelled job would). Honoured only with failpoints_enabled as well:
    # one stray variable never corrupts a table.
    failpoint: (
        Literal[
            "corrupt-rewrite",
            "corrupt-rewrite-then-write",
            "ttl-miscount-row",
            "renumber-rewrite",
            "fail-before-commit",
        ]
        | None
    ) = None
    failpoints_enabled: bool = False

    # History retention, in days (0: kept for ever): the scheduler leader prunes older rows
    # every retention_interval_s, retention_batch_size per transaction (lakewarden.history;
    # what is still needed is never pruned). Tasks: finished ones, with their transitions
    # and runs; alerts: resolved ones.
    retention_events_days: float = Field(default=90, ge=0, le=36_500)
    retention_tasks_days: float = Field(default=90, ge=0, le=36_500)
    retention_transitions_days: float = Field(default=90, ge=0, le=36_500)
    retention_runs_days: float = Field(default=90, ge=0, le=36_500)
    retention_alerts_days: float = Field(default=90, ge=0, le=36_500)
    # The audit log's whole months (partitions) older than this are dropped; `migrate`
    # applies it (the services' role cannot change it: migration 0025).
    retention_audit_months: int = Field(default=13, ge=0, le=1200)
    retention_interval_s: float = Field(default=300.0, gt=0)
    retention_batch_size: int = Field(default=1000, ge=1, le=100_000)

    # /metrics exports per-table series for at most this many tables (the least healthy).
    metrics_max_tables: int = Field(default=1000, ge=0, le=1_000_000)

    log_level: str = "INFO"
    # `text`: a line per record; `json`: an object per line (lakewarden/logs.py), every process.
    log_format: Literal["text", "json"] = "text"

    @field_validator("database_url", "catalog_database_url", "migration_database_url")
    @classmethod
    def _normalise_db_url(cls, v: str | None) -> str | None:
        if v is None or v == "":
            return None
        return sqlalchemy_pg_url(v)

    @field_validator("regions")
    @classmethod
    def _region_names(cls, v: list[str]) -> list[str]:
        for name in v:
            check_region_name(name)
        if DEFAULT_REGION not in v:  # the settings-configured catalog lives there
            raise ValueError(f"regions must include {DEFAULT_REGION!r}")
        return v

    @field_validator("region")
    @classmethod
    def _known_region(cls, v: str, info: ValidationInfo) -> str:
        known = info.data.get("regions") or [DEFAULT_REGION]
        if v not in known:
            raise ValueError(f"region {v!r} is not one of LAKEWARDEN_REGIONS {known}")
        return v

    @property
    def pinned_region(self) -> str | None:
        """The region a worker plans for: LAKEWARDEN_REGION if it was given (a worker beside
        that region's storage, which may not reach another data center's), else None: every
        region's. A scheduler always serves one region (`region`, the default one unset)."""
        return self.region if "region" in self.model_fields_set else None

    @field_validator("max_concurrent_jobs")
    @classmethod
    def _jobs_by_cores(cls, v: int, info: ValidationInfo) -> int:
        return v or jobs_for_master(info.data.get("spark_master", "local[2]"))

    @property
    def warehouse_uri(self) -> str:
        if self.warehouse:
            return self.warehouse
        return (self.data_dir / "warehouse").resolve().as_uri()

    @property
    def secrets_path(self) -> Path:
        """The directory `{"file": …}` references must name a file in."""
        return self.secrets_dir or self.data_dir / "secrets"


# Tiny jobs leave a core idle while the driver plans, commits and talks to the catalog:
# more jobs than cores keep it busy. Benchmark B12 on 2 cores: 124, 161, 211 and 200 tiny
# tasks/min at 1, 2, 4 and 6 jobs at once; 4 is the most, and each job holds driver memory.
JOBS_PER_CORE = 2


def jobs_for_master(master: str) -> int:
    """The default number of jobs at once for a Spark master: local[N] has N cores,
    local[*] (and local) this machine's; a cluster's are not known here, so 2."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if m is None:
        cores = 2
    elif m.group(1) in (None, "*"):
        cores = os.cpu_count() or 1
    else:
        cores = max(1, int(m.group(1)))
    return JOBS_PER_CORE * cores


def sqlalchemy_pg_url(url: str) -> str:
    """A Postgres URL as SQLAlchemy takes it: the plain libpq scheme is accepted, and
    SQLAlchemy needs the driver spelled out. ValueError for anything but Postgres."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    if not url.startswith("postgresql+psycopg://"):
        raise ValueError("database URL must be a postgresql:// URL")
    return url


@functools.cache
def get_settings() -> Settings:
    return Settings()
