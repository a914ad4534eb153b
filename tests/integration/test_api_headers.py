"""Security headers on every answer (JSON, errors, the dashboard), redirects that never
name the Host the client sent, X-Forwarded-* believed only from configured proxies (what
the audit records as the client), and the dashboard cookie's Secure flag (issue 23)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from fastapi.testclient import TestClient
from helpers import admin_headers, issue_token
from sqlalchemy import text

from lakewarden.runtime import Runtime
from services.api.app import create_app
from services.api.headers import DASHBOARD_CSP, JSON_CSP

HOST = "http://testserver"  # TestClient's origin


def _assert_hardened(r: httpx.Response, csp: str) -> None:
    assert r.headers["content-security-policy"] == csp, r.headers
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["referrer-policy"] == "same-origin"


def test_every_json_answer_is_hardened(client: TestClient) -> None:
    answers = [
        client.get("/api/v1/tables"),
        client.get("/healthz"),
        client.get("/api/v1/tables/nope/nope"),  # 404
        client.get("/api/v1/tasks/x"),  # 422
        client.get("/api/v1/tables", headers={"Authorization": "Bearer lw_nope"}),  # 401
        client.post("/api/v1/tables", content=b"x" * (2 * 1024 * 1024)),  # 413, before routing
        client.get("/openapi.json"),
    ]
    for r in answers:
        _assert_hardened(r, JSON_CSP)
    assert "frame-ancestors 'none'" in client.get("/docs").headers["content-security-policy"]


def test_the_dashboard_has_its_own_policy(client: TestClient) -> None:
    for path in ("/ui/login", "/ui/", "/ui/static/ui.css", "/ui/nope"):
        _assert_hardened(client.get(path, follow_redirects=False), DASHBOARD_CSP)
    # Its own scripts and styles only: nothing inline, nothing from elsewhere, no framing.
    assert "'unsafe-inline'" not in DASHBOARD_CSP and "frame-ancestors 'none'" in DASHBOARD_CSP


@pytest.mark.parametrize(
    "path, location",
    [
        ("/api/v1/catalogs/lake/tables/", "/api/v1/catalogs/lake/tables"),
        ("/api/v1/tables/", "/api/v1/catalogs/lake/tables"),  # through the alias
        ("/ui/", "/ui/login?next=/ui/"),
    ],
)
def test_a_redirect_never_names_the_host_sent(client: TestClient, path: str, location: str) -> None:
    client.headers.pop("Authorization")
    r = client.get(path, headers={"Host": "evil.example"}, follow_redirects=False)
    assert r.status_code in (303, 307), r.text
    assert r.headers["location"] == location


# --- forwarded headers -------------------------------------------------------------------


@contextmanager
def _client(rt: Runtime, bind_host: str | None = None, **settings: object) -> Iterator[TestClient]:
    runtime = dataclasses.replace(rt, settings=rt.settings.model_copy(update=settings))
    app = create_app(runtime, background=False)
    if bind_host is not None:
        app.state.bind_host = bind_host
    with TestClient(app, headers=admin_headers(rt)) as c:
        yield c


def _last_source(rt: Runtime) -> str:
    with rt.engine.connect() as conn:
        return str(conn.scalar(text("SELECT source FROM audit_log ORDER BY id DESC LIMIT 1")))


FORWARDED = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}


@pytest.mark.parametrize(
    "proxies, source",
    [
        ("", "testclient"),  # default: no proxy is trusted
        ("10.0.0.1, 10.1.0.0/16", "testclient"),  # the caller is not one of them
        ("10.0.0.1,testclient", "203.0.113.9"),  # it is (TestClient's address)
    ],
)
def test_forwarded_headers_only_from_trusted_proxies(
    rt: Runtime, proxies: str, source: str
) -> None:
    with _client(rt, trusted_proxies=proxies) as c:
        r = c.post("/api/v1/tables", json={"namespace": "none", "name": "such"}, headers=FORWARDED)
        assert r.status_code == 404, r.text
        assert _last_source(rt) == source
        # A redirect names no host either way; the scheme only from a trusted proxy.
        r = c.get("/api/v1/tables/", headers=FORWARDED, follow_redirects=False)
        assert r.headers["location"] == "/api/v1/catalogs/lake/tables"


# --- the dashboard cookie ------------------------------------------------------------------


def _login_cookie(c: TestClient, rt: Runtime, headers: dict[str, str] | None = None) -> str:
    c.headers.pop("Authorization")
    r = c.post(
        "/ui/login",
        data={"token": issue_token(rt, "viewer")},
        headers={"Origin": HOST, **(headers or {})},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    return r.headers["set-cookie"]


@pytest.mark.parametrize(
    "bind_host, settings, headers, secure",
    [
        (None, {}, {}, False),  # tests and serve_in_thread: loopback
        ("127.0.0.1", {}, {}, False),
        ("::1", {}, {}, False),
        ("0.0.0.0", {}, {}, True),  # reachable from elsewhere: Secure by default
        ("10.2.3.4", {}, {}, True),
        ("0.0.0.0", {"cookie_secure": False}, {}, False),  # said so
        ("127.0.0.1", {"cookie_secure": True}, {}, True),
        ("127.0.0.1", {}, {"X-Forwarded-Proto": "https"}, False),  # not from a trusted proxy
        ("127.0.0.1", {"trusted_proxies": "testclient"}, {"X-Forwarded-Proto": "https"}, True),
    ],
)
def test_the_cookie_is_secure_unless_bound_to_loopback(
    rt: Runtime,
    bind_host: str | None,
    settings: dict[str, object],
    headers: dict[str, str],
    secure: bool,
) -> None:
    with _client(rt, bind_host, **settings) as c:
        cookie = _login_cookie(c, rt, headers)
    assert ("; secure" in cookie.lower()) is secure, cookie
