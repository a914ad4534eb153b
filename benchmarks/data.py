"""Synthetic but realistic tables for the benchmarks, the same bytes for the same seed.

Seven columns like a clickstream: a sequential id, a skewed user key (a few users make
most events), a timestamp, a skewed low-cardinality category, a URL-like string, an
amount and a country code (`extra_columns` more for figures whose cost grows with the
columns). Written by pyiceberg (no JVM) in `appends` commits of `files_per_append` small
files each, as a busy writer leaves a table; partitioned by day(ts), an append is one
file per day instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform
from pyiceberg.types import (
    DoubleType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "user_id", LongType(), required=False),
    NestedField(3, "ts", TimestamptzType(), required=False),
    NestedField(4, "category", StringType(), required=False),
    NestedField(5, "url", StringType(), required=False),
    NestedField(6, "amount", DoubleType(), required=False),
    NestedField(7, "country", StringType(), required=False),
)
BY_DAY = PartitionSpec(
    PartitionField(source_id=3, field_id=1000, transform=DayTransform(), name="ts_day")
)
CATEGORIES = [f"cat{i:02d}" for i in range(40)]
COUNTRIES = ["us", "de", "fr", "in", "br", "jp", "gb", "cn", "ng", "mx", "es", "it"]
T0_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
DAY_US = 86_400_000_000


@dataclass(frozen=True)
class Shape:
    appends: int
    files_per_append: int
    rows_per_file: int

    @property
    def rows(self) -> int:
        return self.appends * self.files_per_append * self.rows_per_file


def _uniform(rows: int, seed: int) -> pa.Array:
    return pc.random(rows, initializer=seed)


def _floor(values: pa.Array) -> pa.Array:
    return pc.cast(pc.floor(values), pa.int64())


def _skewed_index(rows: int, seed: int, n: int) -> pa.Array:
    """Indexes in [0, n) with a heavy head: floor(n * u^3)."""
    return _floor(pc.multiply(pc.power(_uniform(rows, seed), 3), n))


def batch(seed: int, first_id: int, rows: int, days: int = 30) -> pa.Table:
    """`rows` events from one writer, ids from `first_id`, timestamps over `days` days
    (vectorised: a gigabyte is generated in seconds, the same for the same seed)."""
    # Pareto: 1000 / (1 - u)^0.8, a few users make most events
    users = _floor(pc.divide(1000.0, pc.power(pc.subtract(1.0, _uniform(rows, seed)), 0.8)))
    cats = pc.take(pa.array(CATEGORIES), _skewed_index(rows, seed + 1, len(CATEGORIES)))
    countries = pc.take(pa.array(COUNTRIES), _skewed_index(rows, seed + 2, len(COUNTRIES)))
    offsets = _floor(pc.multiply(_uniform(rows, seed + 3), days * DAY_US))
    ts = pc.add(pc.take(offsets, pc.sort_indices(offsets)), T0_US)  # a writer moves forward
    item = pc.cast(_floor(pc.multiply(_uniform(rows, seed + 4), 200_000)), pa.string())
    session = pc.cast(_floor(pc.multiply(_uniform(rows, seed + 6), 1e12)), pa.string())
    url = pc.binary_join_element_wise(
        "", cats, "item", pc.binary_join_element_wise(item, session, "?s="), "/"
    )
    amount = pc.round(pc.exp(pc.multiply(_uniform(rows, seed + 5), 8.0)), 2)
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + rows), pa.int64()),
            "user_id": users,
            "ts": pc.cast(ts, pa.timestamp("us", tz="UTC")),
            "category": cats,
            "url": url,
            "amount": amount,
            "country": countries,
        }
    )


def wide_schema(extra_columns: int) -> Schema:
    """SCHEMA and `extra_columns` long columns m01, m02, ... after it."""
    extra = [
        NestedField(8 + k, f"m{k + 1:02d}", LongType(), required=False)
        for k in range(extra_columns)
    ]
    return Schema(*SCHEMA.fields, *extra)


def widen(rows: pa.Table, extra_columns: int) -> pa.Table:
    """`rows` with wide_schema's extra columns: measures derived from id and user_id (a
    few thousand distinct values each, as counters and codes are; cheap to generate)."""
    for k in range(extra_columns):
        mixed = pc.add(pc.multiply(rows["id"], 2 * k + 3), rows["user_id"])
        rows = rows.append_column(f"m{k + 1:02d}", pc.bit_wise_and(mixed, 4095 * (k + 1)))
    return rows


def create(
    catalog: Catalog,
    identifier: str,
    shape: Shape,
    seed: int = 7,
    *,
    spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
    extra_columns: int = 0,
    days: int = 30,
) -> Table:
    """A fresh table (a previous one of that name is dropped) written as `shape` says."""
    namespace = identifier.rsplit(".", 1)[0]
    catalog.create_namespace_if_not_exists(namespace)
    if catalog.table_exists(identifier):
        catalog.purge_table(identifier)
    schema = wide_schema(extra_columns)
    table = catalog.create_table(identifier, schema=schema, partition_spec=spec)
    next_id = 0
    for n in range(shape.appends):
        rows = batch(seed + n, next_id, shape.files_per_append * shape.rows_per_file, days)
        rows = widen(rows, extra_columns)
        next_id += rows.num_rows
        # pyiceberg splits an append into files of this many in-memory bytes
        target = max(1, rows.nbytes // shape.files_per_append)
        with table.transaction() as tx:
            tx.set_properties({"write.target-file-size-bytes": str(target)})
            tx.append(rows)
        table = table.refresh()
    if "write.target-file-size-bytes" in table.properties:
        with table.transaction() as tx:  # the files are written; leave no odd setting behind
            tx.remove_properties("write.target-file-size-bytes")
    return table.refresh()
