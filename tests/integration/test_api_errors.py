"""One error body, documented: every error the API gives is an `ErrorOut`, whichever layer
answers (the request limits, routing, validation, a route, the database, the unexpected), and
the OpenAPI documents each status an operation can give with that schema."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import serve
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers import make_table
from sqlalchemy import create_engine

from lakewarden.runtime import Runtime
from services.api.limits import MAX_BODY_BYTES
from services.api.schemas import ErrorOut

JSON = {"content-type": "application/json"}
ERROR_REF = "#/components/schemas/ErrorOut"


@pytest.fixture
def client(client: TestClient, rt: Runtime) -> TestClient:
    """The shared client, with sec.t1 registered."""
    make_table(rt, "sec", "t1", partitioned=False)
    assert client.post("/api/v1/tables", json={"namespace": "sec", "name": "t1"}).status_code == 201
    return client


def _error(r: Any, status: int) -> ErrorOut:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert set(body) <= {"detail", "errors", "error_id"}, body
    return ErrorOut.model_validate(body)


def test_every_layer_answers_with_the_one_error_body(client: TestClient, app: FastAPI) -> None:
    # the request limits, before routing
    e = _error(client.get("/api/v1/tasks?kind=%00"), 422)
    assert "control character" in e.detail
    big = b'{"holder": "' + b"x" * MAX_BODY_BYTES + b'", "ttl_s": 60}'
    _error(client.post("/api/v1/tables/sec/t1/blockers", content=big, headers=JSON), 413)
    # routing
    _error(client.get("/api/v1/nothing-here"), 404)
    # validation: field by field
    e = _error(client.get("/api/v1/tasks", params={"limit": 0, "state": "done"}), 422)
    assert e.detail == "invalid request" and e.errors
    assert {p.field for p in e.errors} == {"query.limit", "query.state"}
    e = _error(client.post("/api/v1/tables", content=b"{", headers=JSON), 422)
    assert e.errors
    # a body that is not even text
    _error(client.post("/api/v1/tables", content=b'{"name": "\x80"}', headers=JSON), 400)
    # routes
    _error(client.get("/api/v1/tables/sec/nope"), 404)
    _error(client.post("/api/v1/tables", json={"namespace": "sec", "name": "t1"}), 409)
    e = _error(client.get("/api/v1/tables/sec/9bad"), 422)
    assert "invalid table name" in e.detail and e.errors is None

    # the unexpected: a 500 with an id to find in the log, and nothing else
    def boom() -> None:
        raise RuntimeError("secret internals")

    app.add_api_route("/boom", boom)
    e = _error(client.get("/boom"), 500)
    assert e.error_id and "secret" not in e.detail


@pytest.mark.parametrize(
    "path, allowed",
    [
        ("/api/v1/tables", "GET, POST"),
        ("/api/v1/tables/sec/t1", "DELETE, GET"),
        ("/api/v1/tables/sec/t1/blockers", "GET, POST"),
        ("/api/v1/namespaces/sec/policy", "GET, PUT"),
        ("/api/v1/tasks/1/cancel", "POST"),
    ],
)
def test_a_405_allows_every_method_of_the_path(client: TestClient, path: str, allowed: str) -> None:
    for method in ("OPTIONS", "PATCH"):
        r = client.request(method, path)
        _error(r, 405)
        assert r.headers["allow"] == allowed


def _operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method, op in item.items():
            yield method.upper(), path, op


def _schema_ref(response: dict[str, Any]) -> str | None:
    return response.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")


def test_the_openapi_documents_each_error_with_the_one_body(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    for method, path, op in _operations(spec):
        where = f"{method} {path}"
        statuses = op["responses"]
        assert {"422", "500"} <= set(statuses), where  # the request limits apply everywhere
        for status, response in statuses.items():
            if status[0] in "45" and where != "GET /readyz":
                assert _schema_ref(response) == ERROR_REF, (where, status)
        if "requestBody" in op:
            assert {"400", "413"} <= set(statuses), where
        if path.startswith("/api/v1/tables/{namespace}/{name}") or "{task_id}" in path:
            assert "404" in statuses, where
        if method in ("POST", "PUT", "DELETE"):  # a write can meet a concurrent one
            assert "409" in statuses, where
    readyz = spec["paths"]["/readyz"]["get"]["responses"]
    assert _schema_ref(readyz["503"]) == "#/components/schemas/ReadyOut"


def test_no_database_connection_free_is_a_503_to_retry(rt: Runtime) -> None:
    """Every connection of the pool busy past its timeout (a burst beyond capacity): a 503
    with Retry-After, not a 500."""
    small = dataclasses.replace(
        rt, engine=create_engine(rt.engine.url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    )
    try:
        with serve(small) as client, small.engine.connect():  # its one connection taken
            r = client.get("/api/v1/tables")
        assert r.status_code == 503 and r.headers["Retry-After"] == "2", r.text
        assert "the server is at capacity" in r.json()["detail"]
    finally:
        small.engine.dispose()
