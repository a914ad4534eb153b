"""The FastAPI application and the API process (commit listener + poller threads)."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from lakewarden import __version__, process
from lakewarden.alerts.tick import alert_tick
from lakewarden.events.listener import CommitListener
from lakewarden.events.poller import poll_once
from lakewarden.process import Ticker
from lakewarden.runtime import Runtime
from services.api import errors
from services.api.limits import RequestLimits
from services.api.routes import (
    alerts,
    blockers,
    events,
    health,
    metrics,
    namespaces,
    ops,
    tables,
    tasks,
)

log = logging.getLogger(__name__)


def create_app(rt: Runtime, *, background: bool = True) -> FastAPI:
    """`background=False` leaves out the listener and poller (for tests of the routes alone)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stop = threading.Event()
        if background:
            s = rt.settings
            Ticker("heartbeat", s.heartbeat_interval_s, lambda: process.beat(rt), stop).start()
            Ticker("poller", s.poll_interval_s, lambda: poll_once(rt), stop).start()
            Ticker(
                "alerts", s.alert_interval_s, lambda: alert_tick(rt, as_leader=False), stop
            ).start()
            if s.listen_for_commits and s.catalog_type == "jdbc":
                app.state.listener = CommitListener(rt, stop)
                app.state.listener.start()
        yield
        stop.set()

    app = FastAPI(
        title="lakewarden",
        version=__version__,
        description="Table-management control plane for Apache Iceberg tables.",
        lifespan=lifespan,
    )
    app.state.runtime = rt
    app.add_middleware(RequestLimits)  # 413 over 1 MiB, 422 for control chars in path/query
    for module in (ops, tables, namespaces, health, tasks, events, alerts, metrics, blockers):
        app.include_router(module.router)
    errors.register(app)  # database conflicts escaping a route: 409, not 500

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        # Say what to fix, field by field, without echoing internals.
        errors = [
            {"field": ".".join(str(p) for p in e["loc"] if p != "body"), "problem": e["msg"]}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": "invalid request", "errors": errors}, status_code=422)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        error_id = uuid.uuid4().hex[:12]
        log.exception("unhandled error %s on %s %s", error_id, request.method, request.url.path)
        return JSONResponse(
            {"detail": "internal error; the server log has the details", "error_id": error_id},
            status_code=500,
        )

    return app


def main(rt: Runtime, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(create_app(rt), host=host, port=port, log_level=rt.settings.log_level.lower())
