"""What pyiceberg reads of a table's current snapshot, with no JVM: its live data files
(size, rows, partition, column bounds) and the delete files that apply to them, deletion
vectors (format v3) among them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.avro.file import AvroFile
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_ENTRY_SCHEMAS,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    _inherit_from_manifest,
)
from pyiceberg.manifest import DataFile as PyDataFile
from pyiceberg.table import ManifestGroupPlanner, Table
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import PrimitiveType

Partition = tuple[tuple[str, Any], ...]  # ((partition field name, value), ...)


@dataclass(frozen=True, slots=True)  # slots: a plan cache holds a million of them
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
    size: int  # of a deletion vector: its blob's bytes in the Puffin file
    records: int
    kind: str  # "position" | "equality"
    spec_id: int = 0
    partition: Partition = ()
    # A deletion vector (format v3): a position delete stored as one blob of a Puffin file
    # (several share a file), applying to exactly one data file.
    referenced_data_file: str | None = None
    content_offset: int | None = None

    @property
    def is_deletion_vector(self) -> bool:
        return self.referenced_data_file is not None

    @property
    def key(self) -> str:
        """Unique among a snapshot's delete files: a deletion vector's path is not."""
        return self.path if self.content_offset is None else f"{self.path}#{self.content_offset}"


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
    Equality deletes (Flink's upserts), which pyiceberg's scan planning refuses, are matched
    here as Iceberg matches them: to the older data files of their partition (of every
    partition when the delete's spec is unpartitioned). Deletion vectors (format v3) are
    exact: each removes its record count from the one data file it references
    (`deletion_vectors`; pyiceberg's planner, reading manifests as v2, cannot tell which).
    """
    snapshot = table.snapshot_by_name(ref) if ref else table.current_snapshot()
    if snapshot is None:
        return TableFiles(None, [], [])
    wanted = wanted_bounds(table, columns)
    specs = table.specs()
    partition_of = partition_namer(table)

    data_seq: dict[str, int] = {}
    # (spec id, partition) -> [(data sequence number, equality delete)]; key None: global
    equality: dict[tuple[int, Partition] | None, list[tuple[int, DeleteFile]]] = defaultdict(list)

    manifests = snapshot.manifests(table.io)
    dvs = deletion_vectors(table, manifests, partition_of)
    described: dict[str, DeleteFile] = {}  # a position-delete file, described once

    def position(d: Any) -> DeleteFile:
        if d.file_path not in described:
            described[d.file_path] = describe_delete(d, partition_of)
        return described[d.file_path]

    def set_equality_aside(entry: ManifestEntry) -> bool:
        f, seq = entry.data_file, entry.sequence_number or 0
        if f.file_format == FileFormat.PUFFIN:
            return False  # a deletion vector: matched by `deletion_vectors`
        if f.content == DataFileContent.EQUALITY_DELETES:
            key = (f.spec_id, partition_of(f)) if specs[f.spec_id].fields else None
            equality[key].append((seq, describe_delete(f, partition_of)))
            return False
        if f.content == DataFileContent.DATA:
            data_seq[f.file_path] = seq
        return True

    planner = ManifestGroupPlanner(table.metadata, table.io)
    tasks = list(planner.plan_files(manifests, set_equality_aside))
    applied = {
        task.file.file_path: [
            *(position(d) for d in task.delete_files),
            *dvs.get(task.file.file_path, ()),
            *(
                d
                for key in ((task.file.spec_id, partition_of(task.file)), None)
                for seq, d in equality.get(key, ())
                if seq > data_seq[task.file.file_path]
            ),
        ]
        for task in tasks
    }

    deletes: dict[str, DeleteFile] = {}
    applies_to: dict[str, int] = defaultdict(int)
    every_equality = [d for group in equality.values() for _, d in group]
    for d in [d for ds in applied.values() for d in ds] + every_equality:
        deletes[d.key] = d
    for ds in applied.values():
        for d in ds:
            applies_to[d.key] += 1

    data: list[DataFile] = []
    for task in tasks:
        f = task.file
        deleted = sum(d.records / applies_to[d.key] for d in applied[f.file_path])
        data.append(describe(f, partition_of(f), wanted, deleted))
    return TableFiles(snapshot.snapshot_id, data, list(deletes.values()))


