"""API tokens on the real API and Postgres: a maximum lifetime (no token lives forever, nor
longer than the token that minted it), the owner is the minter unless an admin of
everything names another, revoking a token revokes every token it minted, and the
dashboard's logout revokes the token its login minted for the session."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from conftest import make_test_runtime, serve
from fastapi.testclient import TestClient
from helpers import bearer, issue_token
from sqlalchemy import text

from lakewarden.runtime import Runtime
from services.api.access import TOKEN_COOKIE

SCOPED_ADMIN = "admin@lake/sales"


@pytest.fixture
def short(db_url: str, tmp_path: Path) -> Iterator[tuple[Runtime, TestClient]]:
    """The API with LAKEWARDEN_TOKEN_MAX_DAYS=30."""
    runtime = make_test_runtime(db_url, tmp_path, token_max_days=30)
    with serve(runtime) as client:
        yield runtime, client
    runtime.engine.dispose()


def _mint(client: TestClient, secret: str, **body: object) -> httpx.Response:
    return client.post(
        "/api/v1/tokens",
        json={"name": "made", "grants": ["viewer@lake/sales"], **body},
        headers=bearer(secret),
    )


def test_a_token_longer_than_the_maximum_or_never_expiring_is_refused(
    short: tuple[Runtime, TestClient],
) -> None:
    rt, client = short
    scoped = issue_token(rt, SCOPED_ADMIN)
    for days in (31, None):
        r = _mint(client, scoped, expires_in_days=days)
        assert r.status_code == 422, r.text
        assert "at most 30" in r.text or "maximum of 30 days" in r.text, r.text
        assert "LAKEWARDEN_TOKEN_MAX_DAYS" in r.text
    r = _mint(client, scoped, expires_in_days=30)
    assert r.status_code == 201, r.text
    # Left out: the default (90 days) cut to the maximum.
    r = _mint(client, scoped)
    assert r.status_code == 201, r.text
    expires = datetime.fromisoformat(r.json()["expires_at"])
    assert abs(expires - (datetime.now(UTC) + timedelta(days=30))) < timedelta(minutes=1)
    with rt.engine.connect() as conn:
        minted = "SELECT count(*) FROM api_tokens WHERE parent_id IS NOT NULL"
        assert conn.execute(text(minted + " AND expires_at IS NULL")).scalar_one() == 0
        assert conn.execute(text(minted)).scalar_one() == 2


def test_a_token_cannot_outlive_the_token_that_mints_it(rt: Runtime, client: TestClient) -> None:
    r = _mint(client, issue_token(rt), grants=["admin"], expires_in_days=2)
    parent = r.json()
    r = _mint(client, parent["secret"], expires_in_days=10)
    assert r.status_code == 422 and "cannot outlive" in r.text, r.text
    r = _mint(client, parent["secret"])  # the default is cut to the parent's expiry
    assert r.status_code == 201, r.text
    assert r.json()["expires_at"] == parent["expires_at"]


def test_a_scoped_admin_cannot_name_another_owner(rt: Runtime, client: TestClient) -> None:
    scoped = issue_token(rt, SCOPED_ADMIN, name="scoped")
    r = _mint(client, scoped, owner="alice")
    assert r.status_code == 403, r.text
    assert "owner 'alice'" in r.json()["detail"] and "leave owner out" in r.json()["detail"]
    r = _mint(client, scoped, owner="token:scoped")  # itself: allowed
    assert r.status_code == 201 and r.json()["owner"] == "token:scoped"
    r = _mint(client, scoped)
    assert r.status_code == 201 and r.json()["owner"] == "token:scoped"
    assert r.json()["created_by"] == "token:scoped" and r.json()["parent_id"] is not None
    r = _mint(client, issue_token(rt, name="root"), owner="alice")  # an admin of everything
    assert r.status_code == 201 and r.json()["owner"] == "alice"


def test_revoking_a_token_revokes_what_it_minted_recursively(
    rt: Runtime, client: TestClient
) -> None:
    root = issue_token(rt, name="root")
    parent = _mint(client, root, name="parent", grants=[SCOPED_ADMIN]).json()
    child = _mint(client, parent["secret"], name="child", grants=[SCOPED_ADMIN]).json()
    grandchild = _mint(client, child["secret"], name="grandchild").json()
    unrelated = _mint(client, root, name="unrelated").json()
    assert child["parent_id"] == parent["id"] and grandchild["parent_id"] == child["id"]
    for made in (child, grandchild, unrelated):
        assert client.get("/api/v1/tables", headers=bearer(made["secret"])).status_code == 200

    r = client.delete(f"/api/v1/tokens/{parent['id']}", headers=bearer(root))
    assert r.status_code == 200, r.text
    for made in (parent, child, grandchild):
        assert client.get("/api/v1/tables", headers=bearer(made["secret"])).status_code == 401
    assert client.get("/api/v1/tables", headers=bearer(unrelated["secret"])).status_code == 200
    audit = client.get(
        "/api/v1/audit", params={"action": "revokeToken"}, headers=bearer(root)
    ).json()["items"]
    assert audit[0]["change"] == {"token": {"revoked_with_it": [child["id"], grandchild["id"]]}}
    listed = client.get("/api/v1/tokens", params={"include_revoked": True}, headers=bearer(root))
    revoked_by = {t["name"]: t["revoked_by"] for t in listed.json()}
    assert revoked_by["child"] == revoked_by["grandchild"] == "token:root"
    assert revoked_by["unrelated"] is None


def _login(client: TestClient, secret: str) -> str:
    """The dashboard's login with `secret`: the token its cookie keeps."""
    r = client.post(
        "/ui/login",
        data={"token": secret},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    return str(client.cookies[TOKEN_COOKIE])


def test_logout_revokes_the_token_minted_for_the_session(rt: Runtime) -> None:
    pasted = issue_token(rt, "operator", name="oncall")
    with serve(rt) as client:
        client.headers.pop("Authorization")
        kept = _login(client, pasted)
        assert kept != pasted and kept.startswith("lw_")  # the pasted token stays out of it
        assert client.get("/api/v1/tables", headers=bearer(kept)).status_code == 200
        with rt.engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT s.name, s.for_session, s.parent_id = p.id, s.grants = p.grants, "
                    "s.expires_at < now() + interval '13 hours' FROM api_tokens s, api_tokens p "
                    "WHERE s.parent_id IS NOT NULL AND p.name = 'oncall' AND p.parent_id IS NULL"
                )
            ).one()
        assert tuple(row) == ("oncall", True, True, True, True)

        r = client.post("/ui/logout", headers={"Origin": "http://testserver"})
        assert r.status_code == 200 and TOKEN_COOKIE not in client.cookies
        assert client.get("/api/v1/tables", headers=bearer(kept)).status_code == 401
        assert client.get("/api/v1/tables", headers=bearer(pasted)).status_code == 200

        # Revoking the pasted token ends its sessions too.
        again = _login(client, pasted)
        with rt.engine.begin() as conn:
            parent_id = conn.execute(
                text("SELECT id FROM api_tokens WHERE name = 'oncall' AND parent_id IS NULL")
            ).scalar_one()
        admin = issue_token(rt, name="root")
        assert client.delete(f"/api/v1/tokens/{parent_id}", headers=bearer(admin)).is_success
        assert client.get("/api/v1/tables", headers=bearer(again)).status_code == 401

    with rt.engine.connect() as conn:
        actions = conn.execute(
            text("SELECT actor, action FROM audit_log WHERE action LIKE '%Session' ORDER BY id")
        ).all()
    assert [tuple(a) for a in actions] == [
        ("token:oncall", "startDashboardSession"),
        ("token:oncall", "endDashboardSession"),
        ("token:oncall", "startDashboardSession"),
    ]


