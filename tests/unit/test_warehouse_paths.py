"""A writer's base path back to the table of a path catalog (`formats.warehouse.table_at`),
however its engine spells the path: Hudi's callback sends `file:///…`, Hadoop `file:/…`,
`s3a://` for a warehouse registered as `s3://`."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.formats.warehouse import table_at, table_path
from lakewarden.secret_refs import RefRules


def _entry(warehouse: str) -> CatalogEntry:
    return CatalogEntry(
        "h", "hudi", {"warehouse": warehouse}, refs=RefRules(Path("/nonexistent"), "LW_")
    )


@pytest.mark.parametrize(
    ("warehouse", "path", "found"),
    [
        ("/data/wh", "/data/wh/lake/orders", ("lake", "orders")),
        ("/data/wh/", "file:///data/wh/lake/orders/", ("lake", "orders")),
        ("file:///data/wh", "file:/data/wh/lake/./orders", ("lake", "orders")),
        ("/data/wh", "/data/wh/a/b/orders", ("a.b", "orders")),  # a namespace of two levels
        ("s3://bucket/wh", "s3a://bucket/wh/lake/orders", ("lake", "orders")),
        ("hdfs://nn:8020/wh", "hdfs://nn:8020/wh/lake/orders", ("lake", "orders")),
        ("/data/wh", "/data/wh/orders", None),  # no namespace
        ("/data/wh", "/data/wh2/lake/orders", None),  # a sibling, not under it
        ("/data/wh", "/data/wh/lake/../../elsewhere/x", None),
        ("s3://bucket/wh", "s3://other/wh/lake/orders", None),
        ("hdfs://nn:8020/wh", "/wh/lake/orders", None),
    ],
)
def test_a_base_path_names_its_table(
    warehouse: str, path: str, found: tuple[str, str] | None
) -> None:
    assert table_at(_entry(warehouse), path) == found


def test_table_at_inverts_table_path() -> None:
    entry = _entry("s3://bucket/wh")
    ref = TableRef("sales.eu", "orders")
    assert table_at(entry, table_path(entry, ref)) == ("sales.eu", "orders")
