"""Never fight another optimizer: does another service already maintain this table?

`detect` looks only at what the table itself says: its properties, its location and the
summaries of its most recent snapshots. It returns who maintains the table and the exact
property or summary key (and value) that gave it away, or None when nothing does. A
detected table is not auto-managed unless someone forces it; the evidence is what
`explain` shows.

Each signal below names its source. Signals that only mean "this service could maintain
it" (Amoro's defaults, say) are not enough: the table must carry the service's mark.
Commits lakewarden made itself (summary key `lakewarden.task-id`) are never evidence.

A Delta table's own log says who else optimizes it (`detect_delta`, from its recent
commits' commitInfo): the writer's auto compaction, or OPTIMIZE / REORG / VACUUM commits of
another's recurring; the Delta kinds leave the command it would fight alone
(`kinds.delta`), the evidence in their skips and in health.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from lakewarden.catalogs.metadata_view import TableRead

# --- lakewarden's own marks ------------------------------------------------------------
# Same value as lakewarden.spark.commits.TASK_KEY (a layer above: not importable here);
# tests/unit/test_foreign.py checks that the two agree.
OUR_TASK_KEY = "lakewarden.task-id"
# Table properties lakewarden defines for owners who cannot reach its API: `false` opts the
# table out; `maintained-by` names whoever maintains it instead.
OPT_OUT = "lakewarden.managed"
MAINTAINED_BY = "lakewarden.maintained-by"

# --- Apache Amoro ----------------------------------------------------------------------
# amoro-format-iceberg org/apache/amoro/table/TableProperties.java: ENABLE_SELF_OPTIMIZING
# (default true) and the other self-optimizing.* knobs.
AMORO_ENABLED = "self-optimizing.enabled"
AMORO_PREFIX = "self-optimizing."
# Legacy keys Amoro still reads when the new one is absent
# (org/apache/amoro/utils/CompatiblePropertyUtil.getLegacyProperty).
AMORO_LEGACY_ENABLED = "optimize.enable"
AMORO_LEGACY_KEYS = (
    "optimize.group",
    "optimize.quota",
    "optimize.num-retries",
    "optimize.max-file-count",
    "optimize.full.trigger.max-interval",
    "optimize.minor.trigger.max-interval",
    "optimize.minor.trigger.delete-file-count",
)
# Amoro tags its own commits: SnapshotSummary.SNAPSHOT_PRODUCER = "snapshot.producer", with
# a CommitMetaProducer name (amoro_table_metastore.thrift). ExpireDataExecutor's
# AMORO_MAINTAIN_COMMITS lists the maintenance ones; INGESTION is an ordinary write.
# Amoro's other maintenance switches (same TableProperties.java, legacy spellings from
# CompatiblePropertyUtil): set to "true" they are a mark even with self-optimizing off.
AMORO_MAINTENANCE_SWITCHES = (
    ("table-expire.enabled", "table-expire.enable"),
    ("clean-orphan-file.enabled", "clean-orphan-file.enable"),
    ("data-expire.enabled", None),
)
AMORO_PRODUCER = "snapshot.producer"
AMORO_OPTIMIZE = "OPTIMIZE"
AMORO_MAINTENANCE = ("DATA_EXPIRATION", "CLEAN_DANGLING_DELETE")

# --- Amazon S3 Tables ------------------------------------------------------------------
# S3 generates each table's warehouse location in a bucket whose name ends in --table-s3
# (docs.aws.amazon.com/AmazonS3/latest/userguide/s3-tables-tables.html); compaction and
# snapshot management run there by default (s3-tables-maintenance.html).
S3_TABLES_BUCKET_SUFFIX = "--table-s3"

# --- Databricks / Unity Catalog --------------------------------------------------------
# Unity Catalog managed tables live under <managed location>/__unitystorage/...; Unity
# Catalog owns their optimization (docs.databricks.com/tables/managed, predictive
# optimization). OSS Unity Catalog uses the same layout without an optimizer: forcing
# management is the way out there.
UNITY_MANAGED_STORAGE = "/__unitystorage/"
# Delta UniForm writes Iceberg metadata for a Delta table and stamps both properties on it
# (delta-io/delta IcebergConverter.DELTA_VERSION_PROPERTY / DELTA_TIMESTAMP_PROPERTY,
# set in IcebergConversionTransaction). The data files belong to the Delta table.
UNIFORM_VERSION = "delta-version"
UNIFORM_TIMESTAMP = "delta-timestamp"

# --- Streaming writers that compact inline ---------------------------------------------
# Keys a streaming writer puts in every commit it makes: Iceberg's Flink sink
# (IcebergFilesCommitter FLINK_JOB_ID / OPERATOR_ID) and Kafka Connect sink
# (Coordinator COMMIT_ID_SNAPSHOT_PROP). Their ordinary commits are append, overwrite or
# delete; a `replace` (Iceberg's RewriteFiles) carrying one means the writer rewrote
# files itself.
STREAMING_WRITER_KEYS = ("flink.job-id", "flink.operator-id", "kafka.connect.commit-id")
REPLACE = "replace"

# --- Delta: another optimizer in the log ----------------------------------------------
# Delta's commitInfo names each commit's `operation`: OPTIMIZE (bin-pack, ZORDER BY and
# liquid clustering alike; `operationParameters.auto` true when the writer's auto compaction
# ran it: Databricks' and Delta's `spark.databricks.delta.autoCompact.enabled`), REORG
# (`… APPLY (PURGE)`), and VACUUM START / VACUUM END around a VACUUM. One such commit that
# lakewarden did not make may be an operator's; auto compaction, or the same command
# recurring, is a service maintaining the table.
DELTA_LAYOUT_OPERATIONS = frozenset({"OPTIMIZE", "REORG"})
DELTA_VACUUM = "VACUUM END"  # one per VACUUM (its START commit is the same run)
DELTA_RECURRING = 2  # this many of the recent commits: a service, not a one-off
DELTA_WINDOW = 50  # the recent commits read (newest first)
OUR_PREFIX = "lakewarden."  # every key lakewarden stamps on a commit (formats.base)

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SHOWN = 80  # property values are the table owner's text: shown escaped and cut


@dataclass(frozen=True)
class ForeignMaintainer:
    """Who maintains the table instead of lakewarden, and the sentence that says why."""

    who: str  # "amoro", "s3tables", "databricks", "delta-uniform", "streaming-writer", ...
    evidence: str


def detect(
    properties: Mapping[str, str],
    location: str | None,
    summaries: Sequence[Mapping[str, str]],
) -> ForeignMaintainer | None:
    """The service that already maintains this table, or None.

    `summaries` are the most recent snapshot summaries, newest first, each with its
    "operation". The first signal found wins, in this order: what the owner declared,
    what the table is (properties, location), what its recent commits show. Managing a
    detected table anyway (forcing) is the caller's decision, not this module's."""
    for check in (_declared, _delta_uniform, _amoro_properties):
        found = check(properties)
        if found:
            return found
    found = _by_location(location)
    if found:
        return found
    theirs = [s for s in summaries if OUR_TASK_KEY not in s]
    return _amoro_commits(properties, theirs) or _streaming_writer(theirs)


def detect_table(table: TableRead, last_n: int = 20) -> ForeignMaintainer | None:
    """`detect` on a pyiceberg table: its properties, location and last `last_n` commits."""
    snapshots = sorted(
        table.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0)
    )
    summaries = [
        {**s.summary.additional_properties, "operation": s.summary.operation.value}
        for s in reversed(snapshots[-last_n:] if last_n > 0 else [])
        if s.summary is not None
    ]
    return detect(table.properties, table.location(), summaries)


def _declared(properties: Mapping[str, str]) -> ForeignMaintainer | None:
    if properties.get(OPT_OUT, "").strip().lower() == "false":
        return ForeignMaintainer(
            "table-owner",
            f"table property {OPT_OUT}=false: the table's owner opted it out of lakewarden",
        )
    declared = properties.get(MAINTAINED_BY, "").strip()
    if declared:
        who = declared.lower() if _NAME.fullmatch(declared.lower()) else "declared"
        return ForeignMaintainer(
            who, f"table property {MAINTAINED_BY}={_shown(declared)} names its maintainer"
        )
    return None


def _delta_uniform(properties: Mapping[str, str]) -> ForeignMaintainer | None:
    version = properties.get(UNIFORM_VERSION)
    if version is None or UNIFORM_TIMESTAMP not in properties:
        return None
    return ForeignMaintainer(
        "delta-uniform",
        f"table properties {UNIFORM_VERSION}={_shown(version)} and {UNIFORM_TIMESTAMP} show "
        "Iceberg metadata generated by Delta UniForm: the data belongs to a Delta table, "
        "maintained as Delta (OPTIMIZE/VACUUM, or Databricks predictive optimization)",
    )


def _amoro_switch(properties: Mapping[str, str]) -> tuple[str, str] | None:
    """Amoro's self-optimizing switch as Amoro reads it: the key and value, if set."""
    for key in (AMORO_ENABLED, AMORO_LEGACY_ENABLED):  # the legacy key only when new is absent
        if key in properties:
            return key, properties[key]
    return None


