"""The dashboard's buttons (POST forms) and its login. Each action is the API's own request
(`Api.call`): the same route, grant check, rate limit and audit row. The form must come
from the dashboard's own pages (`same_origin`, besides the cookie's SameSite=Strict);
the answer is a 303 back to a page, with the API's message (done, or what went wrong).
Logging in with an API token keeps a session token minted from it in the browser, and
logging out revokes that one (lakewarden.auth.tokens.mint_session)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, quote

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from lakewarden import audit
from lakewarden.auth import tokens
from lakewarden.auth.tokens import SECRET_PREFIX
from lakewarden.db.models import ApiToken
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from services.api.access import TOKEN_COOKIE, same_origin
from services.api.deps import Id
from services.api.headers import secure_cookie
from services.api.ui.api import Api, detail_of
from services.api.ui.render import page, redirect

router = APIRouter()
MAX_FORM_BYTES = 16 * 1024


async def form(request: Request) -> dict[str, str]:
    """An url-encoded form's fields (the first value of each)."""
    body = (await request.body())[:MAX_FORM_BYTES].decode("utf-8", "replace")
    return {k: v[0].strip() for k, v in parse_qs(body).items()}


async def act(
    request: Request,
    method: str,
    path: str,
    back: str,
    done: str,
    body: dict[str, Any] | None = None,
) -> Response:
    same_origin(request)
    r = await Api(request).call(method, path, json=body)
    if r.status_code == 401:
        return redirect(f"/ui/login?next={quote(back)}")
    if r.status_code >= 400:
        return redirect(back, error=f"{done} refused ({r.status_code}): {detail_of(r)}")
    return redirect(back, ok=done)


def _table(catalog: str, namespace: str, name: str) -> tuple[str, str]:
    """The API path of a table, and its dashboard page."""
    parts = f"{quote(catalog)}/tables/{quote(namespace)}/{quote(name)}"
    return f"/api/v1/catalogs/{parts}", f"/ui/t/{quote(catalog)}/{quote(namespace)}/{quote(name)}"


@router.post("/t/{catalog}/{namespace}/{name}/trigger")
async def trigger(request: Request, catalog: str, namespace: str, name: str) -> Response:
    same_origin(request)
    api, back = _table(catalog, namespace, name)
    kind = (await form(request)).get("kind", "")
    r = await Api(request).call("POST", f"{api}/tasks", json={"kind": kind})
    if r.status_code == 201:
        task = r.json()
        return redirect(f"/ui/tasks/{task['id']}", ok=f"{kind} task {task['id']} created")
    return redirect(back, error=f"trigger {kind} refused ({r.status_code}): {detail_of(r)}")


@router.post("/t/{catalog}/{namespace}/{name}/pause")
async def pause(request: Request, catalog: str, namespace: str, name: str) -> Response:
    api, back = _table(catalog, namespace, name)
    reason = (await form(request)).get("reason") or None
    return await act(request, "POST", f"{api}/pause", back, "paused", {"reason": reason})


@router.post("/t/{catalog}/{namespace}/{name}/resume")
async def resume(request: Request, catalog: str, namespace: str, name: str) -> Response:
    api, back = _table(catalog, namespace, name)
    return await act(request, "POST", f"{api}/resume", back, "resumed")


@router.post("/t/{catalog}/{namespace}/{name}/kinds/{kind}/resume")
async def resume_kind(
    request: Request, catalog: str, namespace: str, name: str, kind: str
) -> Response:
    """Lift the hold on one kind (after a failed validation or repeated errors)."""
    api, back = _table(catalog, namespace, name)
    return await act(request, "POST", f"{api}/kinds/{quote(kind)}/resume", back, f"{kind} resumed")


@router.post("/t/{catalog}/{namespace}/{name}/blockers")
async def add_blocker(request: Request, catalog: str, namespace: str, name: str) -> Response:
    api, back = _table(catalog, namespace, name)
    fields = await form(request)
    try:
        ttl_s = float(fields.get("ttl_minutes") or "60") * 60
    except ValueError:
        return redirect(back, error="the blocker's minutes must be a number")
    body = {"holder": fields.get("holder", ""), "reason": fields.get("reason") or None}
    return await act(
        request, "POST", f"{api}/blockers", back, "blocker added", body | {"ttl_s": ttl_s}
    )


