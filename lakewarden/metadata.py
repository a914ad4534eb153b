"""What pyiceberg reads of a table's current snapshot, with no JVM: its live data files
(size, rows, partition, column bounds) and the delete files that apply to them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import PrimitiveType

Partition = tuple[tuple[str, Any], ...]  # ((partition field name, value), ...)


@dataclass(frozen=True)
class DataFile:
    path: str
    size: int
    records: int
    spec_id: int
    partition: Partition
    # column name -> (lower, upper), for the columns asked for (when the writer kept metrics)
    bounds: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    # estimated rows deleted by the delete files applying to this file
    deleted_records: float = 0.0


@dataclass(frozen=True)
class DeleteFile:
    path: str
    size: int
    records: int
    kind: str  # "position" | "equality"
    spec_id: int = 0
    partition: Partition = ()


@dataclass(frozen=True)
class TableFiles:
    snapshot_id: int | None
    data: list[DataFile]
    deletes: list[DeleteFile]


def read_files(table: Table, columns: Iterable[str] = (), ref: str | None = None) -> TableFiles:
    """The current snapshot's live files (or the head of branch `ref`'s), with bounds for
    `columns` decoded to Python values.

    A delete file's rows are spread evenly over the data files it applies to: pyiceberg
    does not say which rows of which file a position-delete file removes without reading it.
    """
    snapshot = table.snapshot_by_name(ref) if ref else table.current_snapshot()
    if snapshot is None:
        return TableFiles(None, [], [])
    schema = table.schema()
    wanted = {}
    for name in columns:
        col = schema.find_field(name)
        if isinstance(col.field_type, PrimitiveType):  # only primitives carry bounds
            wanted[col.field_id] = (name, col.field_type)
    specs = table.specs()
    tasks = list(table.scan(snapshot_id=snapshot.snapshot_id).plan_files())

    deletes: dict[str, DeleteFile] = {}
    applies_to: dict[str, int] = {}
    for task in tasks:
        for d in task.delete_files:
            kind = "equality" if d.content == DataFileContent.EQUALITY_DELETES else "position"
            names = [pf.name for pf in specs[d.spec_id].fields]
            deletes[d.file_path] = DeleteFile(
                d.file_path,
                d.file_size_in_bytes,
                d.record_count,
                kind,
                d.spec_id,
                tuple(zip(names, [d.partition[i] for i in range(len(names))], strict=True)),
            )
            applies_to[d.file_path] = applies_to.get(d.file_path, 0) + 1

    data: list[DataFile] = []
    for task in tasks:
        f = task.file
        names = [pf.name for pf in specs[f.spec_id].fields]
        bounds = {}
        for field_id, (name, ftype) in wanted.items():
            lo = (f.lower_bounds or {}).get(field_id)
            hi = (f.upper_bounds or {}).get(field_id)
            if lo is not None and hi is not None:
                bounds[name] = (from_bytes(ftype, lo), from_bytes(ftype, hi))
        deleted = sum(
            deletes[d.file_path].records / applies_to[d.file_path] for d in task.delete_files
        )
        data.append(
            DataFile(
                path=f.file_path,
                size=f.file_size_in_bytes,
                records=f.record_count,
                spec_id=f.spec_id,
                partition=tuple(
                    zip(names, [f.partition[i] for i in range(len(names))], strict=True)
                ),
                bounds=bounds,
                deleted_records=min(float(f.record_count), deleted),
            )
        )
    return TableFiles(snapshot.snapshot_id, data, list(deletes.values()))


@dataclass(frozen=True)
class KeyBucket:
    """A partition field that buckets the table's key: each of its partitions is a bucket."""

    field: str  # the partition field's name (a key of DataFile.partition)
    column: str  # the source column
    num_buckets: int


def key_buckets(table: Table) -> dict[int, KeyBucket]:
    """Spec id -> its partition field that buckets the key (bucket(N, id)): a bucket transform
    on an identifier field, or on any column when the table declares no identifier fields
    (Spark's MERGE INTO needs none, so upsert tables often have none)."""
    schema = table.schema()
    keys = set(schema.identifier_field_ids)
    out: dict[int, KeyBucket] = {}
    for spec_id, spec in table.specs().items():
        for pf in spec.fields:
            if isinstance(pf.transform, BucketTransform) and (not keys or pf.source_id in keys):
                column = schema.find_column_name(pf.source_id) or str(pf.source_id)
                out[spec_id] = KeyBucket(pf.name, column, pf.transform.num_buckets)
                break
    return out


def jsonable(value: Any) -> Any:
    """A partition value or bound as JSON can carry it."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