def _amoro_optimizing_off(properties: Mapping[str, str]) -> bool:
    # Amoro parses it with Iceberg's PropertyUtil.propertyAsBoolean, i.e. Java's
    # Boolean.parseBoolean: only "true" (any case) is true; "false", "no" or "" turn it off.
    switch = _amoro_switch(properties)
    return switch is not None and switch[1].strip().lower() != "true"


def _amoro_properties(properties: Mapping[str, str]) -> ForeignMaintainer | None:
    switch = _amoro_switch(properties)
    if switch is not None:
        key, value = switch
        if value.strip().lower() == "true":
            return ForeignMaintainer(
                "amoro", f"table property {key}={_shown(value)}: Amoro self-optimizes this table"
            )
        # Self-optimizing is off, so its knobs do nothing; expiry and cleaning may be on.
        return _amoro_maintenance(properties)
    # Amoro's default is on: any of its knobs set means the table was tuned for Amoro.
    knobs = sorted(k for k in properties if k.startswith(AMORO_PREFIX) or k in AMORO_LEGACY_KEYS)
    if knobs:
        return ForeignMaintainer(
            "amoro",
            f"table property {knobs[0]}={_shown(properties[knobs[0]])} is set and "
            f"{AMORO_ENABLED} is not (Amoro's default is true): Amoro self-optimizes it",
        )
    return _amoro_maintenance(properties)