@router.post("/t/{catalog}/{namespace}/{name}/heartbeat")
async def heartbeat(request: Request, catalog: str, namespace: str, name: str) -> Response:
    """The writer ran for an empty partition and wrote nothing (an overdue one, say)."""
    api, back = _table(catalog, namespace, name)
    partition = (await form(request)).get("partition", "")
    done = f"heartbeat for partition {partition} recorded"
    return await act(request, "POST", f"{api}/heartbeat", back, done, {"partition": partition})


@router.post("/t/{catalog}/{namespace}/{name}/blockers/{blocker_id}/remove")
async def remove_blocker(
    request: Request, catalog: str, namespace: str, name: str, blocker_id: Id
) -> Response:
    api, back = _table(catalog, namespace, name)
    return await act(request, "DELETE", f"{api}/blockers/{blocker_id}", back, "blocker removed")


# --- repair, revert, cherry-pick: a dry run shown as a page, then its Apply button --------

FIX_ACTIONS = ("repair", "revert", "cherry-pick")
# Each action's form fields that are snapshot ids (the API's body names them alike).
FIX_SNAPSHOTS = {
    "repair": ("to_snapshot",),
    "revert": ("from_snapshot", "to_snapshot"),
    "cherry-pick": ("snapshot",),
}


def fix_body(action: str, fields: dict[str, str]) -> dict[str, Any]:
    """The API body of a repair, revert or cherry-pick form (ValueError says what to fix)."""
    if action not in FIX_ACTIONS:
        raise ValueError(f"no such action {action!r}: one of {', '.join(FIX_ACTIONS)}")
    body: dict[str, Any] = {}
    for key in FIX_SNAPSHOTS[action]:
        try:
            body[key] = int(fields.get(key, ""))
        except ValueError:
            raise ValueError(f"{key} must be a snapshot id (a whole number)") from None
    if action == "repair":
        pairs = [p.partition("=") for p in fields.get("partition", "").split(",") if p.strip()]
        if not pairs or any(not k.strip() or not eq for k, eq, _ in pairs):
            raise ValueError(
                "partition must be field=value pairs, e.g. ts_day=2026-11-23,region=eu"
            )
        body["partition"] = {k.strip(): v.strip() for k, _, v in pairs}
    return body


@router.post("/t/{catalog}/{namespace}/{name}/fix/{action}")
async def fix_dry_run(
    request: Request, catalog: str, namespace: str, name: str, action: str
) -> Response:
    """The dry run: what the action would take out and put back, with an Apply button
    that commits exactly that plan (refused if main moved since)."""
    same_origin(request)
    api, back = _table(catalog, namespace, name)
    fields = await form(request)
    try:
        body = fix_body(action, fields)
    except ValueError as exc:
        return redirect(back, error=f"{action} refused: {exc}")
    r = await Api(request).call("POST", f"{api}/{action}", json=body | {"dry_run": True})
    if r.status_code == 401:
        return redirect(f"/ui/login?next={quote(back)}")
    if r.status_code >= 400:
        return redirect(back, error=f"{action} refused ({r.status_code}): {detail_of(r)}")
    context = {"action": action, "plan": r.json(), "fields": fields, "back": back}
    return page(request, "fix_plan.html", context)


@router.post("/t/{catalog}/{namespace}/{name}/fix/{action}/apply")
async def fix_apply(
    request: Request, catalog: str, namespace: str, name: str, action: str
) -> Response:
    api, back = _table(catalog, namespace, name)
    fields = await form(request)
    try:
        body = fix_body(action, fields) | {"dry_run": False}
        body["main_snapshot_id"] = int(fields.get("main_snapshot_id", ""))
    except ValueError as exc:
        same_origin(request)
        return redirect(back, error=f"{action} refused: {exc}")
    return await act(request, "POST", f"{api}/{action}", back, f"{action} committed", body)


@router.post("/tasks/{task_id}/cancel")
async def cancel(request: Request, task_id: Id) -> Response:
    back = f"/ui/tasks/{task_id}"
    return await act(request, "POST", f"/api/v1/tasks/{task_id}/cancel", back, "cancelled")


