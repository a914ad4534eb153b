"""What readiness reads of a Hudi table's timeline (`lakewarden.readiness`): the type of a
partition field, and the partition values each completed write touched. A write commit
(`commit`, `deltacommit`, `replacecommit`) touches the partition paths of its write stats
and of the file groups it replaced (a `delete_partition`); a table service's commit (a
compaction, a clustering, a log compaction: the same rows in other files) touches none.

A partition path is the partition fields' values joined by `/`, each `field=value` where
the table writes Hive-style paths (`hoodie.datasource.write.hive_style_partitioning`)."""

from __future__ import annotations

import json
from typing import Any

from lakewarden.formats.base import Commit
from lakewarden.formats.hudi.timeline import WRITE_ACTIONS, HudiTimeline

# A write's operationType when it is a table service, not a writer's data change.
SERVICE_OPERATIONS = frozenset({"CLUSTER", "COMPACT", "LOG_COMPACT"})


class NotAPartitionField(ValueError):
    """The table is not partitioned by the field: say by which it is."""


def partition_fields(timeline: HudiTimeline) -> list[str]:
    """The table's partition fields, in path order (`hoodie.table.partition.fields`; table
    version 8 writes `field:keygen-type`)."""
    raw = timeline.properties.get("hoodie.table.partition.fields", "")
    return [f.split(":", 1)[0].strip() for f in raw.split(",") if f.strip()]


def partition_field_type(timeline: HudiTimeline, column: str) -> str:
    """The Avro type of partition field `column` in the table's schema (`date` for a date
    logical type, else its type name: `string`, `int`, ...); NotAPartitionField if the
    table is not partitioned by it."""
    fields = partition_fields(timeline)
    if column not in fields:
        raise NotAPartitionField(
            f"readiness.partition: the Hudi table is not partitioned by {column!r} (its "
            f"partition fields: {', '.join(fields) or 'none'})"
        )
    schema = timeline.properties.get("hoodie.table.create.schema")
    try:
        fields_of = json.loads(schema)["fields"] if schema else []
    except (ValueError, KeyError, TypeError):
        fields_of = []
    for field in fields_of:
        if field.get("name") == column:
            return _avro_type(field.get("type"))
    return "string"


def _avro_type(avro: Any) -> str:
    if isinstance(avro, list):  # a union with null
        avro = next((t for t in avro if t != "null"), "string")
    if isinstance(avro, dict):
        return str(avro.get("logicalType") or avro.get("type") or "string")
    return str(avro)


def is_data_commit(commit: Commit) -> bool:
    """A writer's write (not a table service's rewrite, a clean or a rollback)."""
    meta = commit.native or {}
    if commit.operation not in WRITE_ACTIONS or meta.get("compacted"):
        return False
    return str(meta.get("operationType") or "").upper() not in SERVICE_OPERATIONS


def touched_values(timeline: HudiTimeline, commit: Commit, column: str) -> set[str]:
    """The values of partition field `column` that data commit `commit` (a `HudiTimeline`
    commit) wrote to or replaced file groups in."""
    fields = partition_fields(timeline)
    at = fields.index(column)
    meta = commit.native or {}
    paths = set(meta.get("partitionToWriteStats") or {})
    paths |= set(meta.get("partitionToReplaceFileIds") or {})
    out: set[str] = set()
    for path in paths:
        parts = str(path).split("/")
        if len(parts) != len(fields):
            continue  # a path of another partitioning (or the empty path: unpartitioned)
        value = parts[at]
        prefix = f"{column}="
        out.add(value[len(prefix) :] if value.startswith(prefix) else value)
    return out
