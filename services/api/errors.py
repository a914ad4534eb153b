"""The safety net for database conflicts that escape a route.

Routes answer the conflicts they expect themselves (409 "already managed", …). Whatever
still gets out - a unique or foreign-key violation, a serialization failure or a deadlock,
raised by a statement or by the commit - is a conflict with a concurrent change, and the
transaction was rolled back: a 409 that says so, never a 500, SQL text or a stack trace.
Any other database error stays a 500 (the app's generic handler, with an error id).
"""

from __future__ import annotations

import logging
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, IntegrityError

log = logging.getLogger(__name__)

# SQLSTATE classes: 23 integrity constraint violation; 40 transaction rollback
# (40001 serialization failure, 40P01 deadlock detected).
CONFLICT_CLASSES = ("23", "40")


def sqlstate(exc: DBAPIError) -> str:
    return str(getattr(exc.orig, "sqlstate", None) or "")


def is_conflict(exc: DBAPIError) -> bool:
    return isinstance(exc, IntegrityError) or sqlstate(exc)[:2] in CONFLICT_CLASSES


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, DBAPIError) or not is_conflict(exc):
        raise exc  # not a conflict: the generic handler makes it a 500 with an error id
    error_id = uuid.uuid4().hex[:12]
    diag = getattr(exc.orig, "diag", None)
    log.warning(
        "conflict %s on %s %s: %s %s (constraint %s)",
        error_id,
        request.method,
        request.url.path,
        sqlstate(exc),
        type(exc.orig).__name__,
        getattr(diag, "constraint_name", None),
    )
    if isinstance(exc, IntegrityError):
        detail = (
            "the request conflicts with a concurrent change (or refers to something that is "
            "gone); nothing was written: read the current state and retry"
        )
    else:
        detail = "the request collided with a concurrent change; nothing was written: retry"
    return JSONResponse({"detail": detail, "error_id": error_id}, status_code=409)


def register(app: FastAPI) -> None:
    """Answer database conflicts escaping any route with a 409."""
    app.add_exception_handler(DBAPIError, _database_error)
