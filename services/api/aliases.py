"""The paths from before catalogs were first-class stay, as aliases for the default catalog.

`/api/v1/tables/{namespace}/{name}/…` and `/api/v1/namespaces/…` are
served as `/api/v1/catalogs/{default}/tables/…` and `/api/v1/catalogs/{default}/namespaces/…`
(one set of routes; the OpenAPI documents the catalog paths). `GET /api/v1/tables` is not an
alias: it lists the tables of every catalog (`?catalog=` narrows it); `POST /api/v1/tables`
is a route of its own (services/api/routes/tables.py), so that its path allows both.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

PREFIX = b"/api/v1"


class DefaultCatalogAliases:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    @staticmethod
    def _aliased(scope: Scope) -> bool:
        return str(scope["path"]).startswith(("/api/v1/tables/", "/api/v1/namespaces/"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._aliased(scope):
            default = scope["app"].state.runtime.settings.catalog_name
            target = f"/api/v1/catalogs/{default}"
            raw = scope.get("raw_path") or scope["path"].encode()
            rest = raw[len(PREFIX) :] if raw.startswith(PREFIX) else raw
            path = target + scope["path"][len(PREFIX) :]
            scope = {**scope, "path": path, "raw_path": target.encode() + rest}
        await self.app(scope, receive, send)
