"""The dashboard is a client of the API, in process: what the API answers, the dashboard
reads from it, and every change is the API's own request (the same route, grant check,
rate limit, transaction and audit row as a curl would get). Only the caller's credential
is passed on: the cookie's token becomes the bearer header."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import HTTPException, Request

from services.api.access import TOKEN_COOKIE

BASE = "http://lakewarden.ui"  # never resolved: the transport is the app itself


class Api:
    def __init__(self, request: Request) -> None:
        header = request.headers.get("authorization")
        token = request.cookies.get(TOKEN_COOKIE, "").strip()
        self.headers = {"Authorization": header or f"Bearer {token}"}
        client = request.client
        self.transport = httpx.ASGITransport(
            app=request.app.state.api_app,
            client=(client.host, client.port) if client else ("127.0.0.1", 0),
        )

    async def call(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None
    ) -> httpx.Response:
        async with httpx.AsyncClient(transport=self.transport, base_url=BASE) as client:
            return await client.request(
                method, path, json=json, params=params, headers=self.headers
            )

    async def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """The JSON of a GET; an error answer is raised as the API gave it (its status and
        detail), for the page to show."""
        r = await self.call("GET", path, params=params)
        if r.status_code >= 400:
            raise HTTPException(r.status_code, detail_of(r))
        return r.json()

    async def get_or_none(self, path: str) -> Any:
        """The JSON of a GET, or None when the API answers an error (an optional panel)."""
        r = await self.call("GET", path)
        return r.json() if r.status_code < 400 else None


def detail_of(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return f"HTTP {r.status_code}"
    detail = body.get("detail") if isinstance(body, dict) else None
    return str(detail) if detail else f"HTTP {r.status_code}"
