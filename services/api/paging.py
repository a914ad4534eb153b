"""The query parameters of every list: `limit` (1 to 500) and `cursor` (the previous page's
`next_cursor`). Routes take `PageDep`, pass it to the core's list function
(`lakewarden.db.paging`) and answer its `Page` subclass (`services.api.schemas`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query

from lakewarden.db.paging import DEFAULT_LIMIT, MAX_LIMIT, PageRequest
from services.api.deps import BIGINT_MAX

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="page size")]
Cursor = Annotated[
    int | None, Query(ge=0, le=BIGINT_MAX, description="next_cursor of the previous page")
]


def page_request(limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None) -> PageRequest:
    return PageRequest(limit=limit, cursor=cursor)


PageDep = Annotated[PageRequest, Depends(page_request)]