def _amoro_maintenance(properties: Mapping[str, str]) -> ForeignMaintainer | None:
    for key, legacy in AMORO_MAINTENANCE_SWITCHES:
        used = key if key in properties or legacy is None else legacy
        value = properties.get(used)
        if value is not None and value.strip().lower() == "true":
            return ForeignMaintainer(
                "amoro", f"table property {used}={_shown(value)}: Amoro maintains this table"
            )
    return None


def _by_location(location: str | None) -> ForeignMaintainer | None:
    if not location:
        return None
    parts = urlsplit(location)
    if parts.scheme in ("s3", "s3a", "s3n") and parts.netloc.endswith(S3_TABLES_BUCKET_SUFFIX):
        return ForeignMaintainer(
            "s3tables",
            f"table location {_shown(location)} is in an S3 table bucket "
            f"(*{S3_TABLES_BUCKET_SUFFIX}): S3 Tables runs compaction and snapshot management "
            "on it unless they are turned off through the S3 Tables maintenance API",
        )
    if UNITY_MANAGED_STORAGE in parts.path:
        return ForeignMaintainer(
            "databricks",
            f"table location {_shown(location)} is Unity Catalog managed storage "
            f"({UNITY_MANAGED_STORAGE.strip('/')}): a managed table, which Databricks "
            "maintains (predictive optimization)",
        )
    return None


def _amoro_commits(
    properties: Mapping[str, str], summaries: Sequence[Mapping[str, str]]
) -> ForeignMaintainer | None:
    producers = set(AMORO_MAINTENANCE)
    if not _amoro_optimizing_off(properties):
        producers.add(AMORO_OPTIMIZE)  # switched off now: its old optimize commits are history
    for age, summary in enumerate(summaries):
        producer = summary.get(AMORO_PRODUCER, "")
        if producer in producers:
            return ForeignMaintainer(
                "amoro",
                f"the {_ordinal(age)} commit carries {AMORO_PRODUCER}={producer}: "
                "Amoro commits maintenance on this table",
            )
    return None


