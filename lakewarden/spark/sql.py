"""Safe pieces of Spark SQL. Nothing user-controlled is pasted into a statement:
identifiers are validated, values are produced here from typed Python values."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

from lakewarden.catalogs.catalog import IDENTIFIER, TableRef
from lakewarden.outcomes import PlanRejected

_SAFE_OPTION_VALUE = re.compile(r"\A(\d{1,19}(\.\d{1,6})?|true|false)\Z")


def table_arg(catalog: str, ref: TableRef) -> str:
    """The `table => '…'` argument of an Iceberg procedure, with its catalog: Iceberg reads
    the first part of `ns.name` as a catalog when one of that name is registered in the
    session (a namespace `lake` beside a catalog `lake`) and refuses the call."""
    if not IDENTIFIER.match(catalog):
        raise PlanRejected(f"invalid catalog name {catalog!r}")
    return f"'{catalog}.{ref.namespace}.{ref.name}'"


def procedure(catalog: str, name: str) -> str:
    if not IDENTIFIER.match(catalog) or not IDENTIFIER.match(name):
        raise PlanRejected(f"invalid procedure {catalog}.{name}")
    return f"CALL `{catalog}`.system.{name}"


_UNSAFE_PATH = re.compile(r"['\\\x00-\x1f`]")


def path_literal(path: str) -> str:
    """A table's base path as a SQL string (a Hudi procedure's `path => '…'`); a path with a
    quote, backslash, backtick or control character is refused rather than escaped."""
    if not path or _UNSAFE_PATH.search(path):
        raise PlanRejected(f"a table path with quotes or control characters: {path!r}")
    return f"'{path}'"


def column(name: str) -> str:
    if not IDENTIFIER.match(name):
        raise PlanRejected(f"invalid column name {name!r}")
    return f"`{name}`"


def option_map(options: dict[str, str], allowed: frozenset[str]) -> str:
    parts = []
    for key, value in sorted(options.items()):
        if key not in allowed or not _SAFE_OPTION_VALUE.match(str(value)):
            raise PlanRejected(f"option {key}={value!r} is not allowed")
        parts.append(f"'{key}', '{value}'")
    return f"map({', '.join(parts)})"


def aware_datetime(value: object, what: str) -> datetime:
    """Parse a timestamp a stored plan carries; it must be ISO 8601 with a time zone."""
    try:
        at = datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise PlanRejected(f"invalid {what} {value!r}") from exc
    if at.tzinfo is None:
        raise PlanRejected(f"{what} must carry a time zone")
    return at


def timestamp_literal(at: datetime) -> str:
    """A UTC timestamp literal (the session runs in UTC)."""
    if at.tzinfo is None:
        raise PlanRejected("timestamps must be timezone-aware")
    return f"TIMESTAMP '{at.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}'"


_UNSAFE_TEXT = re.compile(r"[\x00-\x1f]")


def value_literal(value: object) -> str:
    """A typed Python value as a Spark SQL literal (a partition's value in a predicate):
    text is quoted with Spark's backslash escapes; text with control characters, and any
    type not listed, is refused rather than guessed at."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    if isinstance(value, datetime):
        return timestamp_literal(value)
    if isinstance(value, date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, str) and not _UNSAFE_TEXT.search(value):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise PlanRejected(f"a partition value lakewarden cannot write as SQL: {value!r}")


def partition_predicate(values: list[dict[str, object]]) -> str:
    """`(a = 1 AND b = 'x') OR (...)`: the partitions named by `values` (each one's column
    -> value; None is `IS NULL`)."""
    ors = []
    for partition in values:
        ands = [
            f"{column(c)} IS NULL" if v is None else f"{column(c)} = {value_literal(v)}"
            for c, v in sorted(partition.items())
        ]
        ors.append("(" + " AND ".join(ands) + ")")
    return " OR ".join(ors)
