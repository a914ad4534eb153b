"""The pure rules of Hudi's and Delta's incremental planning: which partitions an instant
touched and the hudi-rs filters that list one partition; how an add action's values are
typed as delta-rs types them."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest

from lakewarden.formats.delta.incremental import Unreadable, _flat, _types
from lakewarden.formats.hudi.incremental import (
    NotPerPartition,
    partition_fields,
    partition_filters,
    touched_partitions,
)


def test_an_instant_touches_the_partitions_its_metadata_names() -> None:
    write: dict[str, Any] = {"partitionToWriteStats": {"r0": [], "r2": []}}
    replace = {"partitionToWriteStats": {}, "partitionToReplaceFileIds": {"r1": ["f"]}}
    assert touched_partitions("deltacommit", write) == {"r0", "r2"}
    assert touched_partitions("replacecommit", replace) == {"r1"}  # a delete_partition
    assert touched_partitions("clean", {"partitionMetadata": {"r0": {}}}) == {"r0"}
    assert touched_partitions("savepoint", {"partitionMetadata": {"r0": {}}}) == set()


def test_hudi_rs_filters_name_one_partition() -> None:
    assert partition_fields({"hoodie.table.partition.fields": "a:SIMPLE, b"}) == ["a", "b"]
    assert partition_filters(["day"], "day=7") == [("day", "=", "7")]
    assert partition_filters(["region"], "r1") == [("region", "=", "r1")]
    assert partition_filters(["a", "b"], "a=1/x") == [("a", "=", "1"), ("b", "=", "x")]
    for fields, path in ((["a", "b"], "a=1"), ([], ""), (["a"], "a=x%2Fy")):
        with pytest.raises(NotPerPartition):
            partition_filters(fields, path)


def test_an_add_action_is_typed_as_delta_rs_types_it() -> None:
    schema = {
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "f", "type": "float"},
            {"name": "d", "type": "date"},
            {"name": "ts", "type": "timestamp"},
            {"name": "dec", "type": "decimal(5,2)"},
            {"name": "st", "type": {"type": "struct", "fields": [{"name": "a", "type": "long"}]}},
            {"name": "p", "type": "integer"},
            {"name": "b", "type": "binary"},
        ]
    }
    types = _types(schema)
    stats = (
        '{"numRecords": 2, "minValues": {"id": 1, "f": 1.1, "d": "2024-01-01", '
        '"ts": "2024-01-01T01:02:03.456Z", "dec": 1.23, "st": {"a": 5}}, '
        '"maxValues": {"id": 2, "f": null}}'
    )
    add = {"path": "p=7/x.parquet", "size": 10, "partitionValues": {"p": "7"}, "stats": stats}
    row = _flat(add, ["p"], types)
    assert row["partition.p"] == 7 and row["num_records"] == 2 and row["size_bytes"] == 10
    assert row["min.f"] == pytest.approx(1.1) and row["min.f"] != 1.1  # float32, as delta-rs
    assert row["min.d"] == date(2024, 1, 1) and row["min.dec"] == Decimal("1.23")
    assert row["min.ts"] == datetime(2024, 1, 1, 1, 2, 3, 456000, tzinfo=UTC)
    assert row["min.st.a"] == 5 and row["max.f"] is None
    with pytest.raises(Unreadable):  # a type not typed here: read in full
        _flat({**add, "stats": '{"minValues": {"b": "xx"}}'}, ["p"], types)
    with pytest.raises(Unreadable):  # delta-rs shows paths unescaped
        _flat({**add, "path": "p=7/a%20b.parquet"}, ["p"], types)
