"""Who is calling and whether they may: authentication, grants, rate limits, audit.

Every route depends on `AccessDep` (a test walks the routes to check it). It authenticates
the caller (an API token, or an OIDC JWT when configured: 401 without one), and gives the
route `need(role, catalog, namespace)` (403 saying what is missing) and `scope(...)`
(a SQL condition for lists). A mutating request that succeeds is audited in the route's
own transaction, so no change commits without its audit row; one that is refused or fails
is audited by `AuditRefusals` (below) in a transaction of its own.
"""

from __future__ import annotations

import fnmatch
import json
import logging
from collections.abc import Iterator
from typing import Annotated, Any
from urllib.parse import urlsplit

import anyio
from fastapi import Depends, HTTPException, Request
from fastapi.routing import APIRoute
from sqlalchemy import ColumnElement
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lakewarden import audit
from lakewarden.auth import tokens
from lakewarden.auth.grants import Caller, Role
from lakewarden.auth.oidc import InvalidToken, OIDCVerifier
from lakewarden.auth.sql import in_scope
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from services.api.deps import CatalogDep, RefDep, RuntimeDep, SessionDep, managed, operation_id
from services.api.rate_limit import RateLimiter, retry_after

log = logging.getLogger(__name__)

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PUBLIC_PATHS = frozenset({"/healthz", "/readyz"})  # and /metrics when metrics_public
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="lakewarden"'}
# The dashboard keeps the pasted API token here (HttpOnly, SameSite=Strict: services/api/ui).
TOKEN_COOKIE = "lakewarden_token"


def start(app: Any, rt: Runtime) -> None:
    """The app's rate limiter and OIDC verifier (None unless configured), made when the app
    starts (create_app stays free of settings, for the OpenAPI tests)."""
    app.state.rate_limiter = RateLimiter(rt.engine, rt.settings.mutations_per_minute)
    app.state.oidc = OIDCVerifier.from_settings(rt.settings)


class Access:
    """The request's caller, and the audit facts the route adds (scope, target, change)."""

    def __init__(self, request: Request, caller: Caller) -> None:
        self.request = request
        self.caller = caller
        self.catalog: str | None = None
        self.namespace: str | None = None
        self.target: str | None = None
        self.change: dict[str, Any] | None = None

    def need(
        self, role: Role, catalog: str | None, namespace: str | None, *, target: str | None = None
    ) -> None:
        """403 unless the caller has `role` on the scope. No catalog/namespace: a thing of
        the whole fleet (a token, a fleet-wide alert), which needs `role` on everything."""
        self.catalog, self.namespace = catalog, namespace
        if target is not None:
            self.target = target
        if catalog is None or namespace is None:
            allowed, where = self.caller.may_everywhere(role), "everything"
        else:
            allowed, where = self.caller.may(role, catalog, namespace), f"{catalog}/{namespace}"
        if not allowed:
            raise HTTPException(
                403,
                f"this needs the {role} role on {where}; {self.caller.subject} has "
                f"{self.caller.grants_text()}",
            )

    def need_visible(
        self, role: Role, catalog: str | None, namespace: str | None, *, target: str, missing: str
    ) -> None:
        """`need`, for a thing the path names by id (a task, an alert, a rule): a caller who
        may not even see it gets `missing`, the 404 of an id that does not exist, not a 403
        naming its scope (which told anyone which namespace each id belongs to)."""
        if catalog is None or namespace is None:
            sees = self.caller.may_everywhere(Role.viewer)
        else:
            sees = self.caller.may(Role.viewer, catalog, namespace)
        if not sees:
            self.catalog, self.namespace, self.target = catalog, namespace, target  # audited
            raise HTTPException(404, missing)
        self.need(role, catalog, namespace, target=target)

    def sees_catalog(self, catalog: str, *, whole: bool = False) -> bool:
        """Whether a viewer grant covers some namespace of `catalog` (`whole`: all of them,
        which its warehouse and properties need)."""
        return any(
            g.role >= Role.viewer
            and fnmatch.fnmatchcase(catalog, g.catalog)
            and (g.namespace == "*" or not whole)
            for g in self.caller.grants
        )

    def need_somewhere(self, role: Role) -> None:
        """403 unless the caller has `role` on some scope (lists show what is in it)."""
        if not self.caller.may_somewhere(role):
            raise HTTPException(
                403,
                f"this needs the {role} role on some scope; {self.caller.subject} has "
                f"{self.caller.grants_text()}",
            )

    def scope(self, role: Role, catalog: Any, namespace: Any) -> ColumnElement[bool]:
        """SQL: the rows (by their catalog and namespace columns) the caller may see with
        `role`; 403 if that is none."""
        self.need_somewhere(role)
        return in_scope(self.caller, role, catalog, namespace)

    @property
    def actor(self) -> str:
        return self.caller.subject


