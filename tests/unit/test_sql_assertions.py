"""A table owner's SQL assertions: one SELECT each, run sandboxed on the batch, interrupted
when they run too long (lakewarden.sql_assertions)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakewarden import sql_assertions

BATCH = pa.table({"id": [1, 2, 2], "v": ["a", None, "c"]})


def test_an_assertion_passes_when_it_returns_no_row() -> None:
    verdicts = sql_assertions.run(
        BATCH,
        {
            "dupes": "WITH d AS (SELECT id FROM batch GROUP BY id HAVING count(*) > 1) "
            "SELECT * FROM d;",
            "nulls": "SELECT * FROM batch WHERE v IS NULL AND id > 5",
        },
        timeout_s=30,
    )
    assert verdicts["dupes"] == sql_assertions.Verdict(
        False, "returned 1 row(s), the first {'id': 2}"
    )
    assert verdicts["nulls"] == sql_assertions.Verdict(True, "returned no rows")


def test_a_runaway_assertion_is_interrupted() -> None:
    slow = "SELECT * FROM range(100000000000) a(i), range(100000000) b(j) WHERE i * j = -1"
    (verdict,) = sql_assertions.run(BATCH, {"slow": slow}, timeout_s=0.5).values()
    assert verdict == sql_assertions.Verdict(False, "did not finish within 0.5 s")


@pytest.mark.parametrize(
    ("sql", "says"),
    [
        ("INSERT INTO batch VALUES (1, 'x')", "must be a SELECT, not INSERT"),
        ("SELECT 1; SELECT 2", "must be one SELECT statement, not 2"),
        ("SET enable_external_access = true", "must be a SELECT, not SET"),
        ("SELEC 1", "does not parse: Parser Error"),
    ],
)
def test_only_one_select_is_accepted(sql: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        sql_assertions.check_query(sql)