def _streaming_writer(summaries: Sequence[Mapping[str, str]]) -> ForeignMaintainer | None:
    for age, summary in enumerate(summaries):
        if summary.get("operation") != REPLACE:
            continue  # the writer's own appends and overwrites are just writes
        for key in STREAMING_WRITER_KEYS:
            if key in summary:
                return ForeignMaintainer(
                    "streaming-writer",
                    f"the {_ordinal(age)} commit is a replace carrying "
                    f"{key}={_shown(summary[key])}: the streaming writer compacts files "
                    "inline itself",
                )
    return None


def detect_delta(infos: Sequence[Mapping[str, Any]]) -> dict[str, ForeignMaintainer]:
    """Who else optimizes a Delta table, by the commands of lakewarden's it would fight:
    `infos` are the recent commits' commitInfo (delta-rs' `history()`: newest first, each
    with its `version`). `compaction`: the writer's auto compaction (an OPTIMIZE with
    `auto` true, even once); `optimize`: OPTIMIZE or REORG commits lakewarden did not make,
    `DELTA_RECURRING` or more of them (compaction, purge, Z-order and clustering all
    rewrite what they rewrite); `vacuum`: VACUUMs lakewarden did not run, as many."""
    theirs = [i for i in infos if not _ours(i)]
    found: dict[str, ForeignMaintainer] = {}
    auto = next((i for i in theirs if _is_auto_compaction(i)), None)
    if auto is not None:
        found["compaction"] = ForeignMaintainer(
            "auto-compaction",
            f"version {auto.get('version')} is an OPTIMIZE with auto=true by {_by(auto)}: the "
            "writer's auto compaction compacts this table (spark.databricks.delta.autoCompact."
            "enabled, Databricks' optimized writes); lakewarden does not fight it",
        )
    layout = [i for i in theirs if i.get("operation") in DELTA_LAYOUT_OPERATIONS]
    if len(layout) >= DELTA_RECURRING:
        found["optimize"] = ForeignMaintainer(
            _who(layout), _recurring(layout, "OPTIMIZE/REORG", len(infos))
        )
    vacuums = [i for i in theirs if i.get("operation") == DELTA_VACUUM]
    if len(vacuums) >= DELTA_RECURRING:
        found["vacuum"] = ForeignMaintainer(
            _who(vacuums), _recurring(vacuums, "VACUUM", len(infos))
        )
    return found


def _ours(info: Mapping[str, Any]) -> bool:
    """A commit lakewarden made: a `lakewarden.*` key in its commitInfo (delta-rs' custom
    metadata) or in a JSON `userMetadata` (Spark's)."""
    if any(str(k).startswith(OUR_PREFIX) for k in info):
        return True
    user = info.get("userMetadata")
    if not isinstance(user, str) or OUR_PREFIX not in user:
        return False
    try:
        data = json.loads(user)
    except ValueError:
        return False
    return isinstance(data, dict) and any(str(k).startswith(OUR_PREFIX) for k in data)


def _is_auto_compaction(info: Mapping[str, Any]) -> bool:
    if info.get("operation") != "OPTIMIZE":
        return False
    auto = (info.get("operationParameters") or {}).get("auto")
    return str(auto).strip().lower() == "true"


def _by(info: Mapping[str, Any]) -> str:
    """Who wrote a commit, as its commitInfo says: user and engine."""
    said = [f"user {_shown(str(info['userName']))}"] if info.get("userName") else []
    engine = info.get("engineInfo") or info.get("clientVersion")
    said += [_shown(str(engine))] if engine else []
    return ", ".join(said) or "an unnamed writer"


def _who(infos: Sequence[Mapping[str, Any]]) -> str:
    engine = str(infos[0].get("engineInfo") or "").lower()
    return "databricks" if "databricks" in engine else "delta-optimizer"


def _recurring(infos: Sequence[Mapping[str, Any]], what: str, window: int) -> str:
    versions = ", ".join(str(i.get("version")) for i in infos[:5])
    more = f" and {len(infos) - 5} more" if len(infos) > 5 else ""
    return (
        f"{len(infos)} {what} commits lakewarden did not make in the last {window} versions "
        f"(versions {versions}{more}; the latest by {_by(infos[0])}): another service "
        "maintains this table; lakewarden does not fight it"
    )


def _ordinal(age: int) -> str:
    """0 -> "latest", 1 -> "2nd latest", ..."""
    if age == 0:
        return "latest"
    n = age + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix} latest"


def _shown(value: str) -> str:
    """A property or summary value as evidence shows it: control characters escaped, cut."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"
