"""Which management rule covers a table (lakewarden.catalogs.adoption.matching_rule): pure logic, on
rule objects that are never stored."""

from __future__ import annotations

import pytest

from lakewarden.catalogs.adoption import InvalidRule, check_rule, covers, matching_rule
from lakewarden.db.models import ManagementRule


def rule(
    id: int,
    namespace: str = "*",
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    enabled: bool = True,
) -> ManagementRule:
    return ManagementRule(
        id=id,
        catalog="lake",
        namespace=namespace,
        include=include or ["*"],
        exclude=exclude or [],
        policy={},
        enabled=enabled,
    )


def test_a_namespace_star_matches_across_levels() -> None:
    r = rule(1, "sales*")
    assert covers(r, "sales", "t") and covers(r, "sales_eu", "t") and covers(r, "sales.eu.x", "t")
    assert not covers(r, "marketing", "t") and not covers(r, "xsales", "t")
    levels = rule(2, "sales.*")
    assert covers(levels, "sales.eu", "t") and covers(levels, "sales.eu.daily", "t")
    assert not covers(levels, "sales", "t")
    one = rule(3, "sales.?")
    assert covers(one, "sales.a", "t") and not covers(one, "sales.ab", "t")


def test_names_must_match_an_include_and_no_exclude() -> None:
    r = rule(1, "sales", include=["orders*", "clicks"], exclude=["*_tmp"])
    assert covers(r, "sales", "orders") and covers(r, "sales", "orders_2024")
    assert covers(r, "sales", "clicks") and not covers(r, "sales", "clicks2")
    assert not covers(r, "sales", "orders_tmp")  # excluded
    assert not covers(r, "sales", "users")  # not included
    assert not covers(r, "other", "orders")  # other namespace
    # case-sensitive, as Iceberg identifiers are
    assert not covers(r, "Sales", "orders") and not covers(r, "sales", "Orders")


def test_a_glob_with_a_dot_is_matched_against_namespace_dot_name() -> None:
    r = rule(1, "*", exclude=["sales.tmp_*", "*.scratch"])
    assert not covers(r, "sales", "tmp_1")
    assert covers(r, "ops", "tmp_1")  # only sales' tmp_ tables are excluded
    assert not covers(r, "ops", "scratch") and not covers(r, "a.b.c", "scratch")
    assert covers(r, "ops", "scratch2")
    qualified = rule(2, "*", include=["sales.eu.*"])
    assert covers(qualified, "sales.eu", "orders") and not covers(qualified, "sales", "eu")


def test_a_disabled_rule_matches_nothing() -> None:
    assert matching_rule([rule(1, enabled=False)], "sales", "orders") is None
    assert matching_rule([], "sales", "orders") is None


def test_the_most_specific_rule_wins_whatever_the_order() -> None:
    wide, longer, exact, exact2 = (
        rule(1, "*"),
        rule(2, "sales*"),
        rule(7, "sales"),
        rule(5, "sales"),
    )
    rules = [wide, longer, exact, exact2]
    for order in (rules, rules[::-1], [exact, wide, exact2, longer]):
        # an exact namespace beats any glob; of two, the lowest id
        assert matching_rule(order, "sales", "t") is exact2
        # no exact rule: the longer glob
        assert matching_rule(order, "sales_eu", "t") is longer
        assert matching_rule(order, "hr", "t") is wide
    # longer glob vs shorter glob, ids reversed: length decides
    a, b = rule(9, "sa*"), rule(3, "s*")
    assert matching_rule([b, a], "sales", "t") is a
    # same length: the lowest id
    c, d = rule(4, "sa?es"), rule(8, "sal*s")
    assert matching_rule([d, c], "sales", "t") is c


def test_an_excluding_rule_leaves_the_table_to_a_wider_one() -> None:
    narrow = rule(1, "sales", exclude=["tmp_*"])
    wide = rule(2, "*")
    assert matching_rule([narrow, wide], "sales", "orders") is narrow
    assert matching_rule([narrow, wide], "sales", "tmp_1") is wide
    assert matching_rule([narrow, rule(3, "*", exclude=["tmp_*"])], "sales", "tmp_1") is None


@pytest.mark.parametrize(
    ("namespace", "include", "exclude", "problem"),
    [
        ("", ["*"], [], "invalid namespace glob"),
        ("sales;drop", ["*"], [], "invalid namespace glob"),
        ("sales", [], [], "at least one glob"),
        ("sales", [""], [], "invalid include glob"),
        ("sales", ["ord%"], [], "invalid include glob"),
        ("sales", ["*"], ["[ab]*"], "invalid exclude glob"),
        ("sales", ["*"], ["a b"], "invalid exclude glob"),
        ("sales", ["*"] * 101, [], "at most 100"),
        ("x" * 256, ["*"], [], "invalid namespace glob"),
    ],
)
def test_invalid_globs_are_refused_saying_what_to_fix(
    namespace: str, include: list[str], exclude: list[str], problem: str
) -> None:
    with pytest.raises(InvalidRule, match=problem):
        check_rule(namespace, include, exclude)


def test_valid_globs_pass() -> None:
    check_rule("*", ["*"], [])
    check_rule("sales.eu_?", ["orders*", "sales.eu_1.x"], ["*.tmp_*"])