@router.post("/tasks/{task_id}/retry")
async def retry(request: Request, task_id: Id) -> Response:
    same_origin(request)
    r = await Api(request).call("POST", f"/api/v1/tasks/{task_id}/retry")
    back = f"/ui/tasks/{task_id}"
    if r.status_code >= 400:
        return redirect(back, error=f"retry refused ({r.status_code}): {detail_of(r)}")
    again = r.json()["id"]
    return redirect(f"/ui/tasks/{again}", ok=f"retried task {task_id} as task {again}")


@router.post("/alerts/{alert_id}/ack")
async def ack(request: Request, alert_id: Id) -> Response:
    by = (await form(request)).get("by") or "dashboard"  # the page fills in the caller
    return await act(
        request, "POST", f"/api/v1/alerts/{alert_id}/ack", "/ui/alerts", "acknowledged", {"by": by}
    )


@router.post("/maintenance/freeze")
async def freeze(request: Request) -> Response:
    reason = (await form(request)).get("reason") or None
    return await act(
        request, "POST", "/api/v1/maintenance/freeze", "/ui/", "frozen", {"reason": reason}
    )


@router.post("/maintenance/unfreeze")
async def unfreeze(request: Request) -> Response:
    return await act(request, "POST", "/api/v1/maintenance/unfreeze", "/ui/", "unfrozen")


# --- login: a session token minted from the pasted one goes into an HttpOnly,
# SameSite=Strict cookie; logout revokes it -----------------------------------------------


def _next(target: str | None) -> str:
    """Where to go after logging in: a dashboard page only (never another site)."""
    return target if target and target.startswith("/ui/") and "//" not in target else "/ui/"


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request) -> HTMLResponse:
    return page(request, "login.html", {"next": _next(request.query_params.get("next"))})


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the token the way every request is checked (an API call with it: 401 if it is
    unknown, expired or revoked), then keep it in the cookie."""
    same_origin(request)
    fields = await form(request)
    token, target = fields.get("token", ""), _next(fields.get("next"))
    why = "paste an API token (`lakewarden token create`)"
    if token:
        probe = Api(request)
        probe.headers = {"Authorization": f"Bearer {token}"}
        r = await probe.call("GET", "/api/v1/scheduler/leader")
        why = detail_of(r) if r.status_code == 401 else ""
    if why:
        return page(request, "login.html", {"next": target, "error": why}, status_code=401)
    # An API token is not kept in the browser: a session token minted from it is (logout
    # revokes it). An OIDC JWT is kept as it is: it lapses on its own.
    if token.startswith(SECRET_PREFIX):
        minted = await anyio.to_thread.run_sync(_start_session, request, token)
        token = minted or token
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        TOKEN_COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=secure_cookie(request),
        path="/",
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Revoke the session's token (a pasted token or a JWT is only forgotten) and forget it."""
    same_origin(request)
    secret = request.cookies.get(TOKEN_COOKIE, "").strip()
    if secret.startswith(SECRET_PREFIX):
        await anyio.to_thread.run_sync(_end_session, request, secret)
    response = redirect("/ui/login", ok="logged out")
    response.delete_cookie(TOKEN_COOKIE, path="/")
    return response


def _start_session(request: Request, secret: str) -> str | None:
    """The secret of a session token minted from `secret`, audited (None if `secret` lapsed
    since the probe)."""
    rt: Runtime = request.app.state.runtime
    with transaction(rt.engine) as session:
        minted = tokens.mint_session(session, secret, rt.settings.session_token_hours)
        if minted is None:
            return None
        token, session_secret = minted
        _audit_session(session, request, "startDashboardSession", token)
    return session_secret


def _end_session(request: Request, secret: str) -> None:
    rt: Runtime = request.app.state.runtime
    with transaction(rt.engine) as session:
        token = tokens.end_session(session, secret)
        if token is not None:
            _audit_session(session, request, "endDashboardSession", token)


def _audit_session(session: Session, request: Request, action: str, token: ApiToken) -> None:
    """The row of a session token minted or revoked (the API's own token routes audit
    theirs; these are the dashboard's)."""
    audit.record(
        session,
        actor=f"token:{token.name}",
        source=request.client.host if request.client else None,
        method=request.method,
        path=request.url.path,
        action=action,
        target=f"token {token.id} ({token.name})",
        status=303,
        outcome="ok",
        change={"token": {"session_of": token.parent_id, "expires_at": str(token.expires_at)}},
    )
