"""The API's transactions against a real uvicorn server: a 2xx is sent only after its
transaction committed (a GET right after sees the write), and concurrent writes answer
2xx or 409, never 500, with policy versions unique and gapless."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from conftest import TEMPLATE, _admin, _with_db, make_test_runtime
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers import admin_headers, api_process, append_batches, make_table
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError

from lakewarden.db.models import PolicyVersion
from lakewarden.runtime import Runtime
from services.api.deps import SessionDep

TABLES = "/api/v1/tables"


@dataclass
class Api:
    url: str
    rt: Runtime
    log: Path
    headers: dict[str, str]  # an admin's credential

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=60)

    def policy_versions(self, namespace: str, name: str) -> list[int]:
        with self.rt.engine.connect() as conn:
            return list(
                conn.scalars(
                    text(
                        "SELECT v.version FROM policy_versions v "
                        "JOIN managed_tables t ON t.id = v.table_id "
                        "WHERE t.namespace = :ns AND t.name = :name ORDER BY v.version"
                    ),
                    {"ns": namespace, "name": name},
                )
            )


# Iceberg tables in the catalog, none managed at the start; each test uses its own.
CATALOG_TABLES = [
    ("rw", "t0"),
    ("rw", "t1"),
    ("rw", "t2"),
    ("rw", "a"),
    ("rw", "b"),
    ("rw", "c"),
    ("pol", "t"),
    ("reg", "t"),
    ("skew", "t"),
]


# The test server runs with fsync off, so a commit takes well under a millisecond and the
# window between "response sent" and "transaction committed" is hard to hit. Deferred
# triggers make each commit that writes a task or (un)registers a table take 30 ms, as a
# commit may on a busy disk or with a synchronous replica. A response sent before its
# commit is then visibly early: the GET right after it does not see the write.
SLOW_COMMITS = """
CREATE FUNCTION lw_test_slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.03); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER lw_test_slow_commit AFTER INSERT OR UPDATE ON tasks
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION lw_test_slow_commit();
CREATE CONSTRAINT TRIGGER lw_test_slow_commit AFTER INSERT OR DELETE ON managed_tables
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION lw_test_slow_commit();
"""


@pytest.fixture(scope="module")
def api(
    server_url: str, template_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    """One real API process (uvicorn) for the module, on its own database (starting one
    costs seconds), with the tables of CATALOG_TABLES in its catalog."""
    db = f"lw_test_conc_{uuid.uuid4().hex[:10]}"
    with _admin(server_url) as conn:
        conn.execute(f'CREATE DATABASE "{db}" TEMPLATE "{TEMPLATE}"')
    db_url = _with_db(server_url, db)
    with psycopg.connect(
        make_url(db_url).set(drivername="postgresql").render_as_string(False)
    ) as conn:
        conn.execute(SLOW_COMMITS)
    tmp_path = tmp_path_factory.mktemp("api")
    rt = make_test_runtime(db_url, tmp_path)
    for namespace, name in CATALOG_TABLES:
        append_batches(make_table(rt, namespace=namespace, name=name), 1)
    try:
        # One token makes every call here, some 330 changes within a minute (300 allowed).
        with api_process(db_url, tmp_path, mutations_per_minute="100000") as url:
            yield Api(url, rt, tmp_path / "api.log", admin_headers(rt))
    finally:
        rt.engine.dispose()
        rt.catalog.engine.dispose()
        with _admin(server_url) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def concurrently(
    api: Api, n: int, call: Callable[[httpx.Client, int], httpx.Response]
) -> list[httpx.Response]:
    """Fire `call` from `n` threads at once (one connection each, released by a barrier)."""
    barrier = threading.Barrier(n)
    out: list[Any] = [None] * n
    clients = [api.client() for _ in range(n)]
    for c in clients:  # connect first, so that the requests themselves start together
        c.get("/healthz")

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            out[i] = call(clients[i], i)
        except BaseException as exc:  # reported below
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for c in clients:
        c.close()
    for r in out:
        if isinstance(r, BaseException):
            raise r
        assert isinstance(r, httpx.Response), "a thread did not finish"
    return out


def _no_server_errors(api: Api, responses: list[httpx.Response], allowed: set[int]) -> None:
    bad = [(r.status_code, r.text) for r in responses if r.status_code not in allowed]
    assert not bad, f"{bad}\n{api.log.read_text()[-3000:]}"


# --- read-your-writes: a 2xx means committed ---


def test_a_created_task_is_readable_at_once(api: Api) -> None:
    """POST …/tasks answers 201 only once the task is committed: the GET right after finds
    it, and a cancel is visible at once too. Six threads (three tables, two kinds enabled
    by default), 9 rounds each: 54 trigger-then-read and 54 cancel-then-read pairs."""
    names = ("t0", "t1", "t2")
    with api.client() as c:
        for name in names:
            r = c.post(TABLES, json={"namespace": "rw", "name": name})
            assert r.status_code == 201, r.text

    def rounds(c: httpx.Client, i: int) -> httpx.Response:
        name, kind = names[i // 2], ("compaction", "clean")[i % 2]
        for n in range(9):
            r = c.post(f"{TABLES}/rw/{name}/tasks", json={"kind": kind})
            assert r.status_code == 201, f"{name} {kind} round {n}: {r.status_code} {r.text}"
            task_id = r.json()["id"]
            got = c.get(f"/api/v1/tasks/{task_id}")
            assert got.status_code == 200, f"{name} {kind} round {n}: {task_id}: {got.text}"
            r = c.post(f"/api/v1/tasks/{task_id}/cancel")
            assert r.status_code == 200, f"{name} {kind} round {n}: {r.text}"
            got = c.get(f"/api/v1/tasks/{task_id}")
            assert got.json()["state"] == "cancelled", f"{name} {kind} round {n}: {got.text}"
        return r

    concurrently(api, 6, rounds)


def test_register_and_unregister_are_visible_at_once(api: Api) -> None:
    """A 201 registration is readable right after; after a 204 unregistration the table is
    gone right after (404). Three tables, 15 rounds each, side by side."""

    def rounds(c: httpx.Client, i: int) -> httpx.Response:
        name = ("a", "b", "c")[i]
        for n in range(15):
            r = c.post(TABLES, json={"namespace": "rw", "name": name})
            assert r.status_code == 201, f"{name} round {n}: {r.status_code} {r.text}"
            got = c.get(f"{TABLES}/rw/{name}")
            assert got.status_code == 200, f"{name} round {n}: after the 201: {got.text}"
            r = c.delete(f"{TABLES}/rw/{name}")
            assert r.status_code == 204, f"{name} round {n}: {r.text}"
            got = c.get(f"{TABLES}/rw/{name}")
            assert got.status_code == 404, f"{name} round {n}: after the 204: {got.text}"
        return r

    concurrently(api, 3, rounds)


# --- concurrent writes: 2xx or 409, versions unique and gapless ---


def test_concurrent_table_policy_puts_get_unique_gapless_versions(api: Api) -> None:
    """12 PUTs of one table's policy at once, twice: each success has its own version, the
    versions follow on without a gap (response, GET and policy_versions agree), and the
    policy in force is the one of the highest version."""
    with api.client() as c:
        assert c.post(TABLES, json={"namespace": "pol", "name": "t"}).status_code == 201
    for rnd in range(2):
        before = api.policy_versions("pol", "t")
        rs = concurrently(
            api,
            12,
            lambda c, i: c.put(f"{TABLES}/pol/t/policy", json={"compaction": {"priority": i}}),
        )
        _no_server_errors(api, rs, {200, 409})
        ok = [r.json() for r in rs if r.status_code == 200]
        assert ok, "no PUT succeeded"
        versions = sorted(o["policy_version"] for o in ok)
        assert versions == list(range(before[-1] + 1, before[-1] + 1 + len(ok))), (rnd, versions)
        with api.client() as c:
            table = c.get(f"{TABLES}/pol/t").json()
        assert table["policy_version"] == versions[-1]
        assert api.policy_versions("pol", "t") == list(range(1, versions[-1] + 1))
        last = next(o for o in ok if o["policy_version"] == versions[-1])
        assert table["policy_overrides"] == last["policy_overrides"]


def test_concurrent_namespace_policy_puts_get_unique_gapless_versions(api: Api) -> None:
    """12 PUTs of a new namespace's defaults at once, then 12 more on the existing row:
    versions unique, gapless, and the GET shows the last one's policy."""
    url = "/api/v1/namespaces/fresh/policy"
    seen = 0
    for rnd in range(2):  # a namespace without defaults yet, then one with
        rs = concurrently(api, 12, lambda c, i: c.put(url, json={"compaction": {"priority": i}}))
        _no_server_errors(api, rs, {200, 409})
        ok = [r.json() for r in rs if r.status_code == 200]
        assert ok, "no PUT succeeded"
        versions = sorted(o["version"] for o in ok)
        assert versions == list(range(seen + 1, seen + 1 + len(ok))), (rnd, versions)
        seen = versions[-1]
        with api.client() as c:
            got = c.get(url).json()
        assert got["version"] == seen
        last = next(o for o in ok if o["version"] == seen)
        assert got["policy"] == last["policy"]


