"""What the API told callers it should not (issue 23): /readyz the database driver's error
(host and port) to anyone; a 403 the namespace of a task, alert or rule id the caller may
not see (an id oracle: now the 404 of an id that does not exist); the catalog list every
catalog and its warehouse to a namespace-scoped viewer; an unknown catalog's 404 to a
caller without a credential."""

from __future__ import annotations

import dataclasses
import logging
import re

import pytest
from fastapi.testclient import TestClient
from helpers import bearer, issue_token, make_table
from sqlalchemy import create_engine

from lakewarden.alerts.store import fire
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from services.api.app import create_app


def test_readiness_keeps_the_driver_error_in_the_log(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    unreachable = "postgresql+psycopg://lw:pw@db-internal.example:6543/lakewarden"
    engine = create_engine(unreachable, connect_args={"connect_timeout": 2})
    down = dataclasses.replace(rt, engine=engine)
    with TestClient(create_app(down, background=False)) as c, caplog.at_level(logging.WARNING):
        r = c.get("/readyz")
    assert r.status_code == 503, r.text
    reason = r.json()["reason"]
    assert "db-internal" not in r.text and "6543" not in r.text and "lw" not in r.text
    error_id = re.search(r"under ([0-9a-f]{12})", reason)
    assert error_id and "database does not answer" in reason
    logged = [m for m in caplog.messages if error_id.group(1) in m]
    assert logged and "db-internal.example" in logged[0]


@pytest.fixture
def seeded(client: TestClient, rt: Runtime) -> dict[str, int]:
    """A task, an alert and a rule of namespace `secret`, made by the admin."""
    make_table(rt, "secret", "t1", partitioned=False)
    assert client.post("/api/v1/tables", json={"namespace": "secret", "name": "t1"}).is_success
    task = client.post("/api/v1/tables/secret/t1/tasks", json={"kind": "compaction"})
    assert task.status_code == 201, task.text
    with transaction(rt.engine) as session:
        fire(
            session,
            "task_failed",
            "secret.t1:compaction",
            severity="critical",
            summary="failed",
            details={"table": "secret.t1"},
            runbook="-",
        )
    alert = client.get("/api/v1/alerts").json()["items"][0]["id"]
    rule = client.post("/api/v1/catalogs/lake/rules", json={"namespace": "secret"})
    assert rule.status_code == 201, rule.text
    return {"task": task.json()["id"], "alert": alert, "rule": rule.json()["id"]}


def _calls(ids: dict[str, int], offset: int) -> list[tuple[str, str, dict[str, object] | None]]:
    task, alert, rule = ids["task"] + offset, ids["alert"] + offset, ids["rule"] + offset
    return [
        ("GET", f"/api/v1/tasks/{task}", None),
        ("POST", f"/api/v1/tasks/{task}/cancel", None),
        ("POST", f"/api/v1/tasks/{task}/retry", None),
        ("POST", f"/api/v1/alerts/{alert}/ack", {"by": "me"}),
        ("GET", f"/api/v1/catalogs/lake/rules/{rule}", None),
        ("PATCH", f"/api/v1/catalogs/lake/rules/{rule}", {"enabled": False}),
        ("DELETE", f"/api/v1/catalogs/lake/rules/{rule}", None),
    ]


@pytest.mark.parametrize("grant", ["viewer@lake/public", "admin@lake/public", "operator@other"])
def test_an_id_out_of_scope_answers_as_one_that_does_not_exist(
    client: TestClient, rt: Runtime, seeded: dict[str, int], grant: str
) -> None:
    headers = bearer(issue_token(rt, grant))
    hidden = _calls(seeded, 0)
    absent = _calls(seeded, 1000)
    for (method, path, body), (_, missing_path, _) in zip(hidden, absent, strict=True):
        r = client.request(method, path, json=body, headers=headers)
        m = client.request(method, missing_path, json=body, headers=headers)
        assert r.status_code == m.status_code == 404, (path, r.text, m.text)
        assert "secret" not in r.text, r.text
        # The same answer, but for the id it names.
        said = re.sub(rf"\b{_id(path)}\b", "ID", r.json()["detail"])
        assert said == re.sub(rf"\b{_id(missing_path)}\b", "ID", m.json()["detail"])


def _id(path: str) -> int:
    return int(next(p for p in path.split("/") if p.isdigit()))


def test_a_viewer_of_the_namespace_still_gets_403_for_a_change(
    client: TestClient, rt: Runtime, seeded: dict[str, int]
) -> None:
    """It may see the task: being told which role it lacks leaks nothing."""
    headers = bearer(issue_token(rt, "viewer@lake/secret"))
    assert client.get(f"/api/v1/tasks/{seeded['task']}", headers=headers).status_code == 200
    r = client.post(f"/api/v1/tasks/{seeded['task']}/cancel", headers=headers)
    assert r.status_code == 403 and "operator role on lake/secret" in r.json()["detail"]


# --- the catalog list ----------------------------------------------------------------------


def test_a_scoped_viewer_sees_only_its_catalogs_and_no_warehouse(
    client: TestClient, rt: Runtime
) -> None:
    warehouse = rt.settings.warehouse_uri
    everything = client.get("/api/v1/catalogs").json()
    assert [c["name"] for c in everything] == ["lake"]
    assert warehouse in str(everything[0]["properties"])  # the admin sees it

    scoped = client.get("/api/v1/catalogs", headers=bearer(issue_token(rt, "viewer@lake/sales")))
    assert scoped.status_code == 200, scoped.text
    assert [c["name"] for c in scoped.json()] == ["lake"]
    assert scoped.json()[0]["properties"] == {} and warehouse not in scoped.text

    whole = client.get("/api/v1/catalogs", headers=bearer(issue_token(rt, "viewer@lake")))
    assert whole.json() == everything

    other = client.get("/api/v1/catalogs", headers=bearer(issue_token(rt, "viewer@other")))
    assert other.status_code == 200 and other.json() == []


def test_one_catalog_shows_a_scoped_viewer_what_the_list_does(
    client: TestClient, rt: Runtime
) -> None:
    """GET /catalogs/{name} answers as the list: no properties without the whole catalog,
    and a catalog outside the grants is a 404 like one that does not exist."""
    warehouse = rt.settings.warehouse_uri
    scoped = client.get(
        "/api/v1/catalogs/lake", headers=bearer(issue_token(rt, "viewer@lake/sales"))
    )
    assert scoped.status_code == 200, scoped.text
    assert scoped.json()["properties"] == {} and warehouse not in scoped.text
    whole = client.get("/api/v1/catalogs/lake", headers=bearer(issue_token(rt, "viewer@lake")))
    assert warehouse in str(whole.json()["properties"])
    outside = bearer(issue_token(rt, "viewer@other"))
    hidden, missing = (
        client.get(f"/api/v1/catalogs/{n}", headers=outside) for n in ("lake", "nosuch")
    )
    assert (hidden.status_code, missing.status_code) == (404, 404)
    assert hidden.json()["detail"].replace("lake", "X") == missing.json()["detail"].replace(
        "nosuch", "X"
    )


# --- authentication before the catalog -----------------------------------------------------


@pytest.mark.parametrize(
    "method, path",
    [
        ("POST", "/api/v1/catalogs/nosuch/tables"),
        ("GET", "/api/v1/catalogs/nosuch/tables/ns/t"),
        ("GET", "/api/v1/catalogs/nosuch/namespaces/ns/policy"),
        ("POST", "/api/v1/catalogs/nosuch/rules"),
        ("GET", "/api/v1/catalogs/lake/tables/ns/t"),  # one that exists: the same answer
    ],
)
def test_no_credential_learns_which_catalogs_exist(
    client: TestClient, rt: Runtime, method: str, path: str
) -> None:
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer lw_nope"}):
        r = client.request(method, path, json={}, headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert "nosuch" not in r.text
    r = client.request(method, path, json={})
    assert r.status_code in (404, 422), r.text  # with a credential: what is wrong
