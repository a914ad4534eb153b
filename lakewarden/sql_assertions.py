"""SQL assertions: queries a table owner writes that must return no rows (write-audit-publish's
`publish.sql_assertions`, issue 33 §1), run by DuckDB on an Arrow table (the batch).

A table owner's SQL runs inside the leader, so DuckDB is sandboxed: no file system, network
or extension access (`enable_external_access` off), its configuration locked so the query
cannot turn that back on, one thread, bounded memory, and a timeout that interrupts the
query. Only a single SELECT (or WITH … SELECT) is accepted; the policy is refused at write
time otherwise, with DuckDB's own parse error.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

# The one relation an assertion reads.
BATCH_VIEW = "batch"
MEMORY_LIMIT = "512MB"
SAMPLE_CHARS = 200


@dataclass(frozen=True)
class Verdict:
    passed: bool
    detail: str


def _sandbox() -> duckdb.DuckDBPyConnection:
    return duckdb.connect(
        config={
            "enable_external_access": False,
            "autoload_known_extensions": False,
            "autoinstall_known_extensions": False,
            "threads": 1,
            "memory_limit": MEMORY_LIMIT,
            "lock_configuration": True,
        }
    )


def check_query(sql: str) -> None:
    """Refuse anything but one SELECT statement, with DuckDB's own words (ValueError)."""
    with _sandbox() as con:
        try:
            statements = con.extract_statements(sql)
        except duckdb.Error as exc:
            raise ValueError(f"does not parse: {_one_line(exc)}") from None
    if len(statements) != 1:
        raise ValueError(f"must be one SELECT statement, not {len(statements)}")
    if statements[0].type != duckdb.StatementType.SELECT:
        raise ValueError(f"must be a SELECT, not {statements[0].type.name}")


def run(rows: pa.Table, assertions: dict[str, str], timeout_s: float) -> dict[str, Verdict]:
    """Each assertion's verdict on `rows` (the view `batch`): passed when it returns no row."""
    verdicts: dict[str, Verdict] = {}
    with _sandbox() as con:
        con.register(BATCH_VIEW, rows)
        for name, sql in sorted(assertions.items()):
            verdicts[name] = _run_one(con, sql, timeout_s)
    return verdicts


def _run_one(con: duckdb.DuckDBPyConnection, sql: str, timeout_s: float) -> Verdict:
    timer = threading.Timer(timeout_s, con.interrupt)
    timer.start()
    try:
        query = sql.strip().rstrip(";")
        found = con.execute(f"SELECT count(*) OVER () AS n, * FROM ({query}) LIMIT 1").fetchall()
        names = [d[0] for d in con.description or []]
    except duckdb.InterruptException:
        return Verdict(False, f"did not finish within {timeout_s:g} s")
    except duckdb.Error as exc:
        # Without DuckDB's "LINE 1: …" context: it quotes the wrapper, not the owner's SQL.
        return Verdict(False, f"failed: {_one_line(str(exc).split(chr(10) + 'LINE')[0])}")
    finally:
        timer.cancel()
    if not found:
        return Verdict(True, "returned no rows")
    count, *values = found[0]
    first: dict[str, Any] = dict(zip(names[1:], values, strict=True))
    return Verdict(False, f"returned {count} row(s), the first {_sample(first)}")


def _sample(row: dict[str, Any]) -> str:
    text = repr(row)
    return text if len(text) <= SAMPLE_CHARS else text[: SAMPLE_CHARS - 1] + "…"


def _one_line(error: BaseException | str) -> str:
    return " ".join(str(error).split())