def test_concurrent_registrations_one_wins_the_rest_409(api: Api) -> None:
    rs = concurrently(api, 8, lambda c, i: c.post(TABLES, json={"namespace": "reg", "name": "t"}))
    _no_server_errors(api, rs, {201, 409})
    assert sorted(r.status_code for r in rs) == [201] + [409] * 7
    for r in rs:
        if r.status_code == 409:
            assert "already managed" in r.json()["detail"]
    with api.client() as c:
        assert c.get(f"{TABLES}/reg/t").status_code == 200
    assert api.policy_versions("reg", "t") == [1]


def test_table_and_namespace_policy_races_never_combine_into_an_invalid_policy(
    api: Api,
) -> None:
    """Clustering on the table and z-order in its namespace are each valid, not together.
    Set at the same moment, one is refused (422): the table never ends up unreadable."""
    table_url, ns_url = f"{TABLES}/skew/t/policy", "/api/v1/namespaces/skew/policy"
    with api.client() as c:
        assert c.post(TABLES, json={"namespace": "skew", "name": "t"}).status_code == 201
    table_policy = {"clustering": {"enabled": True, "columns": ["region"]}}
    ns_policy = {"zorder": {"enabled": True, "columns": ["id", "region"]}}
    for rnd in range(15):
        with api.client() as c:
            assert c.put(table_url, json={}).status_code == 200
            assert c.put(ns_url, json={}).status_code == 200
        rs = concurrently(
            api,
            2,
            lambda c, i: (
                c.put(table_url, json=table_policy) if i == 0 else c.put(ns_url, json=ns_policy)
            ),
        )
        _no_server_errors(api, rs, {200, 409, 422})
        assert sorted(r.status_code for r in rs) != [200, 200], f"round {rnd}: both accepted"
        with api.client() as c:
            got = c.get(f"{TABLES}/skew/t")
        assert got.status_code == 200, f"round {rnd}: {got.text}"


