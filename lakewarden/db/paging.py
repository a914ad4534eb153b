"""Keyset pagination: every list is read one page at a time, the same way.

A page is at most `limit` rows ordered by an id column; `next_cursor` is the id of its
last row when more follow (one extra row is read to know), and the next page starts after
it. No offsets: a row inserted or deleted meanwhile neither repeats nor hides another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute, Session

R = TypeVar("R")

MAX_LIMIT = 500  # the largest page a caller may ask for
DEFAULT_LIMIT = 50


@dataclass(frozen=True)
class PageRequest:
    limit: int = DEFAULT_LIMIT  # at most MAX_LIMIT
    cursor: int | None = None  # the previous page's next_cursor; None for the first page


@dataclass(frozen=True)
class Page(Generic[R]):
    items: list[R]
    next_cursor: int | None  # pass as `cursor` for the next page; None on the last one


def keyset_page(
    session: Session,
    query: Select[*tuple[Any, ...]],
    key: InstrumentedAttribute[int],
    page: PageRequest,
    *,
    newest_first: bool = True,
) -> Page[Any]:
    """The `page` of `query` ordered by `key` (descending when `newest_first`). A query of
    one entity gives its objects; of several, their rows (tuples)."""
    limit, cursor = page.limit, page.cursor
    q = query.order_by(key.desc() if newest_first else key.asc()).limit(limit + 1)
    if cursor is not None:
        q = q.where(key < cursor if newest_first else key > cursor)
    rows = session.execute(q.add_columns(key)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    items = [row[0] if len(row) == 2 else tuple(row[:-1]) for row in rows]
    return Page(items=items, next_cursor=rows[-1][-1] if more else None)
