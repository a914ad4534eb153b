"""A small Iceberg REST catalog for tests: the REST protocol over pyiceberg's `SqlCatalog`.

It speaks the parts of the Iceberg REST spec that pyiceberg's `RestCatalog` and Iceberg's
Java `RESTCatalog` (Spark) use for tables: config, namespaces (list, create, load, exists,
properties, drop), tables (list, create, load, exists, commit, rename, drop, metrics).
Errors are the spec's `{"error": {"message", "type", "code"}}` bodies: 404
NoSuchNamespaceException / NoSuchTableException, 409 AlreadyExistsException /
NamespaceNotEmptyException / CommitFailedException, 400 BadRequestException.

`GET /test/requests` answers how many requests the catalog has served (that route's own
not counted), and how many of them were table loads answered 304: benchmarks count a
poller's catalog requests there.

Table loads carry an `ETag` (of the metadata pointer) and answer `If-None-Match` with a 304,
as catalogs keeping ETags do (off with `etags=False`).

Not served: views, staged creates (`stage-create`), multi-table transactions, register,
credentials vending, scan planning, paging (every list is one page), authentication (any
token or none is accepted). Multi-level namespaces travel as `a%1Fb` in paths and are
stored by SqlCatalog as `a.b`, so a namespace part may not contain a dot.

    with serve_rest_catalog("postgresql+psycopg://...", "file:///tmp/wh") as uri:
        RestCatalog("rest", uri=uri)

or on its own, until interrupted (prints the URI):

    .venv/bin/python tests/rest_catalog.py SQL_URI WAREHOUSE_URI [--no-etags] [--nagle]
        [--name=NAME]

(`--name`: the SqlCatalog's catalog name, "rest" unless given: a catalog's tables are the
rows of its name, so serving another tool's catalog, as B9 does lakewarden's, takes its name.)

Spark's Iceberg runtime from the offline assembly lacks the (relocated) Apache HttpClient 5
its REST client needs; `spark_rest_jar` builds it, `add_to_spark` puts it on a session.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Body, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError
from pyiceberg import exceptions as exc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from sqlalchemy import text
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    pass

SEP = "\x1f"  # the spec's namespace separator in paths (%1F)
PREFIX = "/v1/{prefix}"  # how the config's `endpoints` name routes (we serve no prefix)
ENDPOINTS = [
    f"{method} {PREFIX}/{path}"
    for method, path in [
        ("GET", "namespaces"),
        ("POST", "namespaces"),
        ("GET", "namespaces/{namespace}"),
        ("HEAD", "namespaces/{namespace}"),
        ("DELETE", "namespaces/{namespace}"),
        ("POST", "namespaces/{namespace}/properties"),
        ("GET", "namespaces/{namespace}/tables"),
        ("POST", "namespaces/{namespace}/tables"),
        ("GET", "namespaces/{namespace}/tables/{table}"),
        ("HEAD", "namespaces/{namespace}/tables/{table}"),
        ("POST", "namespaces/{namespace}/tables/{table}"),
        ("DELETE", "namespaces/{namespace}/tables/{table}"),
        ("POST", "namespaces/{namespace}/tables/{table}/metrics"),
        ("POST", "tables/rename"),
    ]
]

# pyiceberg exception -> (HTTP status, the spec's error type, as Java's RESTCatalog reads it)
_ERRORS: list[tuple[type[Exception], int, str]] = [
    (exc.NoSuchTableError, 404, "NoSuchTableException"),
    (exc.NoSuchNamespaceError, 404, "NoSuchNamespaceException"),
    (exc.TableAlreadyExistsError, 409, "AlreadyExistsException"),
    (exc.NamespaceAlreadyExistsError, 409, "AlreadyExistsException"),
    (exc.NamespaceNotEmptyError, 409, "NamespaceNotEmptyException"),
    (exc.CommitFailedException, 409, "CommitFailedException"),
    (exc.ValidationError, 400, "BadRequestException"),
    (PydanticValidationError, 400, "BadRequestException"),
    (ValueError, 400, "BadRequestException"),
]

COUNTER_PATH = "/test/requests"  # how many requests were served (not an Iceberg route)
JsonBody = Annotated[dict[str, Any], Body()]
_REQUIREMENTS: TypeAdapter[list[TableRequirement]] = TypeAdapter(list[TableRequirement])
_UPDATES: TypeAdapter[list[TableUpdate]] = TypeAdapter(list[TableUpdate])


def error(status: int, kind: str, message: str) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return JSONResponse(body, status_code=status)


def _ns(namespace: str) -> tuple[str, ...]:
    parts = tuple(namespace.split(SEP))
    if not all(parts) or any("." in p for p in parts):
        raise ValueError(f"invalid namespace {parts!r}: empty part, or a part with a dot")
    return parts


def _ns_from_body(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ValueError("namespace must be a list of strings")
    return _ns(SEP.join(value))


def _table_result(table: Table) -> dict[str, Any]:
    return {
        "metadata-location": table.metadata_location,
        "metadata": json.loads(table.metadata.model_dump_json()),
        "config": {},
    }


def _pointer(catalog: SqlCatalog, namespace: tuple[str, ...], table: str) -> str | None:
    """The table's metadata pointer from SqlCatalog's own table (None: no such table)."""
    with catalog.engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = :c "
                "AND table_namespace = :ns AND table_name = :t"
            ),
            {"c": catalog.name, "ns": ".".join(namespace), "t": table},
        ).scalar()


def _etag(pointer: str) -> str:
    return f'"{hashlib.sha256(pointer.encode()).hexdigest()[:32]}"'


class RequestCounter:
    """ASGI middleware counting the HTTP requests served, but for `COUNTER_PATH`'s own, and
    the connections they came on (each client address once: a kept-alive connection counts
    once however many requests it carries). It runs on the event loop's one thread: plain
    ints and a set are safe."""

    def __init__(self, app: ASGIApp, counts: dict[str, int]) -> None:
        self.app = app
        self.counts = counts
        self.clients: set[Any] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != COUNTER_PATH:
            self.counts["requests"] += 1
            self.clients.add(scope.get("client"))
            self.counts["connections"] = len(self.clients)
        await self.app(scope, receive, send)


def create_app(catalog: SqlCatalog, etags: bool = True) -> FastAPI:
    """The REST routes over `catalog`. Handlers are plain `def`s: FastAPI runs them in its
    thread pool, and SqlCatalog's commit is an optimistic compare-and-swap on the metadata
    pointer, so concurrent commits to one table end in one success and 409s."""
    app = FastAPI(title="test Iceberg REST catalog")
    table_path = "/v1/namespaces/{namespace}/tables/{table}"
    counts = {"requests": 0, "not_modified": 0, "connections": 0}
    counted = threading.Lock()  # handlers run in a thread pool
    app.add_middleware(RequestCounter, counts=counts)

    @app.get(COUNTER_PATH)
    def requests_served() -> dict[str, int]:
        return dict(counts)

    for kind, status, name in _ERRORS:

        def handler(_: Request, e: Exception, status: int = status, name: str = name) -> Response:
            return error(status, name, str(e) or type(e).__name__)

        app.add_exception_handler(kind, handler)

    def unserved(_: Request, e: Exception) -> Response:
        # A route this catalog does not serve (views, register, ...), in the spec's shape.
        status = getattr(e, "status_code", 500)
        return error(status, "UnsupportedOperationException", str(getattr(e, "detail", e)))

    def bad_request(_: Request, e: Exception) -> Response:
        return error(400, "BadRequestException", str(e))

    app.add_exception_handler(StarletteHTTPException, unserved)
    app.add_exception_handler(RequestValidationError, bad_request)

    def load(namespace: str, table: str) -> Table:
        return catalog.load_table((*_ns(namespace), table))

    @app.get("/v1/config")
    def config() -> dict[str, Any]:
        return {"defaults": {}, "overrides": {}, "endpoints": ENDPOINTS}

    @app.get("/v1/namespaces")
    def list_namespaces(parent: str | None = None) -> dict[str, Any]:
        base = _ns(parent) if parent else ()
        found = catalog.list_namespaces(base)
        children = sorted({n for n in found if len(n) == len(base) + 1 and n[: len(base)] == base})
        return {"namespaces": [list(n) for n in children]}

    @app.post("/v1/namespaces")
    def create_namespace(body: JsonBody) -> dict[str, Any]:
        ns = _ns_from_body(body.get("namespace"))
        props = body.get("properties") or {}
        catalog.create_namespace(ns, props)
        return {"namespace": list(ns), "properties": props}

    @app.get("/v1/namespaces/{namespace}")
    def load_namespace(namespace: str) -> dict[str, Any]:
        ns = _ns(namespace)
        props = catalog.load_namespace_properties(ns)
        return {
            "namespace": list(ns),
            "properties": {k: v for k, v in props.items() if k != "exists"},
        }

    @app.head("/v1/namespaces/{namespace}", status_code=204)
    def namespace_exists(namespace: str) -> Response:
        if not catalog.namespace_exists(_ns(namespace)):
            return Response(status_code=404)
        return Response(status_code=204)

    @app.delete("/v1/namespaces/{namespace}", status_code=204)
    def drop_namespace(namespace: str) -> Response:
        catalog.drop_namespace(_ns(namespace))
        return Response(status_code=204)

    @app.post("/v1/namespaces/{namespace}/properties")
    def update_properties(namespace: str, body: JsonBody) -> dict[str, Any]:
        summary = catalog.update_namespace_properties(
            _ns(namespace), set(body.get("removals") or []), body.get("updates") or {}
        )
        return {"updated": summary.updated, "removed": summary.removed, "missing": summary.missing}

    @app.get("/v1/namespaces/{namespace}/tables")
    def list_tables(namespace: str) -> dict[str, Any]:
        ns = _ns(namespace)
        idents = catalog.list_tables(ns)
        return {"identifiers": [{"namespace": list(ns), "name": i[-1]} for i in sorted(idents)]}

    @app.post("/v1/namespaces/{namespace}/tables")
    def create_table(namespace: str, body: JsonBody) -> dict[str, Any]:
        if body.get("stage-create"):
            raise ValueError("stage-create is not supported by this test catalog")
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("name is required")
        spec, order = body.get("partition-spec"), body.get("write-order")
        table = catalog.create_table(
            (*_ns(namespace), name),
            schema=Schema.model_validate(body["schema"]),
            location=body.get("location"),
            partition_spec=PartitionSpec.model_validate(spec)
            if spec
            else UNPARTITIONED_PARTITION_SPEC,
            sort_order=SortOrder.model_validate(order) if order else UNSORTED_SORT_ORDER,
            properties=body.get("properties") or {},
        )
        return _table_result(table)

    @app.get(table_path)
    def load_table(namespace: str, table: str, request: Request) -> Response:
        # Conditional loads, as the spec has them: the ETag names the metadata pointer, and
        # a client sending it back in If-None-Match gets a 304 read from the database
        # alone (no metadata file read). Serving none: `serve_rest_catalog(etags=False)`.
        if etags and (asked := request.headers.get("if-none-match")):
            pointer = _pointer(catalog, _ns(namespace), table)
            if pointer is not None and asked == _etag(pointer):
                with counted:
                    counts["not_modified"] += 1
                return Response(status_code=304, headers={"ETag": asked})
        found = load(namespace, table)
        headers = {"ETag": _etag(found.metadata_location)} if etags else {}
        return JSONResponse(_table_result(found), headers=headers)

    @app.head(table_path, status_code=204)
    def table_exists(namespace: str, table: str) -> Response:
        found = catalog.table_exists((*_ns(namespace), table))
        return Response(status_code=204 if found else 404)

    @app.post(table_path)
    def commit_table(namespace: str, table: str, body: JsonBody) -> dict[str, Any]:
        requirements = _REQUIREMENTS.validate_python(body.get("requirements") or [])
        updates = _UPDATES.validate_python(body.get("updates") or [])
        # The table must exist (a create through commit is a staged create: not served).
        # SqlCatalog re-reads it, checks the requirements against what it read, and swaps
        # the pointer only if nobody moved it since: CommitFailedException (409) otherwise.
        current = load(namespace, table)
        response = catalog.commit_table(current, tuple(requirements), tuple(updates))
        return {
            "metadata-location": response.metadata_location,
            "metadata": json.loads(response.metadata.model_dump_json()),
        }

    @app.delete(table_path, status_code=204)
    def drop_table(namespace: str, table: str, purgeRequested: bool = False) -> Response:
        ident = (*_ns(namespace), table)
        (catalog.purge_table if purgeRequested else catalog.drop_table)(ident)
        return Response(status_code=204)

    @app.post(table_path + "/metrics", status_code=204)
    def report_metrics(namespace: str, table: str) -> Response:
        return Response(status_code=204)  # Spark reports scan and commit metrics: accepted

    @app.post("/v1/tables/rename", status_code=204)
    def rename_table(body: JsonBody) -> Response:
        src, dst = body.get("source") or {}, body.get("destination") or {}
        catalog.rename_table(
            (*_ns_from_body(src.get("namespace")), src["name"]),
            (*_ns_from_body(dst.get("namespace")), dst["name"]),
        )
        return Response(status_code=204)

    return app


def listening_socket(nodelay: bool = True) -> socket.socket:
    """A socket on a free loopback port for uvicorn to serve on. Its proto is named TCP:
    asyncio turns Nagle off (TCP_NODELAY) on a connection only when its socket says TCP, and
    without that a kept-alive client waited ~40 ms for every response with a body (h11
    writes the headers and the body apart; the client's delayed ACK held the second write:
    B30's first poll was bound by it, not by the catalog's work). `nodelay=False` serves as
    before, for B30's reference arm only."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP if nodelay else 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def serve_rest_catalog(
    sql_uri: str, warehouse: str, name: str = "rest", etags: bool = True, nodelay: bool = True
) -> Iterator[str]:
    """Serve a REST catalog over `SqlCatalog(name, uri=sql_uri, warehouse=warehouse)` on a
    free loopback port, in a thread of this process; yields its base URI. `etags`: answer
    conditional loads (as catalogs that keep ETags do), or never (as those that do not).
    `nodelay=False`: as served before TCP_NODELAY (`listening_socket`), B30's reference."""
    import uvicorn

    catalog = SqlCatalog(name, uri=sql_uri, warehouse=warehouse)
    sock = listening_socket(nodelay)
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(catalog, etags), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="rest-catalog", daemon=True
    )
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the test REST catalog did not start")
            threading.Event().wait(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        catalog.engine.dispose()


if __name__ == "__main__":
    import sys

    flags = {"--no-etags", "--nagle"}
    names = [a.removeprefix("--name=") for a in sys.argv[1:] if a.startswith("--name=")]
    args = [a for a in sys.argv[1:] if a not in flags and not a.startswith("--name=")]
    if len(args) != 2 or len(names) > 1:
        sys.exit(
            "usage: rest_catalog.py SQL_URI WAREHOUSE_URI [--no-etags] [--nagle] [--name=NAME]"
        )
    etags, nodelay = "--no-etags" not in sys.argv, "--nagle" not in sys.argv
    name = names[0] if names else "rest"
    with serve_rest_catalog(args[0], args[1], name, etags=etags, nodelay=nodelay) as uri:
        print(uri, flush=True)
        with suppress(KeyboardInterrupt):
            threading.Event().wait()
