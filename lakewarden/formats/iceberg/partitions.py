"""Iceberg partition values: decoded from what a partition tuple holds, and written as
Spark SQL. The one home of "days / hours / months / years / microseconds since the epoch"
and of the literals built from them.

Two literal shapes, for two readers:

- `sql_literal` writes a planner's `where` (layout: clustering and Z-order). The plan is
  stored and its text checked again against a fixed grammar before it runs
  (`kinds.layout`), so strings with a quote, a backslash or a control character are
  refused, not escaped, and timestamps name their zone (`...Z`).
- `predicate` selects a touched partition's rows in the validation's own query, built at
  run time and never stored: any string goes through `unhex` (no quoting to get wrong),
  and the partition transforms map to Iceberg's Spark functions.

Both write a zone-less `timestamp` column's value as TIMESTAMP_NTZ (`timestamp_sql`),
as TTL's cutoff does: against a TIMESTAMP literal Spark casts the column and the predicate
no longer reaches Iceberg.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pyiceberg.types import (
    BooleanType,
    DateType,
    DoubleType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from lakewarden.outcomes import PlanRejected
from lakewarden.spark import sql

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
# Iceberg types an identity partition keeps as a number (days, microseconds since epoch).
TIME_TYPES = ("date", "timestamp", "timestamptz")


# --- decoding ----------------------------------------------------------------------------


def day(days: int) -> date:
    """A `day` transform's value, or a date's: days since the epoch."""
    return (EPOCH + timedelta(days=days)).date()


def hour_start(hours: int) -> datetime:
    """An `hour` transform's value: hours since the epoch."""
    return EPOCH + timedelta(hours=hours)


def month_start(months: int) -> datetime:
    """A `month` transform's value: months since January 1970."""
    year, month = divmod(months, 12)
    return datetime(1970 + year, month + 1, 1, tzinfo=UTC)


def year_start(years: int) -> datetime:
    """A `year` transform's value: years since 1970."""
    return datetime(1970 + years, 1, 1, tzinfo=UTC)


def micros(value: int) -> datetime:
    """A timestamp as Iceberg keeps it: microseconds since the epoch (UTC)."""
    return EPOCH + timedelta(microseconds=value)


# --- writing -----------------------------------------------------------------------------


def timestamp_sql(at: datetime, column_type: str) -> str:
    """A literal comparing with a `column_type` column as such: TIMESTAMP_NTZ for a
    `timestamp` (no zone) column, TIMESTAMP (UTC) for a `timestamptz` one."""
    stamp = sql.timestamp_literal(at)
    if column_type == "timestamp":  # no zone: Spark's TIMESTAMP_NTZ
        return "TIMESTAMP_NTZ " + stamp.removeprefix("TIMESTAMP ")
    return stamp


def sql_literal(value: Any, iceberg_type: IcebergType) -> str:
    """A Spark SQL literal for an identity partition `value` of `iceberg_type`.

    Values arrive as Iceberg stores them in a partition tuple (dates as days, timestamps as
    microseconds since the epoch). Raises PlanRejected for anything that cannot be written
    safely and exactly; the planner then rewrites the whole table instead.

    Strings: Spark SQL reads `'it''s'` as two adjacent literals (`its`), not as an escaped
    quote, and backslash escapes depend on `spark.sql.parser.escapedStringLiterals`. So
    strings with a quote, a backslash or a control character are refused, not escaped.
    """
    if value is None:
        raise PlanRejected("a NULL has no literal (use IS NULL)")
    if isinstance(iceberg_type, BooleanType):
        if isinstance(value, bool):
            return "TRUE" if value else "FALSE"
    elif isinstance(iceberg_type, IntegerType | LongType):
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and _LONG_MIN <= value <= _LONG_MAX
        ):
            return str(value)
    elif isinstance(iceberg_type, DoubleType):
        if isinstance(value, float | int) and not isinstance(value, bool):
            number = float(value)
            if math.isfinite(number):
                # repr round-trips the double exactly; the D suffix makes it a DOUBLE literal
                return repr(number).upper() + "D"
    elif isinstance(iceberg_type, StringType):
        if isinstance(value, str) and len(value) <= 1024 and _SAFE_STRING.fullmatch(value):
            return f"'{value}'"
        raise PlanRejected(f"string {value!r} holds a quote, backslash or control character")
    elif isinstance(iceberg_type, DateType):
        day = _as_date(value)
        if day is not None:
            return f"DATE '{day.isoformat()}'"
    elif isinstance(iceberg_type, TimestampType | TimestamptzType):
        at = _as_datetime(value, aware=isinstance(iceberg_type, TimestamptzType))
        if at is not None:
            text = at.strftime("%Y-%m-%d %H:%M:%S.%f")
            if isinstance(iceberg_type, TimestamptzType):
                return f"TIMESTAMP '{text}Z'"  # explicit zone: whatever the session's zone
            return f"TIMESTAMP_NTZ '{text}'"
    raise PlanRejected(f"no safe literal for {value!r} of type {iceberg_type}")


