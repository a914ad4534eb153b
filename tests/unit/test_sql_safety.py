"""What reaches Spark SQL is validated: identifiers, catalog names, procedure options."""

from __future__ import annotations

import pytest

from lakewarden.catalogs.catalog import InvalidIdentifier, TableRef, jdbc_params
from lakewarden.kinds.base import PlanRejected
from lakewarden.kinds.compaction import compaction_sql

PLAN = {
    "action": "rewrite_data_files",
    "strategy": "binpack",
    "options": {"min-input-files": "5", "target-file-size-bytes": "134217728"},
}


@pytest.mark.parametrize(
    "namespace, name",
    [
        ("bad-ns", "t"),
        ("ns", "t; DROP TABLE x"),
        ("", "t"),
        ("ns", "1abc"),
        ("ns", "a'b"),
        ("ns", "x" * 129),
        ("ns", "t`"),
    ],
)
def test_table_ref_rejects_unsafe_identifiers(namespace: str, name: str) -> None:
    with pytest.raises(InvalidIdentifier):
        TableRef(namespace, name)


def test_table_ref_parse() -> None:
    assert TableRef.parse("sales.orders") == TableRef("sales", "orders")
    with pytest.raises(InvalidIdentifier):
        TableRef.parse("orders")


def test_compaction_sql_is_built_from_validated_parts() -> None:
    sql = compaction_sql("lake", TableRef("sales", "orders"), PLAN)
    assert sql == (
        "CALL `lake`.system.rewrite_data_files(table => 'lake.sales.orders', "
        "strategy => 'binpack', "
        "options => map('min-input-files', '5', 'target-file-size-bytes', '134217728'))"
    )


@pytest.mark.parametrize(
    "options",
    [{"min-input-files": "5') --"}, {"unknown-option": "1"}, {"min-input-files": "-1"}],
)
def test_compaction_sql_rejects_unknown_or_unsafe_options(options: dict[str, str]) -> None:
    with pytest.raises(PlanRejected):
        compaction_sql("lake", TableRef("sales", "orders"), {**PLAN, "options": options})


def test_compaction_into_the_declared_order_is_iceberg_s_sort_without_an_order() -> None:
    plan = {**PLAN, "strategy": "sort", "sort_order": "table"}
    sql = compaction_sql("lake", TableRef("sales", "orders"), plan)
    assert "strategy => 'sort', options => map(" in sql and "sort_order" not in sql
    with pytest.raises(PlanRejected):  # any other order text is not a compaction's
        compaction_sql("lake", TableRef("s", "t"), {**plan, "sort_order": "`a` ASC NULLS LAST"})


def test_compaction_sql_rejects_other_actions_and_bad_catalog() -> None:
    with pytest.raises(PlanRejected):
        compaction_sql("lake", TableRef("s", "t"), {**PLAN, "strategy": "sort"})
    with pytest.raises(PlanRejected):
        compaction_sql("la`ke", TableRef("s", "t"), PLAN)


def test_jdbc_params_from_sqlalchemy_url() -> None:
    p = jdbc_params("postgresql+psycopg://u:p%40ss@db.example:6543/lw")
    assert p.url == "jdbc:postgresql://db.example:6543/lw"
    assert (p.user, p.password) == ("u", "p@ss")
