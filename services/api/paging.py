"""The query parameters of every list: `limit` (1 to 500) and `cursor` (the previous page's
`next_cursor`). Routes take `PageDep`, pass it to the core's list function
(`lakewarden.db.paging`) and answer its `Page` subclass (`services.api.schemas`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated

from fastapi import Depends, HTTPException, Query

from lakewarden.db.paging import DEFAULT_LIMIT, MAX_LIMIT, PageRequest
from services.api.deps import BIGINT_MAX

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="page size")]
Cursor = Annotated[
    int | None, Query(ge=0, le=BIGINT_MAX, description="next_cursor of the previous page")
]


def page_request(limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None) -> PageRequest:
    return PageRequest(limit=limit, cursor=cursor)


PageDep = Annotated[PageRequest, Depends(page_request)]


# --- Cursors of a list with several orders (`GET /api/v1/tables?sort=`) -------------------
#
# The cursor names the order it belongs to and carries the last row's keys: in the first
# (default) order it is the plain id, as every other list's; in another `<sort>:<key>:<id>`,
# a key that is NULL (a table never measured) written `none`.

_KEY = re.compile(r"\A-?[0-9]{1,19}\Z")


def sorted_cursor(
    sort: str, key: tuple[int | None, ...] | None, sorts: Sequence[str]
) -> str | None:
    """The `next_cursor` of a page in order `sort` (one of `sorts`, the first the default)
    whose last row had `key`; None on the last page."""
    if key is None:
        return None
    parts = ["none" if k is None else str(k) for k in key]
    return ":".join(parts if sort == sorts[0] else [sort, *parts])


def read_sorted_cursor(
    cursor: str | None, sort: str, keys: int, sorts: Sequence[str]
) -> tuple[int | None, ...] | None:
    """The `keys` keys a `sorted_cursor` of order `sort` carries, or a 422 that says what to
    fix: a cursor of another order, or one this list never gave."""
    if cursor is None:
        return None
    came_from, _, rest = cursor.partition(":") if ":" in cursor else (sorts[0], "", cursor)
    if came_from in sorts and came_from != sort:
        raise HTTPException(
            422,
            f"cursor: it is from a page in sort={came_from}, not sort={sort}; pass it with "
            f"sort={came_from}, or leave the cursor out to start sort={sort} from its first page",
        )
    parts = rest.split(":")
    values = tuple(_key(p) for p in parts) if came_from == sort and len(parts) == keys else ()
    if not values or any(v is False for v in values) or values[-1] is None:
        raise HTTPException(
            422,
            "cursor: not a next_cursor of this list; pass the next_cursor of the previous page "
            "unchanged (with the same sort), or leave it out for the first page",
        )
    return tuple(v for v in values if v is not False)


def _key(text: str) -> int | bool | None:
    """A cursor's key: an integer in BIGINT's range, None for `none`, False if neither."""
    if text == "none":
        return None
    if not _KEY.match(text) or not -BIGINT_MAX - 1 <= int(text) <= BIGINT_MAX:
        return False
    return int(text)
