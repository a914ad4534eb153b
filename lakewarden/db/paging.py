"""Keyset pagination: every list is read one page at a time, the same way.

A page is at most `limit` rows ordered by an id column; `next_cursor` is the id of its
last row when more follow (one extra row is read to know), and the next page starts after
it. No offsets: a row inserted or deleted meanwhile neither repeats nor hides another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import ColumnElement, Select, tuple_
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


@dataclass(frozen=True)
class KeyedPage(Generic[R]):
    """A page ordered by several keys (`keyset_page_by`)."""

    items: list[R]
    next_key: tuple[int, ...] | None  # the last row's keys when more follow, else None


def keyset_page_by(
    session: Session,
    query: Select[*tuple[Any, ...]],
    keys: Sequence[ColumnElement[Any] | InstrumentedAttribute[Any]],
    limit: int,
    after: tuple[int | None, ...] | None = None,
) -> KeyedPage[Any]:
    """Up to `limit` rows of `query` (one entity) ascending by `keys`, integer columns
    (not NULL in the rows `query` selects) whose last is unique (an id), after the row whose
    keys were `after` (a row comparison, which a btree index on the same columns serves)."""
    q = query.order_by(*keys).limit(limit + 1)
    if after is not None:
        if len(after) != len(keys):
            raise ValueError(f"a cursor of {len(after)} keys for an order of {len(keys)}")
        q = q.where(tuple_(*keys) > tuple_(*after) if len(keys) > 1 else keys[0] > after[0])
    rows = session.execute(q.add_columns(*keys)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    next_key = tuple(int(k) for k in rows[-1][1:]) if more else None
    return KeyedPage(items=[row[0] for row in rows], next_key=next_key)
