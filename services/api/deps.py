"""Request dependencies: the runtime, one transaction per request, parsed table names."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from fastapi.routing import APIRoute
from pydantic import BeforeValidator
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.tables import get_table
from services.api.schemas import IDENTIFIER_PATTERN, NAMESPACE_PATTERN, documented_pattern

BIGINT_MAX = 2**63 - 1  # ids are Postgres bigints: a larger one is a 422, not a 500


def _whole_number(value: object) -> object:
    """An id in a path is digits only: pydantic's lax int took `1.0` (and `1e0` would be
    next), so one task had several URLs."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("must be a whole number of digits only, like 42")
    return value


Id = Annotated[int, Path(ge=1, le=BIGINT_MAX), BeforeValidator(_whole_number)]


async def get_runtime(request: Request) -> Runtime:
    """Async: it only reads app state, so it runs on the event loop (a sync dependency
    would cost every request a hop to the thread pool and back)."""
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_session(rt: RuntimeDep) -> Iterator[Session]:
    """One transaction per request: committed when the handler returns, rolled back if it
    raises. Function-scoped (below), so the commit happens before the response is sent: a
    2xx means committed (a GET right after sees the write), and a commit that fails is an
    error response (services/api/errors.py), never a success."""
    with transaction(rt.engine) as session:
        yield session


# scope="function": FastAPI exits the dependency when the route function returns (after the
# response body is serialized, before it is sent); the default "request" scope exits only
# after the response went out, so a client could be told 201 for a write that then failed.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


# Event batches ingested at once by one replica, and how long one more waits for its turn.
# A batch holds a worker thread and a database connection (the pool has 5 + 5) while it
# runs; without this gate a burst of batches (issue 31: 10x the sustained rate) took every
# thread and connection, so /readyz and every other request queued behind it and requests
# failed on the pool's 30 s timeout. Waiting here holds neither: it is on the event loop.
INGEST_BATCHES_AT_ONCE = 4
INGEST_WAIT_S = 10.0


def new_ingest_gate() -> asyncio.Semaphore:
    """The app's turns to ingest a batch, made when it starts serving (a semaphore belongs
    to the event loop it first waits on: a new loop, a new gate)."""
    return asyncio.Semaphore(INGEST_BATCHES_AT_ONCE)


async def admit_batch(request: Request) -> AsyncIterator[None]:
    """A turn to ingest an event batch (INGEST_BATCHES_AT_ONCE at once), or a 503 with
    Retry-After when none came free in INGEST_WAIT_S: a forwarder retries (ingest is
    idempotent), and the replica stays responsive to everything else meanwhile."""
    state = request.app.state
    gate: asyncio.Semaphore | None = getattr(state, "ingest_gate", None)
    if gate is None:  # an app served without its lifespan
        gate = state.ingest_gate = new_ingest_gate()
    try:
        await asyncio.wait_for(gate.acquire(), INGEST_WAIT_S)
    except TimeoutError:
        raise HTTPException(
            503,
            f"ingest is at capacity ({INGEST_BATCHES_AT_ONCE} batches in progress, none "
            f"finished within {INGEST_WAIT_S:g} s): nothing of this batch was ingested; "
            "retry after the Retry-After seconds",
            headers={"Retry-After": "2"},
        ) from None
    try:
        yield
    finally:
        gate.release()


# Before the session and the caller's authentication (each a thread hop and a connection).
BatchTurn = Annotated[None, Depends(admit_batch, scope="function")]


# A table's namespace or name in a path. The pattern is enforced by TableRef (its 422 says
# what a valid name looks like); here it is documented.
Identifier = Annotated[
    str, Path(max_length=128, json_schema_extra=documented_pattern(IDENTIFIER_PATTERN))
]


# A namespace in a path: one level, or several joined by dots (`a.b.c`).
NamespacePath = Annotated[
    str, Path(max_length=255, json_schema_extra=documented_pattern(NAMESPACE_PATTERN))
]


def table_ref(namespace: NamespacePath, name: Identifier) -> TableRef:
    return TableRef(namespace, name)  # InvalidIdentifier: a 422 (services/api/errors.py)


RefDep = Annotated[TableRef, Depends(table_ref)]


def catalog_in_path(
    catalog: Annotated[
        str,
        Path(
            max_length=128,
            description="a registered catalog (GET /api/v1/catalogs); the paths without "
            "/catalogs/{catalog} are aliases for the default catalog",
            json_schema_extra=documented_pattern(IDENTIFIER_PATTERN),
        ),
    ],
    rt: RuntimeDep,
) -> str:
    """The catalog of the path, once known to exist (UnknownCatalog: a 404)."""
    return rt.catalogs.entry(catalog).name


CatalogDep = Annotated[str, Depends(catalog_in_path)]


def managed(session: Session, catalog: str, ref: TableRef) -> ManagedTable:
    """The managed table, or a 404 that says how to manage it."""
    row = get_table(session, catalog, ref)
    if row is None:
        retired = get_table(session, catalog, ref, include_retired=True)
        why = f" ({retired.retired_reason})" if retired and retired.retired_reason else ""
        raise HTTPException(
            404,
            f"table {ref.dotted} of catalog {catalog!r} is not managed by lakewarden{why}; "
            f"register it with POST /api/v1/catalogs/{catalog}/tables",
        )
    return row


def operation_id(route: APIRoute) -> str:
    """The OpenAPI operationId: the route function's name in camelCase (`list_tables` is
    `listTables`). Name a route function for what a client calls it: verb, then object."""
    first, *rest = route.name.split("_")
    return first + "".join(word.capitalize() for word in rest)
