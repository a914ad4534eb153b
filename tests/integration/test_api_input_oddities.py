"""Input that looked harmless and was accepted: Unicode line and format controls in free
text, absurdly small positive numbers, ids that are not integers, and bodies whose errors
were unbounded. Each gets a 4xx that says what to fix (issue 23)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from helpers import make_table

from lakewarden.runtime import Runtime


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


# NEL, the line and paragraph separators, a C1 control, and bidi override / isolate / mark.
UNICODE_CONTROLS = ["\u0085", "\u2028", "\u2029", "\u009b", "\u202e", "\u2067", "\u200f"]


@pytest.mark.parametrize("char", UNICODE_CONTROLS)
@pytest.mark.parametrize("field", ["reason", "holder"])
def test_unicode_line_and_bidi_controls_are_422(client: TestClient, char: str, field: str) -> None:
    body = {"holder": "job", "reason": "backfill", "ttl_s": 60}
    body[field] = f"part{char}2"
    r = client.post("/api/v1/tables/sec/t1/blockers", json=body)
    assert r.status_code == 422, r.text
    assert f"control character U+{ord(char):04X}" in _problems(r)
    assert client.get("/api/v1/tables/sec/t1/blockers").json() == []


@pytest.mark.parametrize("char", ["\u0085", "\u2028", "\u202e"])
def test_unicode_controls_in_the_query_are_422(client: TestClient, char: str) -> None:
    r = client.get("/api/v1/tasks", params={"kind": f"ttl{char}"})
    assert r.status_code == 422, r.text
    assert f"control character U+{ord(char):04X}" in r.json()["detail"]


def test_free_text_keeps_other_unicode(client: TestClient) -> None:
    reason = "Wartung \u00fcber Nacht \u2014 \U0001f9f9 \u05e9\u05dc\u05d5\u05dd\n\tzweiter Teil"
    r = client.post(
        "/api/v1/tables/sec/t1/blockers", json={"holder": "job", "reason": reason, "ttl_s": 60}
    )
    assert r.status_code == 201, r.text
    assert client.get("/api/v1/tables/sec/t1/blockers").json()[0]["reason"] == reason
