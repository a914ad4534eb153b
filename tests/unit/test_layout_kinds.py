"""Clustering and Z-order (lakewarden.kinds.clustering) as pure logic: the commit verdict, the
planner over synthetic files, safe literals and where clauses, and the exact CALL text."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from lakewarden.catalogs.catalog import TableRef
from lakewarden.formats.iceberg.sort_order import DeclaredOrder
from lakewarden.kinds import REGISTRY
from lakewarden.kinds.base import EventFacts, PlanRejected
from lakewarden.kinds.clustering import (
    CLUSTERING,
    ZORDER,
    IdentityFields,
    event_verdict,
    layout_sql,
    plan_from_files,
    sql_literal,
)
from lakewarden.metadata import DataFile, Partition
from lakewarden.policy.model import ClusteringPolicy, ZOrderPolicy

REF = TableRef("sales", "orders")
REGION: IdentityFields = {(0, "region"): ("region", StringType())}


def _f(i: int, partition: Partition = (), size: int = 1000, **bounds: tuple[Any, Any]) -> DataFile:
    return DataFile(f"f{i}-{partition}", size, 10, 0, partition, bounds=bounds)


def _overlapping(region: str, n: int = 5) -> list[DataFile]:
    """Every file spans the whole range: a lookup opens all of them."""
    return [_f(i, (("region", region),), a=(0, 999), b=(0, 999)) for i in range(n)]


def _sorted(region: str, n: int = 5) -> list[DataFile]:
    """Disjoint ranges on a and b: a lookup opens one file."""
    return [
        _f(i, (("region", region),), a=(i * 100, i * 100 + 99), b=(i * 100, i * 100 + 99))
        for i in range(n)
    ]


def test_registry_holds_the_layout_kinds() -> None:
    assert REGISTRY["clustering"] is CLUSTERING and REGISTRY["zorder"] is ZORDER


# --- verdict ----------------------------------------------------------------------------


def test_verdict_triggers_at_min_changed_files_and_states_the_numbers() -> None:
    policy = ZOrderPolicy(enabled=True, columns=["a", "b"], min_changed_files=10)
    v = event_verdict(policy, EventFacts({}, 10))
    assert v.needed
    assert v.reason == "10 data files written since the last zorder task >= min_changed_files 10"
    assert v.metrics["files_added_since_last_task"] == 10
    assert v.metrics["threshold_min_changed_files"] == 10
    assert v.expected_gain["target_files_per_lookup"] == 2.0
    assert "['a', 'b']" in v.expected_gain["target"]
    below = event_verdict(policy, EventFacts({}, 9))
    assert not below.needed
    assert below.reason == "9 data files written since the last zorder task < min_changed_files 10"


def test_verdict_of_a_disabled_section_is_no() -> None:
    v = event_verdict(ClusteringPolicy(columns=["a"], min_changed_files=1), EventFacts({}, 500))
    assert not v.needed and v.reason == "clustering is disabled by policy"


# --- planning ---------------------------------------------------------------------------


def test_only_poor_partitions_are_rewritten_named_by_identity_values() -> None:
    policy = ClusteringPolicy(enabled=True, columns=["a"], max_files_per_lookup=2)
    files = _overlapping("eu") + _overlapping("ap", 3) + _sorted("us")
    outcome = plan_from_files("clustering", policy, 42, files, REGION)
    plan = outcome.plan
    assert plan is not None
    assert plan["action"] == "rewrite_data_files" and plan["strategy"] == "sort"
    assert plan["sort_order"] == "`a` ASC NULLS LAST"
    assert plan["columns"] == ["a"]
    assert plan["where"] == "(`region` = 'ap') OR (`region` = 'eu')"
    assert plan["options"] == {
        "rewrite-all": "true",
        "target-file-size-bytes": str(128 * 1024 * 1024),
        "partial-progress.enabled": "true",
    }
    assert plan["partitions"] == [
        {"spec_id": 0, "partition": {"region": "ap"}, "data_files": 3, "files_per_lookup": 3.0},
        {"spec_id": 0, "partition": {"region": "eu"}, "data_files": 5, "files_per_lookup": 5.0},
    ]
    assert plan["files_before"] == 13
    assert plan["files_per_lookup_before"] == 5.0
    assert plan["files_per_lookup_avg_before"] == 4.0
    assert plan["files_to_rewrite"] == 8 and plan["bytes_to_rewrite"] == 8000
    assert plan["expected_files_after"] == 5 + 2  # us untouched, one file per poor partition
    assert plan["snapshot_id"] == 42
    assert outcome.reason.startswith("clustering 2 partition(s) by ['a']: 2 of 3 measured")
    assert "(worst region=eu: 5.0)" in outcome.reason


def test_every_partition_poor_rewrites_the_whole_table() -> None:
    policy = ZOrderPolicy(enabled=True, columns=["a", "b"])
    outcome = plan_from_files("zorder", policy, 1, _overlapping("eu") + _overlapping("us"), REGION)
    assert outcome.plan is not None
    assert outcome.plan["where"] is None
    assert outcome.plan["sort_order"] == "zorder(`a`, `b`)"
    assert outcome.plan["files_to_rewrite"] == 10
    assert "the whole table (every partition is poor)" in outcome.reason


def test_clustering_without_columns_sorts_by_the_declared_order_or_says_why_not() -> None:
    policy = ClusteringPolicy(enabled=True)  # no columns: allowed for clustering
    files = _overlapping("eu") + _overlapping("us")
    declared = DeclaredOrder("b DESC NULLS FIRST", ["b"], "`b` DESC NULLS FIRST", None)
    outcome = plan_from_files("clustering", policy, 1, files, REGION, declared)
    assert outcome.plan is not None
    assert (outcome.plan["sort_order"], outcome.plan["columns"]) == ("`b` DESC NULLS FIRST", ["b"])
    assert layout_sql("lake", REF, outcome.plan).count("`b` DESC NULLS FIRST") == 1
    assert "by the table's declared order ['b']" in outcome.reason

    none = plan_from_files("clustering", policy, 1, files, REGION, None)
    assert none.plan is None and "declares no sort order" in none.reason
    bucketed = DeclaredOrder("bucket[4](b) ASC NULLS FIRST", None, None, "a transform")
    refused = plan_from_files("clustering", policy, 1, files, REGION, bucketed)
    assert refused.plan is None and "cannot be used: a transform" in refused.reason
    with pytest.raises(ValueError, match="at least 2 column"):
        ZOrderPolicy(enabled=True)  # Z-order still names its columns


def test_unpartitioned_table_is_one_partition() -> None:
    policy = ZOrderPolicy(enabled=True, columns=["a", "b"])
    files = [_f(i, a=(0, 999), b=(0, 999)) for i in range(6)]
    outcome = plan_from_files("zorder", policy, 1, files, {})
    assert outcome.plan is not None and outcome.plan["where"] is None
    assert outcome.plan["partitions"][0]["partition"] == {}


def test_non_identity_partitions_are_not_named() -> None:
    policy = ClusteringPolicy(enabled=True, columns=["a"])
    files = _overlapping("eu") + _sorted("us")
    outcome = plan_from_files("clustering", policy, 1, files, {})  # region is not identity
    assert outcome.plan is not None and outcome.plan["where"] is None
    assert "cannot be named by identity values" in outcome.reason
    assert outcome.plan["files_to_rewrite"] == 10  # the whole table


def test_a_string_that_has_no_safe_literal_falls_back_to_the_whole_table() -> None:
    policy = ClusteringPolicy(enabled=True, columns=["a"])
    files = _overlapping("it's") + _sorted("us")
    outcome = plan_from_files("clustering", policy, 1, files, REGION)
    assert outcome.plan is not None and outcome.plan["where"] is None
    assert "quote, backslash or control character" in outcome.reason


def test_multi_field_partitions_and_nulls_in_the_where_clause() -> None:
    identity: IdentityFields = {
        (0, "region"): ("region", StringType()),
        (0, "day"): ("event_day", DateType()),
        (0, "flag"): ("flag", BooleanType()),
    }

    def part(day: int, flag: bool | None) -> Partition:
        return (("region", "eu"), ("day", day), ("flag", flag))

    files = [_f(i, part(19724, flag), a=(0, 999)) for flag in (True, None) for i in range(4)] + [
        _f(i, part(19725, True), a=(i * 100, i * 100 + 99)) for i in range(4)
    ]
    outcome = plan_from_files(
        "clustering", ClusteringPolicy(enabled=True, columns=["a"]), 1, files, identity
    )
    assert outcome.plan is not None
    assert outcome.plan["where"] == (
        "(`region` = 'eu' AND `event_day` = DATE '2024-01-02' AND `flag` IS NULL) OR "
        "(`region` = 'eu' AND `event_day` = DATE '2024-01-02' AND `flag` = TRUE)"
    )
    # and the runner accepts what the planner wrote
    assert "where => '(`region` = \\'eu\\' AND" in layout_sql("lake", REF, outcome.plan)


def test_good_layout_is_skipped_naming_the_worst_partition_and_the_threshold() -> None:
    policy = ClusteringPolicy(enabled=True, columns=["a"], max_files_per_lookup=2)
    files = [
        *_sorted("eu"),
        _f(9, (("region", "us"),), a=(0, 50)),
        _f(10, (("region", "us"),), a=(40, 99)),
    ]
    outcome = plan_from_files("clustering", policy, 1, files, REGION)
    assert outcome.plan is None
    assert outcome.reason == (
        "layout is good: the worst partition (region=us) opens 1.5 files per lookup on ['a'] "
        "<= max_files_per_lookup 2.0 (2 partition(s) measured)"
    )


def test_nothing_measurable_or_no_data_is_skipped() -> None:
    policy = ClusteringPolicy(enabled=True, columns=["a"])
    single_files = [_f(i, (("region", str(i)),), a=(0, 9)) for i in range(3)]
    assert "no partition has two or more files" in (
        plan_from_files("clustering", policy, 1, single_files, REGION).reason
    )
    no_bounds = [_f(i) for i in range(3)]
    assert plan_from_files("clustering", policy, 1, no_bounds, {}).plan is None
    assert plan_from_files("clustering", policy, None, [], {}).reason == (
        "table has no data: nothing to lay out"
    )


# --- literals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, ftype, literal",
    [
        (7, IntegerType(), "7"),
        (-(2**63), LongType(), "-9223372036854775808"),
        (True, BooleanType(), "TRUE"),
        (1.5, DoubleType(), "1.5D"),
        (1e-05, DoubleType(), "1E-05D"),
        (-2.5e20, DoubleType(), "-2.5E+20D"),
        ("eu-west", StringType(), "'eu-west'"),
        ("zürich", StringType(), "'zürich'"),
        (19724, DateType(), "DATE '2024-01-02'"),
        (date(2024, 1, 2), DateType(), "DATE '2024-01-02'"),
        (1704164645000006, TimestamptzType(), "TIMESTAMP '2024-01-02 03:04:05.000006Z'"),
        (
            datetime(2024, 1, 2, 4, 4, 5, tzinfo=UTC).astimezone(),
            TimestamptzType(),
            "TIMESTAMP '2024-01-02 04:04:05.000000Z'",
        ),
        (1704164645000000, TimestampType(), "TIMESTAMP_NTZ '2024-01-02 03:04:05.000000'"),
    ],
)
def test_safe_literals(value: Any, ftype: Any, literal: str) -> None:
    assert sql_literal(value, ftype) == literal


@pytest.mark.parametrize(
    "value, ftype",
    [
        ("it's", StringType()),  # Spark reads 'it''s' as 'its': never doubled, refused
        ("a\\b", StringType()),
        ('say "hi"', StringType()),
        ("line\nbreak", StringType()),
        ("x" * 2000, StringType()),
        (float("nan"), DoubleType()),
        (float("inf"), DoubleType()),
        (1.5, FloatType()),  # a float column compares through a cast Iceberg cannot push
        (True, IntegerType()),
        ("7", IntegerType()),
        (2**63, LongType()),
        (1, BooleanType()),
        (None, StringType()),
        (datetime(2024, 1, 1), TimestamptzType()),  # naive for a zoned column
        (datetime(2024, 1, 1, tzinfo=UTC), TimestampType()),
        (datetime(2024, 1, 1), DateType()),
        (10**15, DateType()),
        ("1.0", DecimalType(5, 2)),
    ],
)
def test_unsafe_or_inexact_literals_are_refused(value: Any, ftype: Any) -> None:
    with pytest.raises(PlanRejected):
        sql_literal(value, ftype)


# --- the CALL ---------------------------------------------------------------------------


def _plan(**changes: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "action": "rewrite_data_files",
        "strategy": "sort",
        "sort_order": "zorder(`a`, `b`)",
        "columns": ["a", "b"],
        "where": None,
        "options": {
            "rewrite-all": "true",
            "target-file-size-bytes": "134217728",
            "partial-progress.enabled": "true",
        },
    }
    plan.update(changes)
    return plan


def test_layout_sql_for_zorder_exactly() -> None:
    assert layout_sql("lake", REF, _plan()) == (
        "CALL `lake`.system.rewrite_data_files(table => 'lake.sales.orders', strategy => 'sort', "
        "sort_order => 'zorder(`a`, `b`)', options => map('partial-progress.enabled', 'true', "
        "'rewrite-all', 'true', 'target-file-size-bytes', '134217728'))"
    )


def test_layout_sql_for_clustering_with_a_where_exactly() -> None:
    plan = _plan(
        sort_order="`a` ASC NULLS LAST, `b` ASC NULLS LAST",
        where="(`region` = 'eu' AND `day` = DATE '2024-01-02') OR (`region` = 'us')",
    )
    assert layout_sql("lake", REF, plan) == (
        "CALL `lake`.system.rewrite_data_files(table => 'lake.sales.orders', strategy => 'sort', "
        "sort_order => '`a` ASC NULLS LAST, `b` ASC NULLS LAST', options => "
        "map('partial-progress.enabled', 'true', 'rewrite-all', 'true', "
        "'target-file-size-bytes', '134217728'), "
        "where => '(`region` = \\'eu\\' AND `day` = DATE \\'2024-01-02\\') OR "
        "(`region` = \\'us\\')')"
    )


def test_what_the_planner_writes_is_what_the_runner_accepts() -> None:
    for kind, policy in (
        ("clustering", ClusteringPolicy(enabled=True, columns=["a", "b"])),
        ("zorder", ZOrderPolicy(enabled=True, columns=["a", "b"])),
    ):
        outcome = plan_from_files(kind, policy, 1, _overlapping("eu") + _sorted("us"), REGION)
        assert outcome.plan is not None
        assert "rewrite_data_files" in layout_sql("lake", REF, outcome.plan)


@pytest.mark.parametrize(
    "bad",
    [
        {"action": "expire_snapshots"},
        {"strategy": "binpack"},
        {"sort_order": "`a; DROP TABLE x` ASC NULLS LAST", "columns": ["a; DROP TABLE x"]},
        {"columns": ["a", "c"]},  # does not match the sort order
        {"sort_order": "`a` ASC NULLS LAST", "columns": ["a", "b"]},
        {"sort_order": "`a` ASC NULLS LAST, `a` DESC NULLS LAST", "columns": ["a", "a"]},
        {"sort_order": "zorder(`a`)", "columns": ["a"]},  # one column is not a Z-order
        {"sort_order": "zorder(`a`, `b`) , `a` ASC NULLS LAST"},
        {"sort_order": "a ASC NULLS LAST", "columns": ["a"]},  # unquoted
        {"sort_order": "`a` ASC", "columns": ["a"]},
        {"sort_order": "`a` ASC NULLS LAST)", "columns": ["a"]},
        {"sort_order": "`a` ASC NULLS LAST', where => '1=1", "columns": ["a"]},
        {"sort_order": None},
        {"sort_order": ["zorder(`a`, `b`)"]},
        {"where": "1=1"},
        {"where": "(`region` = 'eu') OR 1=1"},
        {"where": "(`region` = 'eu')) OR ((1 = 1)"},
        {"where": "(`region` = 'e\\'u')"},
        {"where": "(`region` = 'eu'); DROP TABLE x"},
        {"where": "(`region` = 'eu' OR `region` = 'us')"},
        {"where": '(`region` = "eu")'},
        {"where": "(`reg`ion` = 'eu')"},
        {"where": "(`region` = lower('EU'))"},
        {"where": "(`region` IN ('eu'))"},
        {"where": "(`x` = 1) OR (`y` = 2.5)"},  # a decimal literal the planner never writes
        {"where": ""},
        {"where": 7},
        {"where": "(`a` = 1)" + " OR (`a` = 1)" * 10_000},  # too long
        {"options": {"rewrite-all": "true", "delete-file-threshold": "1"}},
        {"options": {"rewrite-all": "yes"}},
        {"options": {"target-file-size-bytes": "1') , foo => ('"}},
        {"options": "rewrite-all"},
    ],
)
def test_tampered_plans_are_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(PlanRejected):
        layout_sql("lake", REF, _plan(**bad))


def test_bad_catalog_is_rejected() -> None:
    with pytest.raises(PlanRejected):
        layout_sql("lake`; --", REF, _plan())


@pytest.mark.parametrize(
    "kind, sort_order, columns",
    [
        (CLUSTERING, "zorder(`a`, `b`)", ["a", "b"]),
        (ZORDER, "`a` ASC NULLS LAST", ["a"]),
    ],
)
def test_a_kind_runs_only_its_own_shape(kind: Any, sort_order: str, columns: list[str]) -> None:
    with pytest.raises(PlanRejected, match="cannot run"):
        kind.run(None, "lake", REF, _plan(sort_order=sort_order, columns=columns))


def test_tampered_plans_never_reach_spark() -> None:
    with pytest.raises(PlanRejected):
        ZORDER.run(None, "lake", REF, _plan(where="1=1"))  # type: ignore[arg-type]


def test_iceberg_zorder_skips_hudis_hilbert_curve_before_reading_the_table() -> None:
    policy = ZOrderPolicy(enabled=True, columns=["a", "b"], curve="hilbert")
    found = REGISTRY["zorder"].plan(policy, None, datetime.now(UTC))  # type: ignore[arg-type]
    assert found.plan is None and "curve hilbert is Hudi's only" in found.reason