def bearer(request: Request) -> str:
    """The request's credential: the bearer header, else the dashboard's cookie (the token
    pasted at /ui/login). A change sent with the cookie must come from this server's own
    pages (`same_origin`): the browser sends the cookie with any site's request."""
    header = request.headers.get("authorization", "")
    scheme, _, credential = header.partition(" ")
    cookie = request.cookies.get(TOKEN_COOKIE, "").strip()
    if not header and cookie:
        if request.method in MUTATING:
            same_origin(request)
        return cookie
    if scheme.lower() != "bearer" or not credential.strip():
        raise HTTPException(
            401,
            "this endpoint needs a credential: send 'Authorization: Bearer <token>' (create "
            "one with `lakewarden token create`)",
            headers=CHALLENGE,
        )
    return credential.strip()


def same_origin(request: Request) -> None:
    """403 unless the request's Origin (or, without one, its Referer) is this server: a
    cross-site form cannot make a change with the dashboard's cookie (SameSite=Strict is
    the first guard, this the second, for browsers or proxies that drop SameSite)."""
    source = request.headers.get("origin") or request.headers.get("referer") or ""
    host = request.headers.get("host", "")
    if not host or urlsplit(source).netloc != host:
        raise HTTPException(
            403,
            "a change authenticated by the dashboard's cookie must come from the dashboard's "
            "own pages (Origin or Referer of this server); API clients send "
            "'Authorization: Bearer <token>'",
        )


def authenticate(request: Request, rt: Runtime, session: Session) -> Caller:
    credential = bearer(request)
    caller = None
    if credential.startswith(tokens.SECRET_PREFIX):
        caller = tokens.caller_for(session, credential)
    else:
        verifier = getattr(request.app.state, "oidc", None)
        if verifier is not None:
            try:
                caller = verifier.caller(credential)
            except InvalidToken as exc:  # says why, never echoing the token
                raise HTTPException(401, f"invalid bearer token: {exc}", headers=CHALLENGE) from exc
    if caller is None:
        raise HTTPException(401, "the token is unknown, expired or revoked", headers=CHALLENGE)
    return caller


def get_access(request: Request, rt: RuntimeDep, session: SessionDep) -> Iterator[Access]:
    access = Access(request, authenticate(request, rt, session))
    request.state.access = access
    if request.method in MUTATING:
        limiter: RateLimiter = request.app.state.rate_limiter
        key = f"token:{access.caller.token_id}" if access.caller.token_id else access.actor
        wait = limiter.wait_needed(key)
        if wait > 0:
            raise HTTPException(
                429,
                f"too many changes from {access.actor}: at most "
                f"{rt.settings.mutations_per_minute} a minute; retry after the Retry-After "
                "seconds",
                headers={"Retry-After": retry_after(wait)},
            )
    yield access
    # Reached only when the route returned: its changes and this row commit together. (If
    # that commit fails, the error response is audited by AuditRefusals.)
    if request.method in MUTATING:
        route = request.scope.get("route")
        status = route.status_code if isinstance(route, APIRoute) and route.status_code else 200
        _record(session, request.scope, access, status, "ok", None)


# scope="function": the audit row is added before the route's transaction commits.
AccessDep = Annotated[Access, Depends(get_access, scope="function")]


def get_optional_access(request: Request, rt: RuntimeDep, session: SessionDep) -> Access | None:
    """For /metrics: no credential needed when `metrics_public` (a read: never audited)."""
    if rt.settings.metrics_public:
        return None
    return Access(request, authenticate(request, rt, session))


OptionalAccessDep = Annotated[Access | None, Depends(get_optional_access, scope="function")]


