"""Job entrypoints: execute one plan with Iceberg's own Spark procedures.

Everything that reaches SQL is validated first: identifiers by `TableRef`,
procedure options by `_option_map` (keys from a fixed allow-list, values
digits or booleans), so nothing user-controlled is pasted into SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakewarden.catalog import IDENTIFIER, TableRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REWRITE_OPTIONS = frozenset(
    {
        "target-file-size-bytes",
        "min-file-size-bytes",
        "max-file-size-bytes",
        "min-input-files",
        "partial-progress.enabled",
        "partial-progress.max-commits",
        "max-concurrent-file-group-rewrites",
        "rewrite-all",
    }
)
_SAFE_VALUE = re.compile(r"^(\d{1,19}|true|false)$")


class PlanRejected(ValueError):
    """A plan that would not be safe to execute (never retried)."""


@dataclass(frozen=True)
class JobResult:
    metrics: dict[str, Any]
    committed_snapshot_id: int | None


def _option_map(options: dict[str, str]) -> str:
    parts = []
    for key, value in sorted(options.items()):
        if key not in REWRITE_OPTIONS or not _SAFE_VALUE.match(str(value)):
            raise PlanRejected(f"option {key}={value!r} is not allowed")
        parts.append(f"'{key}', '{value}'")
    return f"map({', '.join(parts)})"


def compaction_sql(catalog: str, ref: TableRef, plan: dict[str, Any]) -> str:
    """The CALL statement for a compaction plan (pure; tested without Spark)."""
    if not IDENTIFIER.match(catalog):
        raise PlanRejected(f"invalid catalog name {catalog!r}")
    if plan.get("action") != "rewrite_data_files" or plan.get("strategy") != "binpack":
        raise PlanRejected(f"not a bin-pack plan: {plan.get('action')}/{plan.get('strategy')}")
    return (
        f"CALL `{catalog}`.system.rewrite_data_files("
        f"table => '{ref.namespace}.{ref.name}', strategy => 'binpack', "
        f"options => {_option_map(plan.get('options', {}))})"
    )


def run_compaction(
    spark: SparkSession, catalog: str, ref: TableRef, plan: dict[str, Any]
) -> JobResult:
    row = spark.sql(compaction_sql(catalog, ref, plan)).collect()[0].asDict()
    metrics = {
        "rewritten_data_files": row.get("rewritten_data_files_count", 0),
        "added_data_files": row.get("added_data_files_count", 0),
        "rewritten_bytes": row.get("rewritten_bytes_count", 0),
        "failed_data_files": row.get("failed_data_files_count", 0),
    }
    committed = None
    if metrics["rewritten_data_files"]:
        # Our commit is the newest 'replace' snapshot (writers only append/overwrite/delete).
        snap = spark.sql(
            f"SELECT snapshot_id FROM {ref.spark_name(catalog)}.snapshots "
            "WHERE operation = 'replace' ORDER BY committed_at DESC LIMIT 1"
        ).collect()
        committed = int(snap[0]["snapshot_id"]) if snap else None
    return JobResult(metrics, committed)
