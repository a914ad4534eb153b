"""The Hudi and Delta validations' row digest (`formats.digest`): DuckDB's hash summed
over the rows an independent reader produced. Each of issue 30's value-level mutations of
a rewrite changes it; the reader's choice of Arrow layout for the same values does not."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakewarden.formats.digest import Digest, digest_rows, hashed_rows

TABLE = pa.table(
    {"id": [1, 2, 3], "v": ["a", "b", None], "w": [None, "x", "y"], "_meta": ["m1", "m2", "m3"]}
)


def _with(**columns: list[object]) -> pa.Table:
    return pa.table({**{c: TABLE[c] for c in TABLE.column_names}, **columns})


@pytest.mark.parametrize(
    ("mutation", "table"),
    [
        ("a row dropped", TABLE.slice(0, 2)),
        ("a row doubled", pa.concat_tables([TABLE, TABLE.slice(0, 1)])),
        ("a value changed", _with(v=["a", "changed", None])),
        ("a value moved between rows", _with(v=["b", "a", None])),
        ("a NULL moved to its neighbour column", _with(v=["a", "b", "y"], w=[None, "x", None])),
    ],
)
def test_every_value_level_mutation_changes_the_digest(mutation: str, table: pa.Table) -> None:
    assert digest_rows(table, ["_meta"]) != digest_rows(TABLE, ["_meta"]), mutation


def test_the_same_rows_in_another_order_layout_or_metadata_digest_alike() -> None:
    same = pa.table(
        {
            "_meta": ["other", "metadata", "columns"],  # skipped: a rewrite changes them
            "w": pa.array(["y", None, "x"]).dictionary_encode(),
            "v": pa.array([None, "a", "b"], pa.string_view()),
            "id": pa.array([3, 1, 2], pa.int32()),
        }
    )
    assert digest_rows(same, ["_meta"]) == digest_rows(TABLE, ["_meta"])
    assert digest_rows(TABLE.slice(0, 0)) == Digest(0, 0)


def test_row_hashes_sum_to_the_digest() -> None:
    hashed = hashed_rows(TABLE, ["id", "v", "w"], keep=["_meta"])
    assert hashed.column_names == ["_meta", "hash"]
    total = sum(hashed["hash"].to_pylist()) % (1 << 64)
    assert digest_rows(TABLE, ["_meta"]) == Digest(3, total)
