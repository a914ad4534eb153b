"""What explain says of a table's Iceberg format version (`explain_format`), on metadata
pyiceberg builds: v3 names what it keeps (row lineage) and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField

from lakewarden.health.explain import explain_format
from services.api.schemas import FormatExplainOut


class _Table:
    def __init__(self, version: int) -> None:
        schema = Schema(NestedField(1, "id", LongType(), required=False))
        self.metadata: Any = new_table_metadata(
            schema,
            UNPARTITIONED_PARTITION_SPEC,
            UNSORTED_SORT_ORDER,
            "file:///tmp/t",
            {"format-version": str(version)},
        )


@pytest.mark.parametrize("version", [1, 2, 3])
def test_explain_says_the_format_version_and_what_is_refused_on_it(version: int) -> None:
    table = _Table(version)
    out = explain_format(table)  # type: ignore[arg-type]
    FormatExplainOut.model_validate(out)  # the API's shape
    assert out["version"] == version and out["reason"].startswith(f"format v{version}")
    if version == 3:
        assert out["row_lineage"]
        assert out["next_row_id"] == table.metadata.next_row_id  # null before any row
        assert out["refused"] == ["repair", "revert", "cherry-pick"]
        assert "pyiceberg 0.12" in out["reason"] and "deletion vectors" in out["reason"]
    else:
        assert not out["row_lineage"] and out["refused"] == []
