"""Templates, their filters, flash messages and the dashboard's error pages."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from lakewarden import __version__

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
FLASH_COOKIE = "lakewarden_flash"  # one message for the next page (after a redirect)

templates = Jinja2Templates(directory=HERE / "templates")


def _when(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value))


def ts(value: Any) -> str:
    """A time as UTC, to the second."""
    at = _when(value)
    return "" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def ago(value: Any) -> str:
    """How long ago, roughly (the title attribute carries the exact time)."""
    at = _when(value)
    if at is None:
        return "never"
    s = (datetime.now(UTC) - at).total_seconds()
    if s < 0:
        return f"in {duration(-s * 1000)}"
    return f"{duration(s * 1000)} ago"


def duration(ms: Any) -> str:
    if ms is None:
        return ""
    s = float(ms) / 1000
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.0f} d"


def size(n: Any) -> str:
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


templates.env.filters.update(ts=ts, ago=ago, duration=duration, size=size, pretty=pretty)
templates.env.globals["version"] = __version__


def page(
    request: Request, name: str, context: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    """Render `name` with `context`, and the flash message the previous request left."""
    flash = request.cookies.get(FLASH_COOKIE)
    kind, _, text = unquote(flash).partition(":") if flash else ("", "", "")
    response = templates.TemplateResponse(
        request,
        name,
        {**context, "flash": {"kind": kind, "text": text} if text else None},
        status_code=status_code,
    )
    if flash:
        response.delete_cookie(FLASH_COOKIE, path="/ui")
    return response


def redirect(to: str, *, ok: str | None = None, error: str | None = None) -> RedirectResponse:
    """303 to `to` (the browser GETs it: a reload does not repeat the change), carrying one
    message for that page."""
    response = RedirectResponse(to, status_code=303)
    if ok or error:
        message = f"error:{error}" if error else f"ok:{ok}"
        response.set_cookie(
            FLASH_COOKIE,
            quote(message[:1000]),
            max_age=60,
            path="/ui",
            httponly=True,
            samesite="strict",
        )
    return response


def is_fragment(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


async def error_page(request: Request, exc: Exception) -> Response:
    """Any error of a dashboard request as HTML, with the status and what to do that the
    API's own handler gives (services/api/errors.py: one wording everywhere). No
    credential: to the login page."""
    api_app = request.app.state.api_app
    handler = next(
        (
            api_app.exception_handlers[c]
            for c in type(exc).__mro__
            if c in api_app.exception_handlers
        ),
        None,
    )
    if handler is None:  # pragma: no cover - errors.register handles Exception itself
        raise exc
    answer = await handler(request, exc)
    status = answer.status_code
    detail = "error"
    if isinstance(answer, JSONResponse):
        body = json.loads(bytes(answer.body))
        detail = body.get("detail", detail)
        problems = [f"{e['field']}: {e['problem']}" for e in body.get("errors") or ()]
        if problems:
            detail += " (" + "; ".join(problems) + ")"
        if body.get("error_id"):
            detail += f" (error id {body['error_id']})"
    if status == 401:
        if is_fragment(request):
            return Response(status_code=200, headers={"HX-Redirect": "/ui/login"})
        return redirect(f"/ui/login?next={quote(request.url.path)}")
    name = "fragment_error.html" if is_fragment(request) else "error.html"
    headers = dict(exc.headers or {}) if isinstance(exc, StarletteHTTPException) else {}
    headers.pop("WWW-Authenticate", None)
    response = page(request, name, {"status": status, "detail": detail}, status_code=status)
    response.headers.update(headers)
    return response