_SAFE_STRING = re.compile(r"[^'\"\\\x00-\x1f\x7f]*")


def _as_date(value: Any) -> date | None:
    if isinstance(value, datetime):
        return None
    if isinstance(value, date):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return day(value)
        except OverflowError:
            return None
    return None


def _as_datetime(value: Any, aware: bool) -> datetime | None:
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            at = micros(value).replace(tzinfo=None)
        except OverflowError:
            return None
    elif isinstance(value, datetime):
        if aware:
            if value.tzinfo is None:
                return None
            at = value.astimezone(UTC).replace(tzinfo=None)
        elif value.tzinfo is not None:
            return None
        else:
            at = value
    else:
        return None
    return at if 1 <= at.year <= 9999 else None


def quote_column(name: str) -> str:
    return ".".join("`" + part.replace("`", "``") + "`" for part in name.split("."))


def plain_literal(value: Any) -> str | None:
    """A Spark SQL literal for a partition value, or None when it has no safe plain form.
    Strings go through unhex: no quoting to get wrong (constant-folded before pushdown)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return f"CAST(unhex('{value.encode().hex()}') AS STRING)" if value else "''"
    return None


def _term(catalog: str, transform: str, column: str) -> tuple[str, str] | None:
    """(the SQL expression of a partition field over its source column, how a partition
    value is written against it), for the transforms Iceberg's Spark functions cover."""
    fn = f"`{catalog}`.system"
    col = quote_column(column)
    if transform == "identity":
        return col, "plain"
    if transform in ("year", "month", "hour"):
        return f"{fn}.{transform}s({col})", "plain"
    if transform == "day":
        return f"{fn}.days({col})", "day"
    for name in ("bucket", "truncate"):
        if transform.startswith(f"{name}[") and transform.endswith("]"):
            width = transform[len(name) + 1 : -1]
            if width.isdigit():
                return f"{fn}.{name}({width}, {col})", "plain"
    return None


def predicate(
    catalog: str, transform: str, column: str | None, value: Any, source_type: str = ""
) -> str:
    """Rows whose partition field (`transform` of `column`, a `source_type` column) is
    `value`; TRUE (every row) when that cannot be written safely."""
    term = _term(catalog, transform, str(column)) if column else None
    if term is None:
        return "TRUE"
    expr, shape = term
    if value is None:
        return f"{expr} IS NULL"
    number = isinstance(value, int) and not isinstance(value, bool)
    if shape == "day" and number:
        return f"{expr} = date_from_unix_date({value})"
    if shape == "plain" and transform == "identity" and source_type in TIME_TYPES:
        # Iceberg keeps a date as days and a timestamp as microseconds since the epoch:
        # compared with the column as such (Spark refuses a date or timestamp = a number).
        if not number:
            return "TRUE"
        if source_type == "date":
            return f"{expr} = date_from_unix_date({value})"
        return f"{expr} = {timestamp_sql(micros(value), source_type)}"
    literal = plain_literal(value) if shape == "plain" else None
    return "TRUE" if literal is None else f"{expr} = {literal}"