def _record(
    session: Session,
    sc: Scope,
    access: Access | None,
    status: int,
    outcome: str,
    detail: str | None,
) -> None:
    """The request's audit row (`sc`: its ASGI scope, which the route and middleware share)."""
    route = sc.get("route")
    client = sc.get("client")
    audit.record(
        session,
        actor=access.actor if access else "anonymous",
        source=f"{client[0]}" if client else None,
        method=sc["method"],
        path=sc["path"],
        # A 405 matched a path but no route of its method: name no operation it is not.
        action=operation_id(route) if isinstance(route, APIRoute) and status != 405 else "unrouted",
        catalog=access.catalog if access else None,
        namespace=access.namespace if access else None,
        target=access.target if access else None,
        status=status,
        outcome=outcome,
        change=access.change if access and outcome == "ok" else None,
        detail=detail,
    )


class AuditRefusals:
    """ASGI middleware: a mutating request that did not succeed (401, 403, 404, 409, 422,
    429, 500...) is audited too, in its own transaction (the route's rolled back)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in MUTATING:
            await self.app(scope, receive, send)
            return
        sent: dict[str, Any] = {}
        body: list[bytes] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["status"] = message["status"]
            elif message["type"] == "http.response.body" and sent.get("status", 0) >= 400:
                body.append(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            status = sent.get("status", 500)
            if status >= 400:
                await anyio.to_thread.run_sync(
                    self._record_refusal, scope, scope.get("state", {}), status, b"".join(body)
                )

    @staticmethod
    def _record_refusal(scope: Scope, state: dict[str, Any], status: int, body: bytes) -> None:
        app = scope["app"]
        rt: Runtime = app.state.runtime
        try:
            detail = json.loads(body).get("detail") if body else None
        except ValueError:
            detail = None
        outcome = "refused" if status in (401, 403, 429) else "failed"
        try:
            with transaction(rt.engine) as session:
                # Refused before any route authenticated it (413, a control character,
                # malformed JSON, 404, 405): still recorded as whoever its credential names.
                access = state.get("access") or _identify(scope, rt, session)
                text = str(detail)[:2000] if detail else None
                _record(session, scope, access, status, outcome, text)
        except Exception:  # the response is sent; a lost audit row must not become a 500
            log.exception("could not audit %s %s (%s)", scope["method"], scope["path"], status)


def _identify(scope: Scope, rt: Runtime, session: Session) -> Access | None:
    """The caller of a request no route authenticated, if its credential is valid (else
    None: the row says anonymous). For the audit row only: nothing is allowed by it."""
    request = Request(scope)
    header = request.headers.get("authorization", "")
    if not header and not request.cookies.get(TOKEN_COOKIE, "").strip():
        return None
    try:
        return Access(request, authenticate(request, rt, session))
    except HTTPException:
        return None


def table_in_scope(
    catalog: CatalogDep, ref: RefDep, session: SessionDep, access: AccessDep
) -> ManagedTable:
    """The managed table of the path, once the caller may at least see its namespace (so a
    caller learns nothing of tables outside their grants, not even whether they exist)."""
    access.need(Role.viewer, catalog, ref.namespace, target=ref.dotted)
    return managed(session, catalog, ref)


TableDep = Annotated[ManagedTable, Depends(table_in_scope, scope="function")]


NO_CATALOG = "no such catalog (GET /api/v1/catalogs lists them), or as the operation says"


def document_security(app: Any) -> None:
    """The OpenAPI says what `AccessDep` enforces: a bearer scheme on every operation but
    the public ones, with their 401 and 403, and 429 on the mutating ones (clients and the
    fuzzer read it; tests/integration/test_access.py checks the behaviour)."""
    from fastapi.openapi.utils import get_openapi

    ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}}
    statuses = {
        "401": "no credential, or an unknown, expired or revoked one",
        "403": "the credential lacks the role on the scope (the detail says what is missing)",
        "429": "too many changes from this credential: retry after `Retry-After` seconds",
    }

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return dict(app.openapi_schema)
        spec = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        components = spec.setdefault("components", {})
        components.setdefault("securitySchemes", {})["bearer"] = {
            "type": "http",
            "scheme": "bearer",
            "description": "an API token (`lakewarden token create`) or an OIDC JWT",
        }
        for path, operations in spec["paths"].items():
            if path in PUBLIC_PATHS:
                continue
            for method, op in operations.items():
                op["security"] = [{"bearer": []}]
                codes = ["401", "403"] + (["429"] if method.upper() in MUTATING else [])
                for code in codes:
                    op["responses"].setdefault(code, {"description": statuses[code], **ref})
                if "{catalog}" in path:  # deps.catalog_in_path
                    op["responses"].setdefault("404", {"description": NO_CATALOG, **ref})
        app.openapi_schema = spec
        return spec

    app.openapi = openapi
