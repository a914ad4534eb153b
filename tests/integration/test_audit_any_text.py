"""The audit trail records every refusal whatever its text holds: a NUL (which Postgres
text and jsonb refuse: the insert failed, and the refusal had no row), other control
characters, a lone surrogate, more than a column holds (issue 23)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest
from fastapi.testclient import TestClient
from helpers import serve_http
from sqlalchemy import select

from lakewarden import audit
from lakewarden.db.models import AuditEntry
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime


@pytest.fixture
def nul_catalog() -> Iterator[str]:
    """A REST catalog whose every answer is a 400 with a NUL in its message (pyiceberg
    quotes the message, so the 422 that refuses the catalog does too)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            error = {"message": "bad\x00request", "type": "BadRequestException", "code": 400}
            data = json.dumps({"error": error}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server, url = serve_http(Handler)
    yield url
    server.shutdown()


def test_a_refusal_whose_detail_holds_a_nul_is_audited(
    client: TestClient, rt: Runtime, nul_catalog: str
) -> None:
    body = {"name": "nul", "type": "rest", "properties": {"uri": nul_catalog}}
    r = client.post("/api/v1/catalogs", json=body)
    assert r.status_code == 422
    assert "bad\x00request" in r.json()["detail"]  # the catalog's own words, NUL and all
    with transaction(rt.engine) as s:
        row = s.scalars(select(AuditEntry).where(AuditEntry.target == "catalog nul")).one()
    assert row.status == 422 and row.outcome == "failed"
    assert row.detail and "bad\\x00request" in row.detail


def test_audit_rows_hold_any_text(rt: Runtime) -> None:
    """In a path, a target, a change (keys too) and a detail: NUL, ESC, DEL, a lone
    surrogate escaped; an actor past its VARCHAR(255) and a detail past MAX_TEXT cut."""
    odd = "a\x00b\x1b[31mc\ud800d\x7f"
    with transaction(rt.engine) as s:
        entry = audit.record(
            s,
            actor="token:" + "x" * 400,
            method="POST",
            path="/api/v1/x" + odd,
            action="test",
            target=odd,
            status=422,
            outcome="failed",
            change={"k" + odd: [odd, {"n": odd}]},
            detail=odd * 1000,
        )
        entry_id = entry.id
    with transaction(rt.engine) as s:
        # By id alone: the key is (id, at), the audit log partitioned by month.
        row = s.scalars(select(AuditEntry).where(AuditEntry.id == entry_id)).one()
        assert row.target == "a\\x00b\\x1b[31mc\\ud800d\\x7f"
        assert row.path == "/api/v1/x" + row.target
        assert row.change == {"k" + row.target: [row.target, {"n": row.target}]}
        assert row.detail and len(row.detail) == audit.MAX_TEXT and row.detail.endswith("…")
        assert len(row.actor) == 255 and row.actor.endswith("…")
