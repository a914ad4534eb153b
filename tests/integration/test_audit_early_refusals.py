"""Changes refused before any route ran are audited, as their real caller: a body too
large and a control character (refused by RequestLimits, before routing), malformed JSON,
no such path (404), a method the path does not have (405). An invalid credential is
recorded as anonymous."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from helpers import bearer, issue_token
from sqlalchemy import text

from lakewarden.runtime import Runtime
from services.api.limits import MAX_BODY_BYTES


def test_early_refusals_are_audited_with_their_real_actor(rt: Runtime, client: TestClient) -> None:
    who = bearer(issue_token(rt, name="early"))
    json_type = {**who, "content-type": "application/json"}
    sent: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/api/v1/tokens", {"content": b"x" * (MAX_BODY_BYTES + 1), "headers": who}),
        ("PUT", "/api/v1/tables/sales/or%01ders/policy", {"json": {}, "headers": who}),
        ("POST", "/api/v1/tokens", {"content": b'{"name": ', "headers": json_type}),
        ("POST", "/api/v1/no-such-thing", {"json": {}, "headers": who}),
        ("DELETE", "/api/v1/scheduler/leader", {"headers": who}),
        ("POST", "/api/v1/no-such-thing", {"json": {}, "headers": bearer("lw_not-a-token")}),
    ]
    statuses = [client.request(method, path, **kw).status_code for method, path, kw in sent]
    assert statuses == [413, 422, 422, 404, 405, 404]

    with rt.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT actor, method, status, detail FROM audit_log ORDER BY id")
        ).all()
    assert [(r.actor, r.method, r.status) for r in rows] == [
        ("token:early", "POST", 413),
        ("token:early", "PUT", 422),
        ("token:early", "POST", 422),
        ("token:early", "POST", 404),
        ("token:early", "DELETE", 405),
        ("anonymous", "POST", 404),
    ]
    assert "too large" in rows[0].detail and "control character" in rows[1].detail
