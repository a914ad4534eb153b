"""Security headers on every response, and redirects that never name a host.

- The dashboard (/ui) gets a Content-Security-Policy that lets its own files run (the
  vendored htmx, ui.css, inline SVG, htmx's requests to this server) and nothing else;
  JSON gets `default-src 'none'` (it renders nothing); the interactive API docs, which
  load Swagger's assets from a CDN, get `frame-ancestors 'none'` only. All: no framing
  (`X-Frame-Options: DENY` too, for old browsers), `nosniff`, and a Referer sent to this
  server only (`same-origin`: `access.same_origin` falls back to it when a browser sends
  no Origin).
- A redirect's `Location` is made relative when it names the request's own host: Starlette
  builds absolute URLs from the `Host` header (the trailing-slash 307, `url_for`), so a
  forged Host made the server redirect elsewhere.

Forwarded headers (`X-Forwarded-For`/`-Proto`) are trusted only from the proxies in
`LAKEWARDEN_TRUSTED_PROXIES` (`trusted_proxies`, below); `X-Forwarded-Host` never is.
"""

from __future__ import annotations

import ipaddress
from typing import Any, cast
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

DASHBOARD_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
JSON_CSP = "default-src 'none'; frame-ancestors 'none'"
DOCS_CSP = "frame-ancestors 'none'"
DOCS_PATHS = ("/docs", "/redoc")

COMMON = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}


def csp_for(path: str) -> str:
    if path == "/ui" or path.startswith("/ui/"):
        return DASHBOARD_CSP
    if path.startswith(DOCS_PATHS):
        return DOCS_CSP
    return JSON_CSP


class SecurityHeaders:
    """ASGI middleware: the headers above on every HTTP response, and relative redirects."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        csp = csp_for(scope.get("path", ""))
        host = _host(scope)

        async def add_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in COMMON.items():
                    headers.setdefault(name, value)
                headers.setdefault("content-security-policy", csp)
                location = headers.get("location")
                if location is not None:
                    headers["location"] = relative(location, host)
            await send(message)

        await self.app(scope, receive, add_headers)


def relative(location: str, host: str | None) -> str:
    """`location` without scheme and host when it names `host` (the request's own)."""
    parts = urlsplit(location)
    if parts.scheme not in ("http", "https") or not host or parts.netloc.lower() != host:
        return location
    path = parts.path or "/"
    if path.startswith("//"):  # would read as a host again
        path = "/" + path.lstrip("/")
    return (
        path
        + (f"?{parts.query}" if parts.query else "")
        + (f"#{parts.fragment}" if parts.fragment else "")
    )


def _host(scope: Scope) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == b"host":
            return bytes(value).decode("latin-1").lower()
    return None


class TrustedProxies:
    """ASGI middleware: uvicorn's ProxyHeadersMiddleware trusting only the proxies of
    `LAKEWARDEN_TRUSTED_PROXIES` (addresses or networks; read from the app's runtime at the
    first request). From them `X-Forwarded-For` becomes the client (what the audit records)
    and `X-Forwarded-Proto` the scheme; from anyone else, and with none configured, the
    headers are ignored. (uvicorn's own handling, which trusts 127.0.0.1 by default, is off:
    services/api/app.py.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._inner: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        inner = self._inner
        if inner is None:
            proxies = proxy_list(scope["app"].state.runtime.settings.trusted_proxies)
            # uvicorn types ASGI apps more narrowly than Starlette; the same protocol.
            wrapped = ProxyHeadersMiddleware(cast(Any, self.app), proxies)
            inner = self._inner = cast(ASGIApp, wrapped) if proxies else self.app
        await inner(scope, receive, send)


def proxy_list(setting: str) -> list[str]:
    return [p.strip() for p in setting.split(",") if p.strip()]


def secure_cookie(request: Request) -> bool:
    """Whether the dashboard's cookie is Secure: `LAKEWARDEN_COOKIE_SECURE` if set; else on,
    unless the API binds to a loopback address (plain http on one machine); a request over
    https (directly or from a trusted proxy) always."""
    if request.url.scheme == "https":
        return True
    settings = request.app.state.runtime.settings
    if settings.cookie_secure is not None:
        return bool(settings.cookie_secure)
    return not is_loopback(getattr(request.app.state, "bind_host", settings.api_host))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
