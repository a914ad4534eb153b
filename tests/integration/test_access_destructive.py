"""Turning on a kind that can delete data, as every role on every scope, on the real API:
the destructive-change rule judges the effect, so a section an admin switched off cannot be
switched back on by an operator with settings more aggressive than the built-in defaults
(issue 23's hole: disabled -> enabled at the floor once counted as no change)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import append_batches, bearer, issue_token, make_table
from test_access import NS, OTHER, ROLES, SCOPES

from lakewarden.runtime import Runtime
from services.api.app import create_app

TABLE = f"/api/v1/tables/{NS}/orders/policy"
DEFAULTS = f"/api/v1/namespaces/{NS}/policy"
READY = {"enabled": True, "partition": "region"}

# kind -> (the state an admin left it in, the operator's change that turns it on aggressively)
ENABLE_AGGRESSIVELY: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "clean": (
        {"clean": {"enabled": False}},
        {
            "clean": {
                "enabled": True,
                "remove_orphans": False,
                "max_snapshot_age_hours": 1,
                "keep_last_snapshots": 1,
            }
        },
    ),
    "clean orphans": (
        {"clean": {"enabled": False}},
        {"clean": {"enabled": True, "orphan_min_age_hours": 24}},
    ),
    "ttl": (
        {"ttl": {"enabled": False}},
        {"ttl": {"enabled": True, "column": "id", "retention_days": 3650}},
    ),
    "tags": ({"tags": {"enabled": False}}, {"tags": {"enabled": True, "retention_days": 1}}),
    "readiness tags": (
        {"readiness": READY},
        {"readiness": {**READY, "tag": True, "tag_retention_days": 1}},
    ),
}
# Turning a kind back on at its built-in defaults (or gentler) deletes no more than a table
# that never touched its policy: an operator may.
ENABLE_GENTLY: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "clean": ({"clean": {"enabled": False}}, {"clean": {"enabled": True}}),
    "clean, longer": (
        {"clean": {"enabled": False}},
        {"clean": {"enabled": True, "max_snapshot_age_hours": 240, "keep_last_snapshots": 9}},
    ),
    "tags": ({"tags": {"enabled": False}}, {"tags": {"enabled": True}}),
    "readiness tags": ({"readiness": READY}, {"readiness": {**READY, "tag": True}}),
}


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    for ns, name in ((NS, "orders"), (OTHER, "staff")):
        append_batches(make_table(rt, ns, name), 1)
    with TestClient(create_app(rt, background=False), raise_server_exceptions=False) as c:
        setup = bearer(issue_token(rt, "admin", name="setup"))
        for ns, name in ((NS, "orders"), (OTHER, "staff")):
            r = c.post("/api/v1/tables", json={"namespace": ns, "name": name}, headers=setup)
            assert r.status_code == 201, r.text
        yield c


def _tokens(rt: Runtime) -> dict[tuple[str, str], dict[str, str]]:
    return {
        (role, scope): bearer(issue_token(rt, role + suffix, name=f"{role}-{scope}"))
        for role in ROLES
        for scope, (suffix, _, _) in SCOPES.items()
    }


@pytest.mark.parametrize("kind", sorted(ENABLE_AGGRESSIVELY))
@pytest.mark.parametrize("where", ["table", "namespace defaults"])
def test_enabling_a_disabled_destructive_kind_needs_admin_on_the_scope(
    rt: Runtime, client: TestClient, kind: str, where: str
) -> None:
    off, on = ENABLE_AGGRESSIVELY[kind]
    admin = bearer(issue_token(rt, "admin", name="owner"))
    url = TABLE if where == "table" else DEFAULTS
    wrong = []
    for (role, scope), headers in _tokens(rt).items():
        assert client.put(url, json=off, headers=admin).status_code == 200
        r = client.put(url, json=on, headers=headers)
        _, covers, _ = SCOPES[scope]
        allowed = role == "admin" and covers
        if allowed and r.status_code != 200:
            wrong.append(f"{role} on {scope}: {r.status_code} {r.text}")
        if not allowed:
            detail = r.json().get("detail", "") if r.status_code == 403 else ""
            if r.status_code != 403:
                wrong.append(f"{role} on {scope}: {r.status_code}, not 403: {r.text}")
            elif role == "operator" and covers and "can delete data" not in detail:
                wrong.append(f"{role} on {scope}: a 403 that does not say why: {detail}")
    assert not wrong, "\n".join(wrong)
    # The policy the table ends with is the admin's last, not an operator's.
    assert client.put(url, json=off, headers=admin).status_code == 200


def test_the_refusal_names_each_setting_against_its_default(
    rt: Runtime, client: TestClient
) -> None:
    """The issue's request, word for word: clean disabled by an admin, then an operator's
    PUT of clean at the floor. Refused, and it says what to fix; the trigger that followed
    it finds clean still disabled."""
    admin = bearer(issue_token(rt, "admin", name="owner"))
    operator = bearer(issue_token(rt, f"operator@lake/{NS}", name="op"))
    off, on = ENABLE_AGGRESSIVELY["clean"]
    assert client.put(TABLE, json=off, headers=admin).status_code == 200
    r = client.put(TABLE, json=on, headers=operator)
    assert r.status_code == 403, r.text
    detail = r.json()["detail"]
    assert "enables clean with max_snapshot_age_hours 1 (below the built-in default 120)" in detail
    assert "keep_last_snapshots 1 (below the built-in default 5)" in detail
    r = client.post(f"/api/v1/tables/{NS}/orders/tasks", json={"kind": "clean"}, headers=operator)
    assert r.status_code == 409 and "disabled" in r.json()["detail"], r.text
    current = client.get(f"/api/v1/tables/{NS}/orders", headers=admin).json()
    assert current["policy"]["clean"]["enabled"] is False


@pytest.mark.parametrize("kind", sorted(ENABLE_GENTLY))
def test_an_operator_may_turn_a_kind_back_on_at_its_defaults(
    rt: Runtime, client: TestClient, kind: str
) -> None:
    off, on = ENABLE_GENTLY[kind]
    admin = bearer(issue_token(rt, "admin", name="owner"))
    operator = bearer(issue_token(rt, f"operator@lake/{NS}", name="op"))
    for url in (TABLE, DEFAULTS):
        assert client.put(url, json=off, headers=admin).status_code == 200
        r = client.put(url, json=on, headers=operator)
        assert r.status_code == 200, r.text
