"""A natively rewritten Delta file's statistics, read from its Parquet footer
(`native_rewrite.stats_of`): what Delta's readers skip files by, so only bounds that never
exclude a value the file holds are kept (timestamps to the millisecond rounded outwards,
decimals only with an exact JSON number; no binary, no strings past 32 characters), and
null counts always."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
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
    t = "2024-01-01T00:00:00.000Z"
    assert stats["minValues"] == {
        "i": -7,
        "f": 0.25,
        "d": "2023-05-06",
        "s": "a",
        "t": t,
        "m": 1.25,
        "b": False,
    }
    assert stats["maxValues"] == {
        "i": 3,
        "f": 1.5,
        "d": "2024-01-02",
        "s": "b",
        "t": t,
        "m": 1.25,
        "b": True,
    }
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


def test_timestamp_bounds_round_outwards_and_inexact_decimals_are_left_out(
    tmp_path: Path,
) -> None:
    """Microseconds past the millisecond: the min rounds down and the max up (a max rounded
    down, as delta-rs writes it, would let a reader skip the file holding the max); a
    timestamp without a zone is spelled without one; 0.1 has no exact JSON number beside
    a 12-digit decimal's, so that column keeps its null count only."""
    utc = datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    rows = pa.table(
        {
            "t": pa.array(
                [utc, utc + timedelta(days=1, microseconds=876543)], pa.timestamp("us", tz="UTC")
            ),
            "ntz": pa.array([datetime(2024, 1, 1, 23, 59, 59, 999999)], pa.timestamp("us")).take(
                [0, 0]
            ),
            "exact": pa.array([Decimal("0.10"), Decimal("2.50")], pa.decimal128(12, 2)),
            "inexact": pa.array(
                [Decimal("0.1000000000000000055511151231"), Decimal("1")],
                pa.decimal128(38, 28),
            ),
        }
    )
    path = str(tmp_path / "f.parquet")
    pq.write_table(rows, path)
    stats = json.loads(stats_of(path, rows.column_names))
    assert stats["minValues"] == {
        "t": "2024-01-01T00:00:00.123Z",
        "ntz": "2024-01-01 23:59:59.999",
        "exact": 0.1,
    }
    assert stats["maxValues"] == {
        "t": "2024-01-02T00:00:01.000Z",  # 00:00:00.999999, rounded up
        "ntz": "2024-01-02 00:00:00.000",
        "exact": 2.5,
    }
    assert stats["nullCount"] == {"t": 0, "ntz": 0, "exact": 0, "inexact": 0}
