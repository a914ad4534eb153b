"""Input that looked harmless and was accepted: Unicode line and format controls in free
text, absurdly small positive numbers, ids that are not integers, and bodies whose errors
were unbounded. Each gets a 4xx that says what to fix (issue 23)."""

from __future__ import annotations

import httpx
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


def _problems(r: httpx.Response) -> str:
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


# --- numbers too small to mean anything ----------------------------------------------------


@pytest.mark.parametrize("ttl_s", [1e-320, 1e-300, 0.5])
def test_a_blocker_lives_at_least_a_second(client: TestClient, ttl_s: float) -> None:
    r = client.post("/api/v1/tables/sec/t1/blockers", json={"holder": "job", "ttl_s": ttl_s})
    assert r.status_code == 422, r.text
    assert "ttl_s: " in _problems(r)
    assert ("greater than or equal to 1" if ttl_s > 1e-9 else "too small") in _problems(r)


@pytest.mark.parametrize("days", [1e-300, 1e-320, 0.01])
def test_a_token_lives_at_least_an_hour(client: TestClient, days: float) -> None:
    r = client.post(
        "/api/v1/tokens", json={"name": "short", "grants": ["viewer"], "expires_in_days": days}
    )
    assert r.status_code == 422, r.text
    assert "expires_in_days: " in _problems(r)


# --- ids in the path are integers ----------------------------------------------------------


@pytest.mark.parametrize("raw", ["1.0", "1e0", "+1", "01.", " 1", "\u0661"])
def test_a_task_id_must_be_digits(client: TestClient, raw: str) -> None:
    created = client.post("/api/v1/tables/sec/t1/tasks", json={"kind": "compaction"})
    assert created.status_code == 201, created.text
    assert client.get(f"/api/v1/tasks/{created.json()['id']}").status_code == 200
    r = client.get(f"/api/v1/tasks/{raw}")
    assert r.status_code == 422, r.text
    assert "path.task_id: " in _problems(r) and "whole number" in _problems(r)


# --- a bounded 422 -------------------------------------------------------------------------


def test_ten_thousand_unknown_keys_get_a_short_422(client: TestClient) -> None:
    body: dict[str, object] = {"holder": "job", "ttl_s": 60}
    body.update({f"unknown_key_{i}": i for i in range(10_000)})
    body["k" * 100_000] = 1
    r = client.post("/api/v1/tables/sec/t1/blockers", json=body)
    assert r.status_code == 422, r.text
    assert len(r.content) < 8_000, len(r.content)
    out = r.json()
    assert out["detail"] == "invalid request: 10001 problems, the first 20 listed"
    assert len(out["errors"]) == 20
    assert out["errors"][0] == {
        "field": "unknown_key_0",
        "problem": "Extra inputs are not permitted",
    }


@pytest.mark.parametrize(
    "policy, field",
    [
        ({"compaction": {"timeout_minutes": 1e-320}}, "compaction"),
        ({"compaction": {"small_file_ratio": 5e-324}}, "compaction"),
        ({"slo": {"window_minutes": 1e-300}}, "slo"),
    ],
)
def test_denormal_policy_numbers_are_422(
    client: TestClient, policy: dict[str, object], field: str
) -> None:
    r = client.put("/api/v1/tables/sec/t1/policy", json=policy)
    assert r.status_code == 422, r.text
    assert field in _problems(r) and "too small to mean anything" in _problems(r)
    assert client.get("/api/v1/tables/sec/t1").json()["policy_version"] == 1
