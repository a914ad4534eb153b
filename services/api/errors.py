"""Every error answers with one body, `ErrorOut`, and the OpenAPI documents each one.

- `HTTPException`s raised by routes (404 no such table, 409 already managed, …) and by
  routing itself (404 no such path, 405 with an `Allow` that lists every method of the path);
- the core's refusals, wherever a route or dependency meets them, so that routes do not
  catch them one by one: an invalid table name (`InvalidIdentifier`, 422), a table the
  catalog does not have (pyiceberg's `NoSuchTableError`, 404), a task transition refused
  (`TransitionRejected`: 404 no such task, 409 it already ended or was moved meanwhile);
- invalid requests (422, with `errors` field by field; services/api/limits.py answers 413
  and control characters in the path or query before routing, with the same body);
- database conflicts that escape a route: a unique or foreign-key violation, a
  serialization failure or a deadlock, raised by a statement or by the commit, is a
  conflict with a concurrent change and the transaction was rolled back: a 409 that says
  so, never a 500, SQL text or a stack trace. Routes answer the conflicts they expect
  themselves (409 "already managed", …);
- anything else: a 500 with an `error_id` to find in the server log.

`documented()` is what routes pass as `responses=`; `APP_RESPONSES` (422 and 500) apply to
every operation, which also keeps FastAPI from documenting its own 422 body.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pyiceberg.exceptions import NoSuchTableError
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from lakewarden.catalogs.catalog import (
    CatalogConfigError,
    InvalidIdentifier,
    UnknownCatalog,
    UnreadableMetadata,
)
from lakewarden.catalogs.registry import NotIceberg
from lakewarden.db.session import transaction
from lakewarden.tables import TableGone
from lakewarden.tasks.machine import TERMINAL_STATES
from lakewarden.tasks.repo import TransitionRejected
from services.api.access import authenticate
from services.api.limits import MAX_BODY_BYTES
from services.api.schemas import ErrorOut, FieldProblem

log = logging.getLogger(__name__)

# A 422 lists at most this many problems (and says how many there were), each field path
# and message cut to MAX_PROBLEM_CHARS: the answer stays a few KB whatever the body.
MAX_LISTED_PROBLEMS = 20
MAX_PROBLEM_CHARS = 200

# SQLSTATE classes: 23 integrity constraint violation; 40 transaction rollback
# (40001 serialization failure, 40P01 deadlock detected).
CONFLICT_CLASSES = ("23", "40")

DESCRIPTIONS: dict[int, str] = {
    400: "the body could not be read (e.g. it is not UTF-8); malformed JSON is a 422",
    404: "no such resource (the detail says which)",
    409: "conflicts with the current state or with a concurrent change; nothing was written",
    413: f"the body is over {MAX_BODY_BYTES} bytes (1 MiB)",
    422: "invalid request: `errors` lists the fields and what to fix (the first 20; `detail` "
    "then says how many there were; a control character in the path or the query is "
    "refused here too)",
    500: "unexpected error; the server log has it under `error_id`",
    503: "the server is at capacity (a burst beyond what it ingests at once, or no database "
    "connection free in time): retry after `Retry-After` seconds",
}


def documented(
    *codes: int, body: bool = False, notes: dict[int, str] | None = None
) -> dict[int | str, dict[str, Any]]:
    """`responses=` for an operation: the error statuses it can give, each an `ErrorOut`,
    described by `notes` or generically. `body=True` adds what a request body can get
    (400 unreadable, 413 too large)."""
    wanted = sorted({*codes, *(notes or {}), *((400, 413) if body else ())})
    return {
        c: {"model": ErrorOut, "description": (notes or {}).get(c, DESCRIPTIONS[c])} for c in wanted
    }


NOT_MANAGED = "the table is not managed by lakewarden (register it with POST /api/v1/tables)"
ON_TABLE = {404: NOT_MANAGED}  # notes for an operation on /api/v1/tables/{namespace}/{name}

# Every operation: the request limits apply before routing (422), and anything can fail (500).
APP_RESPONSES = documented(422, 500)


def as_json(responses: dict[int | str, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    """The same, for an operation whose success is not JSON (FastAPI would document an
    error with the success's media type): errors are JSON whatever the operation."""
    ref = {"$ref": "#/components/schemas/ErrorOut"}
    return {
        code: {
            "description": response["description"],
            "content": {"application/json": {"schema": ref}},
        }
        for code, response in responses.items()
    }


def error_response(
    status: int,
    detail: str,
    *,
    errors: list[FieldProblem] | None = None,
    error_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = ErrorOut(detail=detail, errors=errors, error_id=error_id)
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


def sqlstate(exc: DBAPIError) -> str:
    return str(getattr(exc.orig, "sqlstate", None) or "")


def is_conflict(exc: DBAPIError) -> bool:
    return isinstance(exc, IntegrityError) or sqlstate(exc)[:2] in CONFLICT_CLASSES


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Starlette lists the methods of the first route that matched the path only; a path
        # served by several routes (GET and DELETE of a table) supports all of theirs.
        headers["Allow"] = _allowed_methods(request) or headers.get("Allow", "")
    return error_response(exc.status_code, str(exc.detail), headers=headers or None)


def _allowed_methods(request: Request) -> str:
    methods: set[str] = set()
    routes: Sequence[BaseRoute] = getattr(request.app.state, "routes", ())
    for route in (*request.app.router.routes, *routes):
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


async def _invalid_request(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # Say what to fix, field by field, without echoing internals (nor the input). Bounded:
    # a body of 10,000 unknown keys made a 609 KB answer; the first problems and a count.
    problems = exc.errors()
    errors = [
        FieldProblem(
            field=_bounded(".".join(str(p) for p in e["loc"] if p != "body")),
            problem=_bounded(str(e["msg"])),
        )
        for e in problems[:MAX_LISTED_PROBLEMS]
    ]
    detail = "invalid request"
    if len(problems) > MAX_LISTED_PROBLEMS:
        detail += f": {len(problems)} problems, the first {MAX_LISTED_PROBLEMS} listed"
    return error_response(422, detail, errors=errors)


def _bounded(text: str) -> str:
    """A field path or message cut to MAX_PROBLEM_CHARS (a key may be as long as the body)."""
    if len(text) <= MAX_PROBLEM_CHARS:
        return text
    return text[: MAX_PROBLEM_CHARS - 1] + "…"


async def _invalid_identifier(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, InvalidIdentifier)
    return error_response(422, str(exc))  # what a valid name looks like


async def _no_such_table(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, NoSuchTableError)
    return error_response(404, str(exc))  # lakewarden.catalogs.catalog.load_table names both


async def _unreadable_metadata(_: Request, exc: Exception) -> JSONResponse:
    # A table pyiceberg cannot read (Iceberg v3's variant columns): not managed, and why.
    return error_response(422, str(exc))


async def _unknown_catalog(request: Request, exc: Exception) -> JSONResponse:
    # The path's catalog is looked up before the route authenticates: a caller without a
    # valid credential gets its 401, not a 404 that tells which catalogs exist.
    if getattr(request.state, "access", None) is None:
        try:
            await anyio.to_thread.run_sync(_authenticate, request)
        except StarletteHTTPException as refusal:
            return await _http_error(request, refusal)
    return error_response(404, str(exc))  # names the catalog and how to list them


def _authenticate(request: Request) -> None:
    rt = request.app.state.runtime
    with transaction(rt.engine) as session:
        authenticate(request, rt, session)


async def _catalog_unusable(_: Request, exc: Exception) -> JSONResponse:
    # A registered catalog whose secret reference this replica cannot resolve: the
    # deployment must be fixed, not the request. The message names the reference only.
    return error_response(503, f"{exc}; fix the deployment of this replica or the catalog")


async def _not_iceberg(_: Request, exc: Exception) -> JSONResponse:
    # An Iceberg-only operation (refs, readiness, a policy check against the table, ...)
    # on a Hudi table: the request, not the deployment, is at fault.
    return error_response(409, f"{exc}: this operation is for Iceberg tables only")


async def _table_gone(_: Request, exc: Exception) -> JSONResponse:
    # Unregistered by a concurrent request after this one looked the table up.
    return error_response(404, f"{exc}; register it again with POST /api/v1/tables")


async def _transition_rejected(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TransitionRejected)
    if exc.state is None:
        return error_response(404, f"task {exc.task_id} does not exist")
    if exc.state in TERMINAL_STATES:
        return error_response(409, f"task {exc.task_id} already ended ({exc.state})")
    return error_response(409, str(exc))


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
    return error_response(409, detail, error_id=error_id)


async def _pool_exhausted(request: Request, exc: Exception) -> JSONResponse:
    # Every database connection of this replica stayed busy for the pool's timeout (a
    # burst beyond capacity): the server's state, not a bug, and retrying later is the fix.
    log.warning("no database connection free on %s %s: %s", request.method, request.url.path, exc)
    return error_response(
        503,
        "the server is at capacity (no database connection came free in time); retry after "
        "the Retry-After seconds (reporting events again is safe: ingest is idempotent)",
        headers={"Retry-After": "2"},
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    error_id = uuid.uuid4().hex[:12]
    log.exception("unhandled error %s on %s %s", error_id, request.method, request.url.path)
    return error_response(500, "internal error; the server log has the details", error_id=error_id)


def register(app: FastAPI, routes: Sequence[BaseRoute]) -> None:
    """Answer every error with an `ErrorOut` body. `routes`: those of the included routers
    (FastAPI wraps them when including; a 405 lists the methods of every one that matches)."""
    app.state.routes = list(routes)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(InvalidIdentifier, _invalid_identifier)
    app.add_exception_handler(NoSuchTableError, _no_such_table)
    app.add_exception_handler(UnknownCatalog, _unknown_catalog)
    app.add_exception_handler(UnreadableMetadata, _unreadable_metadata)
    app.add_exception_handler(CatalogConfigError, _catalog_unusable)
    app.add_exception_handler(NotIceberg, _not_iceberg)
    app.add_exception_handler(TableGone, _table_gone)
    app.add_exception_handler(TransitionRejected, _transition_rejected)
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_exception_handler(PoolTimeout, _pool_exhausted)
    app.add_exception_handler(Exception, _unexpected)
