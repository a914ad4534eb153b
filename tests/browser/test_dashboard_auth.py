"""The dashboard's login and its guards, without a browser (TestClient on the real app and
Postgres): the cookie authenticates like the bearer header; a change sent with the cookie
must come from the dashboard's own origin; the cookie is HttpOnly and SameSite=Strict."""

from __future__ import annotations

import threading
from typing import Any

from conftest import serve
from helpers import append_batches, bearer, issue_token, make_table
from sqlalchemy import text

from lakewarden.runtime import Runtime
from services.api.access import TOKEN_COOKIE

HOST = "http://testserver"  # TestClient's origin


def test_login_keeps_the_token_in_a_strict_http_only_cookie(rt: Runtime) -> None:
    token = issue_token(rt, "viewer")
    with serve(rt) as c:
        c.headers.pop("Authorization")
        assert c.get("/ui/", follow_redirects=False).headers["location"] == "/ui/login?next=/ui/"
        r = c.post(
            "/ui/login",
            data={"token": "lw_wrong"},
            headers={"Origin": HOST},
            follow_redirects=False,
        )
        assert r.status_code == 401 and "unknown, expired or revoked" in r.text
        r = c.post(
            "/ui/login",
            data={"token": token, "next": "https://evil.example/"},
            headers={"Origin": HOST},
            follow_redirects=False,
        )
        assert r.status_code == 303 and r.headers["location"] == "/ui/"  # never off-site
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        assert c.get("/ui/").status_code == 200
        assert c.get("/api/v1/tables").status_code == 200  # the same authentication path
        r = c.post("/ui/logout", headers={"Origin": HOST}, follow_redirects=False)
        assert r.status_code == 303 and TOKEN_COOKIE in r.headers["set-cookie"]
        assert c.get("/ui/", follow_redirects=False).status_code == 303


def test_a_change_with_the_cookie_must_come_from_the_dashboard(rt: Runtime) -> None:
    append_batches(make_table(rt, "sales", "orders"), 1)
    token = issue_token(rt, "operator")
    with serve(rt) as c:
        assert c.post("/api/v1/tables", json={"namespace": "sales", "name": "orders"}).is_success
        c.headers.pop("Authorization")
        c.cookies.set(TOKEN_COOKIE, token)
        trigger = "/api/v1/tables/sales/orders/tasks"
        for headers in ({}, {"Origin": "https://evil.example"}, {"Referer": "http://x/ui/"}):
            r = c.post(trigger, json={"kind": "compaction"}, headers=headers)
            assert r.status_code == 403 and "own pages" in r.json()["detail"], (headers, r.text)
            r = c.post(
                "/ui/t/lake/sales/orders/trigger", data={"kind": "compaction"}, headers=headers
            )
            assert r.status_code == 403, (headers, r.text)
        assert _tasks(rt) == 0
        r = c.post(
            "/ui/t/lake/sales/orders/trigger",
            data={"kind": "compaction"},
            headers={"Origin": HOST},
            follow_redirects=False,
        )
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/tasks/")
        assert _tasks(rt) == 1
        # the API's own request did it, as the cookie's caller, with its audit row
        with rt.engine.connect() as conn:
            actors = conn.execute(
                text("SELECT actor, action FROM audit_log WHERE outcome = 'ok' ORDER BY id")
            ).all()
        assert actors[-1] == ("token:test", "triggerTask")


def test_a_page_may_be_the_first_use_of_a_token(rt: Runtime) -> None:
    """A page authenticates in a transaction of its own: held open while the page calls the
    API, it would hold the token's row, which the API's authentication updates (last used)."""
    token = issue_token(rt, "viewer")
    got: dict[str, Any] = {}
    with serve(rt) as c:
        thread = threading.Thread(
            target=lambda: got.update(r=c.get("/ui/", headers=bearer(token))), daemon=True
        )
        thread.start()
        thread.join(30)
        assert "r" in got, "the page waited for its own API call"
        assert got["r"].status_code == 200


def _tasks(rt: Runtime) -> int:
    with rt.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM tasks")).scalar_one())