def test_the_cli_refuses_a_token_beyond_the_maximum_and_revokes_what_a_token_minted(
    rt: Runtime, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lakewarden token create|revoke`, straight in the database: the same maximum, the
    same recursive revocation, said on the terminal."""
    from typer.testing import CliRunner

    from cli.main import app
    from lakewarden.settings import get_settings

    monkeypatch.setenv("LAKEWARDEN_DATABASE_URL", rt.db_url)
    monkeypatch.setenv("LAKEWARDEN_TOKEN_MAX_DAYS", "30")
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        long = runner.invoke(
            app, ["token", "create", "--admin", "--name", "x", "--expires-days", "31"]
        )
        assert long.exit_code == 2 and "beyond the maximum of 30 days" in long.output
        made = runner.invoke(app, ["token", "create", "--admin", "--name", "cli-made"])
        assert made.exit_code == 0, made.output
        secret = made.stdout.strip().splitlines()[-1]
        child = _mint(client, secret, name="child").json()
        with rt.engine.connect() as conn:
            parent_id = conn.execute(
                text("SELECT id FROM api_tokens WHERE name = 'cli-made'")
            ).scalar_one()
        revoked = runner.invoke(app, ["token", "revoke", str(parent_id)])
        assert revoked.exit_code == 0, revoked.output
        assert f"and the tokens it minted: {child['id']}" in revoked.output
        assert client.get("/api/v1/tables", headers=bearer(child["secret"])).status_code == 401
    finally:
        get_settings.cache_clear()
