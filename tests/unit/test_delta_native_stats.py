"""A natively rewritten Delta file's statistics, read from its Parquet footer
(`native_rewrite.stats_of`): what Delta's readers skip files by, so only values whose JSON
form is exact are kept (no timestamps, decimals, booleans, binary, or strings past 32
characters), and null counts always."""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lakewarden.formats.delta.native_rewrite import stats_of


def test_stats_keep_exact_bounds_and_every_null_count(tmp_path: Path) -> None:
    rows = pa.table(
        {
            "i": pa.array([3, None, -7], pa.int64()),
            "f": pa.array([1.5, 0.25, None], pa.float64()),
            "d": pa.array([date(2024, 1, 2), date(2023, 5, 6), None]),
            "s": ["b", "a", None],
            "long": ["x" * 40, "y", "z"],
            "t": pa.array([datetime(2024, 1, 1), None, None], pa.timestamp("us", tz="UTC")),
            "m": pa.array([Decimal("1.25"), None, None], pa.decimal128(10, 2)),
            "b": [True, False, None],
            "nulls": pa.array([None, None, None], pa.int32()),
        }
    )
    path = str(tmp_path / "f.parquet")
    pq.write_table(rows, path, row_group_size=2)  # two row groups: bounds folded across
    stats = json.loads(stats_of(path, [*rows.column_names[:-1], "nulls", "missing"]))
    assert stats["numRecords"] == 3
    assert stats["minValues"] == {"i": -7, "f": 0.25, "d": "2023-05-06", "s": "a"}
    assert stats["maxValues"] == {"i": 3, "f": 1.5, "d": "2024-01-02", "s": "b"}
    assert stats["nullCount"] == {
        "i": 1,
        "f": 1,
        "d": 1,
        "s": 1,
        "long": 0,
        "t": 2,
        "m": 2,
        "b": 1,
        "nulls": 3,
    }
