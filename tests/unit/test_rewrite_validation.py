"""Post-rewrite validation, the pure parts: the policy section, the SQL each touched
partition is selected with (never a value pasted into SQL as text), and the failpoint that
only acts when failpoints are enabled too."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from pydantic import ValidationError

from lakewarden.formats.iceberg.partitions import plain_literal as _literal
from lakewarden.formats.iceberg.partitions import predicate as _predicate
from lakewarden.jobs.execute import failpoint
from lakewarden.policy.model import parse_policy
from lakewarden.runtime import Runtime
from lakewarden.settings import Settings


def test_validation_is_on_by_default_and_checks_its_columns() -> None:
    section = parse_policy({}).validation
    assert section.enabled and section.columns == [] and section.max_rows == 10_000_000
    assert parse_policy({"validation": {"enabled": False}}).validation.enabled is False
    with pytest.raises(ValidationError, match="invalid column name"):
        parse_policy({"validation": {"columns": ["a; DROP"]}})
    with pytest.raises(ValidationError, match="must not repeat"):
        parse_policy({"validation": {"columns": ["a", "a"]}})
    with pytest.raises(ValidationError, match="max_rows"):
        parse_policy({"validation": {"max_rows": 0}})
    # Its columns must exist in the table, as every column a policy names (a 422 otherwise).
    assert parse_policy({"validation": {"columns": ["x"]}}).columns_used() == {"x"}
    assert not parse_policy({"validation": {"enabled": False, "columns": ["x"]}}).columns_used()


def test_partition_predicates() -> None:
    assert _predicate("lake", "identity", "region", "a'b") == (
        "`region` = CAST(unhex('" + b"a'b".hex() + "') AS STRING)"
    )
    assert _predicate("lake", "identity", "n", 7) == "`n` = 7"
    # Identity of a date or timestamp: Iceberg's number, compared as the column's type.
    assert _predicate("lake", "identity", "dt", 19000, "date") == (
        "`dt` = date_from_unix_date(19000)"
    )
    assert _predicate("lake", "identity", "ts", 3_600_000_000, "timestamptz") == (
        "`ts` = TIMESTAMP '1970-01-01 01:00:00.000000'"
    )
    assert _predicate("lake", "identity", "ts", 0, "timestamp") == (
        "`ts` = TIMESTAMP_NTZ '1970-01-01 00:00:00.000000'"
    )
    assert _predicate("lake", "identity", "region", None) == "`region` IS NULL"
    assert _predicate("lake", "bucket[16]", "id", 3) == "`lake`.system.bucket(16, `id`) = 3"
    assert _predicate("lake", "day", "ts", 19000) == (
        "`lake`.system.days(`ts`) = date_from_unix_date(19000)"
    )
    assert _predicate("lake", "month", "ts", 600) == "`lake`.system.months(`ts`) = 600"
    assert _predicate("lake", "truncate[4]", "s", "abcd").startswith(
        "`lake`.system.truncate(4, `s`)"
    )
    # What cannot be written safely selects every row: more to read, never a wrong answer.
    assert _predicate("lake", "identity", "d", 1.5) == "TRUE"
    assert _predicate("lake", "zorder-ish", "x", 1) == "TRUE"
    assert _predicate("lake", "identity", "a`b", 1) == "`a``b` = 1"
    assert _literal(True) == "true" and _literal("") == "''"


def test_the_failpoint_needs_failpoints_enabled_too() -> None:
    def runtime(**settings: Any) -> Runtime:
        return cast(Runtime, SimpleNamespace(settings=Settings(**settings)))

    assert failpoint(runtime(failpoint="corrupt-rewrite")) is None
    assert failpoint(runtime(failpoints_enabled=True)) is None
    assert (
        failpoint(runtime(failpoint="corrupt-rewrite", failpoints_enabled=True))
        == "corrupt-rewrite"
    )
    with pytest.raises(ValidationError):
        Settings(failpoint="drop-everything")  # type: ignore[arg-type]
