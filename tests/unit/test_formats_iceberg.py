"""The one homes of formats.iceberg: the finder's rule for a job's commits, the mark's
spelling, and partition values decoded and written as SQL (pure: no table, no Spark)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from pyiceberg.types import DateType, LongType, StringType, TimestampType, TimestamptzType

from lakewarden.formats.base import Commit, JobMarker
from lakewarden.formats.iceberg import finder, history, markers, partitions
from lakewarden.formats.iceberg.markers import ATTEMPT_KEY, REVERT_KEY, TASK_KEY
from lakewarden.spark import commits


def commit(
    cid: int,
    parent: int | None = None,
    at: int = 0,
    op: str = "append",
    summary: dict[str, str] | None = None,
) -> Commit:
    return Commit(str(cid), None if parent is None else str(parent), None, at, op, summary or {})


def ours(
    cid: int, parent: int | None = None, at: int = 0, task: int = 7, attempt: int = 1
) -> Commit:
    return commit(cid, parent, at, "replace", {TASK_KEY: str(task), ATTEMPT_KEY: str(attempt)})


# --- the mark ---------------------------------------------------------------------------


def test_the_mark_is_spelled_once() -> None:
    assert markers.properties(JobMarker(7, 2)) == {TASK_KEY: "7", ATTEMPT_KEY: "2"}
    assert markers.properties(JobMarker(7)) == {TASK_KEY: "7"}
    assert commits.TASK_KEY is TASK_KEY and commits.REVERT_KEY is REVERT_KEY
    with commits.committing_as(7, 2):
        assert commits.commit_properties() == markers.properties(JobMarker(7, 2))


def test_carries_needs_every_property_and_some() -> None:
    props = {TASK_KEY: "7", ATTEMPT_KEY: "1"}
    assert markers.carries({TASK_KEY: "7", ATTEMPT_KEY: "1", "x": "y"}, props)
    assert not markers.carries({TASK_KEY: "7", ATTEMPT_KEY: "2"}, props)
    assert not markers.carries({TASK_KEY: "7"}, props)
    assert not markers.carries(None, props)
    assert not markers.carries({TASK_KEY: "7"}, {})  # no properties mark nothing


# --- the finder ---------------------------------------------------------------------------


def test_a_standing_commit_is_the_newest_of_the_task_on_its_branch() -> None:
    history_ = [commit(4, 3), ours(3, 2, attempt=2), ours(2, 1, attempt=1), commit(1)]
    assert finder.standing_in(history_, 7) == history_[1]
    assert finder.standing_in(history_, 8) is None


def test_a_commit_reverted_by_validation_does_not_stand() -> None:
    reverted = [commit(4, 3, summary={REVERT_KEY: "7"}), ours(3, 2), commit(2)]
    assert finder.standing_in(reverted, 7) is None
    # a revert of another task's rewrite does not hide ours
    other = [commit(4, 3, summary={REVERT_KEY: "8"}), ours(3, 2), commit(2)]
    assert finder.standing_in(other, 7) == other[1]


def test_the_newest_standing_commit_over_branches() -> None:
    main = [commit(5, 4, at=50), ours(4, 3, at=40)]
    branch = [ours(6, 3, at=60), commit(3, at=30)]
    assert finder.newest_standing([main, branch], 7) == branch[0]
    assert finder.newest_standing([main, [commit(9, at=90)]], 7) == main[1]
    assert finder.newest_standing([], 7) is None
    # a commit rolled away is in no branch's history: not found
    assert finder.newest_standing([[commit(3, at=30)]], 7) is None


def test_marked_and_newest() -> None:
    props = {TASK_KEY: "7", ATTEMPT_KEY: "1"}
    found = [ours(1, at=10), commit(2, at=20), ours(3, at=5), ours(4, attempt=2, at=50)]
    assert finder.marked(found, props) == [found[0], found[2]]
    assert finder.newest(finder.marked(found, props)) == found[0]
    assert finder.newest(found, finder.is_rewrite) == found[3]
    assert finder.newest([]) is None
    same = [ours(1, at=10), ours(2, at=10)]
    assert finder.newest(same) == same[1]  # of equal times, the last given


def test_manifest_rewrites() -> None:
    replaced = {"manifests-replaced": "2"}
    assert finder.is_manifest_rewrite(commit(1, op="replace", summary=replaced))
    assert not finder.is_manifest_rewrite(commit(1, op="replace"))
    assert not finder.is_manifest_rewrite(commit(1, op="append", summary=replaced))


def test_spans_group_consecutive_commits_of_the_job() -> None:
    props = {TASK_KEY: "7", ATTEMPT_KEY: "1"}
    # newest first, since the job started at snapshot 1
    walked = [ours(6, 5), ours(5, 4), commit(4, 3), ours(3, 2), ours(2, 1)]
    spans = finder.spans(walked, props)
    assert [(s.before, [c.id for c in s.commits]) for s in spans] == [
        ("1", ["2", "3"]),
        ("4", ["5", "6"]),
    ]
    assert finder.spans([commit(3, 2)], props) == []


def test_a_snapshots_table_row_is_a_commit() -> None:
    row = {
        "snapshot_id": 11,
        "parent_id": None,
        "committed_at": datetime(2026, 1, 1, tzinfo=UTC),
        "operation": "delete",
        "summary": None,
    }
    c = history.of_row(row)
    assert (c.id, c.parent, c.operation, dict(c.summary)) == ("11", None, "delete", {})
    assert c.at_ms == 1767225600000 and c.native is row


# --- partition values ---------------------------------------------------------------------


def test_decoders() -> None:
    assert partitions.day(0) == date(1970, 1, 1)
    assert partitions.day(19000) == date(2022, 1, 8)
    assert partitions.hour_start(25) == datetime(1970, 1, 2, 1, tzinfo=UTC)
    assert partitions.month_start(0) == datetime(1970, 1, 1, tzinfo=UTC)
    assert partitions.month_start(671) == datetime(2025, 12, 1, tzinfo=UTC)
    assert partitions.month_start(-1) == datetime(1969, 12, 1, tzinfo=UTC)
    assert partitions.year_start(56) == datetime(2026, 1, 1, tzinfo=UTC)
    assert partitions.micros(3_600_000_001) == datetime(1970, 1, 1, 1, 0, 0, 1, tzinfo=UTC)


def test_timestamp_literal_names_the_zone_as_the_column_does() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert partitions.timestamp_sql(at, "timestamp") == (
        "TIMESTAMP_NTZ '2026-01-02 03:04:05.000000'"
    )
    assert partitions.timestamp_sql(at, "timestamptz") == "TIMESTAMP '2026-01-02 03:04:05.000000'"


@pytest.mark.parametrize(
    "transform, column, value, source_type, expected",
    [
        ("identity", "n", 7, "long", "`n` = 7"),
        ("identity", "flag", True, "boolean", "`flag` = true"),
        ("identity", "s", "", "string", "`s` = ''"),
        ("identity", "s", "a'b", "string", "`s` = CAST(unhex('612762') AS STRING)"),
        ("identity", "d", 19000, "date", "`d` = date_from_unix_date(19000)"),
        ("identity", "t", 0, "timestamp", "`t` = TIMESTAMP_NTZ '1970-01-01 00:00:00.000000'"),
        ("identity", "t", 1, "timestamptz", "`t` = TIMESTAMP '1970-01-01 00:00:00.000001'"),
        ("identity", "t", "x", "timestamp", "TRUE"),  # not a number: cannot be compared
        ("identity", "x", 1.5, "double", "TRUE"),  # no exact plain form
        ("identity", "x", None, "long", "`x` IS NULL"),
        ("year", "t", 56, "timestamptz", "`c`.system.years(`t`) = 56"),
        ("month", "t", 671, "timestamptz", "`c`.system.months(`t`) = 671"),
        ("day", "t", 19000, "timestamptz", "`c`.system.days(`t`) = date_from_unix_date(19000)"),
        ("hour", "t", 456000, "timestamptz", "`c`.system.hours(`t`) = 456000"),
        ("bucket[16]", "id", 3, "long", "`c`.system.bucket(16, `id`) = 3"),
        ("truncate[2]", "n", 10, "long", "`c`.system.truncate(2, `n`) = 10"),
        ("bucket[x]", "id", 3, "long", "TRUE"),
        ("void", "id", None, "long", "TRUE"),
        ("identity", "a.b", 1, "long", "`a`.`b` = 1"),
    ],
)
def test_validation_predicate_over_every_transform(
    transform: str, column: str, value: object, source_type: str, expected: str
) -> None:
    assert partitions.predicate("c", transform, column, value, source_type) == expected


def test_the_two_literal_shapes_agree_on_what_they_both_write() -> None:
    # the plan's builder and the validation's write the same number and the same NTZ value
    assert partitions.sql_literal(7, LongType()) == partitions.plain_literal(7)
    at = 1_704_164_645_000_000
    ntz = partitions.timestamp_sql(partitions.micros(at), "timestamp")
    assert partitions.sql_literal(at, TimestampType()) == ntz
    assert partitions.sql_literal(19000, DateType()) == "DATE '2022-01-08'"
    assert partitions.sql_literal("eu", StringType()) == "'eu'"
    assert partitions.sql_literal(at, TimestamptzType()).endswith("Z'")
