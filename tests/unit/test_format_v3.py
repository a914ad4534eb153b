"""What explain says of a table's Iceberg format version (`explain_format`), on metadata
pyiceberg builds: v3 names what it keeps (row lineage) and what it refuses."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField

from lakewarden.health.explain import PYICEBERG_WRITES, explain_format
from lakewarden.policy.model import TagsPolicy
from lakewarden.publish import fast_forward
from lakewarden.refs import (
    FormatUnwritable,
    RollbackRefused,
    create_tags,
    due_tag,
    make_due_tag,
    rollback_main,
)
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
        assert out["refused"] == list(PYICEBERG_WRITES)
        assert {"repair", "rollback", "publish", "scheduled tags"} <= set(out["refused"])
        assert "pyiceberg 0.12" in out["reason"] and "deletion vectors" in out["reason"]
    else:
        assert not out["row_lineage"] and out["refused"] == []


def test_no_pyiceberg_commit_is_attempted_on_a_v3_table() -> None:
    """pyiceberg 0.12 raises NotImplementedError writing v3 metadata (a 500, a crashed
    round): each commit lakewarden makes through it is refused first, saying why."""
    table: Any = _Table(3)
    now = datetime.now(UTC)
    with pytest.raises(FormatUnwritable, match=r"format v3 table: pyiceberg 0\.12"):
        create_tags(table, 1, ["t"], 7, now, now)
    with pytest.raises(FormatUnwritable, match="publishing the audited branch"):
        fast_forward(table, None)  # type: ignore[arg-type]
    with pytest.raises(RollbackRefused, match="a rollback of main is refused"):
        rollback_main(table, 5)


def test_the_scheduled_tags_skip_a_v3_table_with_the_reason() -> None:
    """The sweep asks `due_tag` and then tags: a v3 table is not due, saying why, and
    tagging it makes nothing and raises nothing (it raised FormatUnwritable, a failed
    sweep of the table and an alert, every sweep)."""
    table: Any = _Table(3)
    table.current_snapshot = lambda: SimpleNamespace(snapshot_id=7, timestamp_ms=0)
    policy = TagsPolicy(enabled=True, every="daily", retention_days=7)
    now = datetime.now(UTC)
    due = due_tag(policy, table, now)
    assert not due.due and "format v3 table" in due.reason and "pyiceberg 0.12" in due.reason
    assert make_due_tag(table, policy, now) is None