# --- the transaction boundary and the safety net, in process ---


@pytest.fixture
def app_client(app: FastAPI, client: TestClient) -> TestClient:
    """The shared client, its app given routes that fail in the ways under test."""

    @app.post("/test/commit-fails", status_code=201)
    def commit_fails(session: SessionDep) -> dict[str, str]:
        # Not flushed here: the foreign key fails only when the transaction commits.
        session.add(PolicyVersion(table_id=987654321, version=1, policy={}))
        return {"status": "created"}

    @app.get("/test/integrity")
    def integrity() -> None:
        raise IntegrityError(
            "INSERT INTO secret_table VALUES (1)", {}, Exception("duplicate key secret_table")
        )

    @app.get("/test/serialization")
    def serialization() -> None:
        raise OperationalError(
            "UPDATE secret_table", {}, psycopg.errors.SerializationFailure("could not serialize")
        )

    @app.get("/test/deadlock")
    def deadlock() -> None:
        raise OperationalError("UPDATE secret_table", {}, psycopg.errors.DeadlockDetected("x"))

    @app.get("/test/other-db-error")
    def other() -> None:
        raise OperationalError("SELECT secret_table", {}, psycopg.OperationalError("down"))

    return client


def test_a_commit_that_fails_is_not_a_success(app_client: TestClient, rt: Runtime) -> None:
    r = app_client.post("/test/commit-fails")
    assert r.status_code == 409, r.text
    assert "secret" not in r.text and "policy_versions" not in r.text
    with rt.engine.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM policy_versions")) == 0


@pytest.mark.parametrize("path", ["/test/integrity", "/test/serialization", "/test/deadlock"])
def test_conflicts_escaping_a_route_are_409_without_sql(app_client: TestClient, path: str) -> None:
    r = app_client.get(path)
    assert r.status_code == 409, r.text
    body = r.json()
    assert "concurrent" in body["detail"]
    assert "secret" not in r.text and "Traceback" not in r.text


def test_other_database_errors_stay_500_with_an_error_id(app_client: TestClient) -> None:
    r = app_client.get("/test/other-db-error")
    assert r.status_code == 500
    assert "error_id" in r.json() and "secret" not in r.text
