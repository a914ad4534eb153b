"""Input the API once answered with a 500 (or wrongly accepted), on a real Postgres and a
real Iceberg catalog: each now gets a 4xx that says what to fix."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from helpers import make_table
from sqlalchemy import func, select

from lakewarden.db.models import ManagedTable
from lakewarden.policy.model import KINDS
from lakewarden.runtime import Runtime
from services.api.limits import MAX_BODY_BYTES, RequestLimits

JSON = {"content-type": "application/json"}


@pytest.fixture
def client(client: TestClient, rt: Runtime) -> TestClient:
    """The shared client, with sec.t1 registered."""
    make_table(rt, "sec", "t1", partitioned=False)
    r = client.post("/api/v1/tables", json={"namespace": "sec", "name": "t1"})
    assert r.status_code == 201, r.text
    return client


def _problems(r) -> str:  # type: ignore[no-untyped-def]
    body = r.json()
    return " | ".join(
        [str(body.get("detail"))]
        + [f"{e['field']}: {e['problem']}" for e in body.get("errors", [])]
    )


# --- NaN and Infinity in a JSON body (httpx will not encode them: raw bytes) ---------------


@pytest.mark.parametrize(
    "method, path, body, field",
    [
        ("PUT", "/api/v1/tables/sec/t1/policy", b'{"ttl": {"max_fraction": Infinity}}', "ttl"),
        ("PUT", "/api/v1/tables/sec/t1/policy", b'{"ttl": {"timeout_minutes": Infinity}}', "ttl"),
        ("PUT", "/api/v1/tables/sec/t1/policy", b'{"clean": {"interval_minutes": NaN}}', "clean"),
        ("PUT", "/api/v1/namespaces/sec/policy", b'{"slo": {"window_minutes": -Infinity}}', "slo"),
        (
            "POST",
            "/api/v1/tables",
            b'{"namespace": "sec", "name": "t2", "policy": {"compaction": '
            b'{"small_file_ratio": NaN}}}',
            "policy.compaction.small_file_ratio",
        ),
        ("POST", "/api/v1/tables/sec/t1/blockers", b'{"holder": "j", "ttl_s": Infinity}', "ttl_s"),
        ("POST", "/api/v1/events", b'{"namespace": "sec", "name": "t1", "snapshot_id": NaN}', ""),
    ],
)
def test_non_finite_numbers_are_422(
    client: TestClient, method: str, path: str, body: bytes, field: str
) -> None:
    r = client.request(method, path, content=body, headers=JSON)
    assert r.status_code == 422, r.text
    assert field in _problems(r)
    assert "finite number" in _problems(r)


# --- control characters in body strings ----------------------------------------------------


@pytest.mark.parametrize(
    "body, field",
    [
        ({"holder": "job\x00", "ttl_s": 60}, "holder"),
        ({"holder": "job", "reason": "nul \x00 here", "ttl_s": 60}, "reason"),
        ({"holder": "job\n", "ttl_s": 60}, "holder"),
        ({"holder": "job", "reason": "bell\x07", "ttl_s": 60}, "reason"),
        ({"holder": "job\x7f", "ttl_s": 60}, "holder"),
    ],
)
def test_control_characters_in_a_blocker_are_422(
    client: TestClient, body: dict[str, object], field: str
) -> None:
    r = client.post("/api/v1/tables/sec/t1/blockers", json=body)
    assert r.status_code == 422, r.text
    assert f"{field}: " in _problems(r) and "control character" in _problems(r)
    assert client.get("/api/v1/tables/sec/t1/blockers").json() == []


def test_free_text_keeps_tabs_and_newlines(client: TestClient) -> None:
    reason = "backfill\n\tpart 2 of 3"
    r = client.post(
        "/api/v1/tables/sec/t1/blockers", json={"holder": "job-7", "reason": reason, "ttl_s": 60}
    )
    assert r.status_code == 201, r.text
    assert client.get("/api/v1/tables/sec/t1/blockers").json()[0]["reason"] == reason


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "/api/v1/tables", {"namespace": "sec", "name": "t1\x00"}),
        ("POST", "/api/v1/events", {"namespace": "sec\x00", "name": "t1"}),
        ("PUT", "/api/v1/tables/sec/t1/policy", {"compaction": {"pool": "p\x00"}}),
        ("PUT", "/api/v1/namespaces/sec/policy", {"ttl": {"column": "ts\x00"}}),
        ("POST", "/api/v1/alerts/1/ack", {"by": "me\x00"}),
        ("POST", "/api/v1/tables/sec/t1/tasks", {"kind": "ttl\x00"}),
    ],
)
def test_control_characters_in_any_body_are_422(
    client: TestClient, method: str, path: str, body: dict[str, object]
) -> None:
    r = client.request(method, path, json=body)
    assert r.status_code == 422, r.text
    assert "control character U+0000" in _problems(r)


# --- control characters in the path and query ----------------------------------------------


@pytest.mark.parametrize(
    "url, name",
    [
        ("/api/v1/tasks?kind=%00", "kind"),
        ("/api/v1/tasks?state=running%0A", "state"),
        ("/api/v1/tasks?table=sec.t1%0A", "table"),
        ("/api/v1/alerts?state=%7F", "state"),
        ("/api/v1/tasks?k%00=1", "k"),
        ("/api/v1/tables/sec%00/t1", None),
        ("/api/v1/tables/sec/t1%0D/blockers", None),
    ],
)
def test_control_characters_in_path_or_query_are_422(
    client: TestClient, url: str, name: str | None
) -> None:
    r = client.get(url)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "control character" in detail
    assert (f"query parameter {name!r}" if name else "the path") in detail


def test_task_kind_must_be_known(client: TestClient) -> None:
    r = client.get("/api/v1/tasks", params={"kind": "compactoin"})
    assert r.status_code == 422, r.text
    assert "query.kind: " in _problems(r) and all(k in _problems(r) for k in KINDS)
    for kind in KINDS:
        assert client.get("/api/v1/tasks", params={"kind": kind}).status_code == 200


# --- one Iceberg table, one managed row ----------------------------------------------------


def test_a_trailing_newline_does_not_register_the_table_twice(
    client: TestClient, rt: Runtime
) -> None:
    for namespace, name in (("sec\n", "t1"), ("sec", "t1\n")):
        r = client.post("/api/v1/tables", json={"namespace": namespace, "name": name})
        assert r.status_code == 422, r.text
    with rt.engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(ManagedTable)) == 1


def test_a_namespace_with_a_trailing_newline_is_422(client: TestClient) -> None:
    for method in ("GET", "PUT"):
        r = client.request(method, "/api/v1/namespaces/sec%0A/policy", json={})
        assert r.status_code == 422, r.text
    assert client.get("/api/v1/namespaces/sec/policy").json()["version"] == 0


# --- body size -----------------------------------------------------------------------------


def test_a_body_over_one_mib_is_413(client: TestClient) -> None:
    big = b'{"holder": "' + b"x" * (2 * MAX_BODY_BYTES) + b'", "ttl_s": 60}'
    r = client.post("/api/v1/tables/sec/t1/blockers", content=big, headers=JSON)
    assert r.status_code == 413, r.text
    assert "at most 1048576 bytes" in r.json()["detail"]


def test_a_streamed_body_over_one_mib_is_413(client: TestClient) -> None:
    """Without a Content-Length (chunked), the bytes are counted."""

    def chunks() -> Iterator[bytes]:
        yield b'{"holder": "'
        for _ in range(32):
            yield b"x" * 65536
        yield b'", "ttl_s": 60}'

    r = client.post("/api/v1/tables/sec/t1/blockers", content=chunks(), headers=JSON)
    assert "content-length" not in r.request.headers
    assert r.status_code == 413, r.text


def test_a_streamed_body_within_the_limit_is_served(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"holder": "job", '
        yield b'"ttl_s": 60}'

    r = client.post("/api/v1/tables/sec/t1/blockers", content=chunks(), headers=JSON)
    assert r.status_code == 201, r.text


def test_the_limit_counts_every_chunk() -> None:
    """Many small chunks, no Content-Length: refused as soon as the total passes the limit,
    before the app sees any of it."""
    seen: list[object] = []

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        seen.append(await receive())

    async def run(chunks: int) -> list[dict[str, object]]:
        sent: list[dict[str, object]] = []
        pending = [
            {"type": "http.request", "body": b"x" * 1000, "more_body": i < chunks - 1}
            for i in range(chunks)
        ]

        async def receive():  # type: ignore[no-untyped-def]
            return pending.pop(0)

        async def send(message):  # type: ignore[no-untyped-def]
            sent.append(message)

        scope = {"type": "http", "path": "/x", "query_string": b"", "headers": []}
        await RequestLimits(app, max_body_bytes=10_000)(scope, receive, send)
        return sent

    sent = asyncio.run(run(11))
    assert sent[0]["status"] == 413 and seen == []
    assert asyncio.run(run(10)) == [] and seen[0] == {
        "type": "http.request",
        "body": b"x" * 10_000,
        "more_body": False,
    }


# --- a policy that would break the sweep ---------------------------------------------------


@pytest.mark.parametrize(
    "policy, field",
    [
        ({"clean": {"interval_minutes": 1e13}}, "clean.interval_minutes"),
        ({"ttl": {"retention_days": 1e-9}}, "ttl"),
        ({"clean": {"keep_last_snapshots": 2**70}}, "clean.keep_last_snapshots"),
        ({"clean": {"keep_last_snapshots": True}}, "clean.keep_last_snapshots"),
        ({"compaction": {"min_small_files": "20"}}, "compaction.min_small_files"),
    ],
)
def test_absurd_policies_are_422(client: TestClient, policy: dict[str, object], field: str) -> None:
    for path in ("/api/v1/tables/sec/t1/policy", "/api/v1/namespaces/sec/policy"):
        r = client.put(path, json=policy)
        assert r.status_code == 422, r.text
        assert f"{field}: " in _problems(r)
    assert client.get("/api/v1/tables/sec/t1").json()["policy_version"] == 1


def test_a_safety_floor_says_how_to_override(client: TestClient) -> None:
    policy = {"clean": {"max_snapshot_age_hours": 0.5}}
    r = client.put("/api/v1/tables/sec/t1/policy", json=policy)
    assert r.status_code == 422, r.text
    assert "safety floor of 1 hour" in _problems(r)
    assert "clean.allow_below_safety_floors: true" in _problems(r)
    policy["clean"]["allow_below_safety_floors"] = True  # type: ignore[index]
    r = client.put("/api/v1/tables/sec/t1/policy", json=policy)
    assert r.status_code == 200, r.text
    assert r.json()["policy"]["clean"]["max_snapshot_age_hours"] == 0.5


def test_clustering_without_columns_needs_a_declared_sort_order(
    client: TestClient, rt: Runtime
) -> None:
    """Clustering that names no columns sorts by the table's declared order: refused on a
    table that declares none, accepted once it does."""
    from pyiceberg.transforms import IdentityTransform

    policy = {"clustering": {"enabled": True}}
    r = client.put("/api/v1/tables/sec/t1/policy", json=policy)
    assert r.status_code == 422, r.text
    assert "declares no sort order: give clustering.columns" in _problems(r)
    table = rt.catalog.load_table("sec.t1")
    column = table.schema().fields[0].name
    with table.update_sort_order() as order:
        order.asc(column, IdentityTransform())
    r = client.put("/api/v1/tables/sec/t1/policy", json=policy)
    assert r.status_code == 200, r.text