def describe_delete(d: Any, partition_of: Callable[[Any], Partition]) -> DeleteFile:
    """One pyiceberg delete file (position or equality; not a deletion vector)."""
    kind = "equality" if d.content == DataFileContent.EQUALITY_DELETES else "position"
    return DeleteFile(
        d.file_path, d.file_size_in_bytes, d.record_count, kind, d.spec_id, partition_of(d)
    )


# Where the v3 fields of a data_file are in pyiceberg's record read with the v3 schema.
_V3_FIELD = {f.name: i for i, f in enumerate(DATA_FILE_TYPE[3].fields)}


def deletion_vectors(
    table: Table, manifests: Iterable[ManifestFile], partition_of: Callable[[Any], Partition]
) -> dict[str, list[DeleteFile]]:
    """The live deletion vectors of `manifests`, by the data file each references. Empty
    below format v3. pyiceberg 0.12 reads every manifest with its v2 schema, which drops
    `referenced_data_file`, `content_offset` and `content_size_in_bytes`; the delete
    manifests are read here again with its v3 schema, which keeps them."""
    if table.metadata.format_version < 3:
        return {}
    out: dict[str, list[DeleteFile]] = defaultdict(list)
    for m in manifests:
        if m.content != ManifestContent.DELETES:
            continue
        with AvroFile[ManifestEntry](
            table.io.new_input(m.manifest_path),
            MANIFEST_ENTRY_SCHEMAS[3],
            read_types={-1: ManifestEntry, 2: PyDataFile},
            read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
        ) as reader:
            for entry in reader:
                if entry.status == ManifestEntryStatus.DELETED:
                    continue
                f = _inherit_from_manifest(entry, m).data_file
                referenced = f[_V3_FIELD["referenced_data_file"]]
                if f.file_format != FileFormat.PUFFIN or referenced is None:
                    continue
                size = f[_V3_FIELD["content_size_in_bytes"]]
                out[referenced].append(
                    DeleteFile(
                        f.file_path,
                        size if size is not None else f.file_size_in_bytes,
                        f.record_count,
                        "position",
                        f.spec_id,
                        partition_of(f),
                        referenced,
                        f[_V3_FIELD["content_offset"]],
                    )
                )
    return dict(out)


Bounds = dict[int, tuple[str, PrimitiveType]]  # field id -> (column name, type)


def wanted_bounds(table: Table, columns: Iterable[str]) -> Bounds:
    """The columns whose bounds are asked for, by field id (only primitives carry bounds)."""
    schema = table.schema()
    wanted: Bounds = {}
    for name in columns:
        col = schema.find_field(name)
        if isinstance(col.field_type, PrimitiveType):
            wanted[col.field_id] = (name, col.field_type)
    return wanted


def partition_namer(table: Table) -> Callable[[Any], Partition]:
    """A pyiceberg data file's partition, as ((field name, value), ...) of its spec."""
    names = {spec_id: [pf.name for pf in spec.fields] for spec_id, spec in table.specs().items()}

    def partition_of(f: Any) -> Partition:
        fields = names[f.spec_id]
        return tuple(zip(fields, [f.partition[i] for i in range(len(fields))], strict=True))

    return partition_of


def describe(f: Any, partition: Partition, wanted: Bounds, deleted: float = 0.0) -> DataFile:
    """One pyiceberg data file as the planners see it: `deleted` rows estimated deleted."""
    bounds = {}
    for field_id, (name, ftype) in wanted.items():
        lo = (f.lower_bounds or {}).get(field_id)
        hi = (f.upper_bounds or {}).get(field_id)
        if lo is not None and hi is not None:
            bounds[name] = (from_bytes(ftype, lo), from_bytes(ftype, hi))
    return DataFile(
        path=f.file_path,
        size=f.file_size_in_bytes,
        records=f.record_count,
        spec_id=f.spec_id,
        partition=partition,
        bounds=bounds,
        deleted_records=min(float(f.record_count), deleted),
    )


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
