"""The FastAPI application and the API process (commit listener + poller threads)."""

from __future__ import annotations

import gc
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from fastapi import FastAPI

from lakewarden import __version__, manifest_cache, process
from lakewarden.alerts.tick import alert_tick
from lakewarden.events.listener import CommitListener
from lakewarden.events.metastore import FOLLOW_TICK_S, Followers
from lakewarden.events.poller import poll_due
from lakewarden.formats.delta import incremental as delta_incremental
from lakewarden.formats.hudi import incremental as hudi_incremental
from lakewarden.process import Ticker
from lakewarden.runtime import Runtime
from services.api import access, errors
from services.api.access import AuditRefusals
from services.api.aliases import DefaultCatalogAliases
from services.api.deps import new_ingest_gate, operation_id
from services.api.headers import SecurityHeaders, TrustedProxies
from services.api.limits import RequestLimits
from services.api.routes import (
    alerts,
    audit,
    blockers,
    catalogs,
    costs,
    events,
    health,
    maintenance,
    metrics,
    namespaces,
    ops,
    pools,
    readiness,
    refs,
    rules,
    tables,
    tasks,
    tokens,
)
from services.api.ui import create_ui

log = logging.getLogger(__name__)

# How often an API replica looks for a catalog that is due for a poll.
POLL_TICK_S = 2.0


def create_app(rt: Runtime, *, background: bool = True, freeze_heap: bool = False) -> FastAPI:
    """`background=False` leaves out the listener and poller (for tests of the routes alone);
    `freeze_heap`: `freeze_startup_heap` once started (a server process's, not a test's)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stop = threading.Event()
        access.start(app, rt)
        app.state.ingest_gate = new_ingest_gate()  # on the loop that serves the app
        if background:
            s = rt.settings
            Ticker("heartbeat", s.heartbeat_interval_s, lambda: process.beat(rt), stop).start()
            # Each catalog is polled at its own interval, by one replica (poller.poll_due).
            tick = min(POLL_TICK_S, s.poll_interval_s)
            Ticker("poller", tick, lambda: poll_due(rt), stop).start()
            # Hive catalogs' notification logs, each followed by one replica.
            followers = Followers(rt)
            Ticker("metastore", FOLLOW_TICK_S, followers.tick, stop).start()
            Ticker(
                "alerts", s.alert_interval_s, lambda: alert_tick(rt, as_leader=False), stop
            ).start()
            if s.listen_for_commits:
                app.state.listener = CommitListener(rt, stop)
                app.state.listener.start()
        if freeze_heap:
            freeze_startup_heap()
        yield
        stop.set()
        if background:
            followers.close()
        app.state.rate_limiter.close()  # its own pool (services/api/rate_limit.py)

    app = FastAPI(
        title="lakewarden",
        version=__version__,
        description="Table-management control plane for Apache Iceberg tables.",
        lifespan=lifespan,
        responses=errors.APP_RESPONSES,  # 422 and 500 as ErrorOut, on every operation
        generate_unique_id_function=operation_id,
    )
    app.state.runtime = rt
    app.add_middleware(RequestLimits)  # 413 over 1 MiB, 422 for control chars in path/query
    # Refused and failed changes are audited too, those RequestLimits refuses included.
    app.add_middleware(AuditRefusals)
    # The paths from before catalogs: aliases for the default catalog.
    app.add_middleware(DefaultCatalogAliases)
    app.add_middleware(SecurityHeaders)  # CSP, nosniff, no framing; relative redirects
    app.add_middleware(TrustedProxies)  # first: X-Forwarded-* only from configured proxies
    modules = (
        ops,
        catalogs,
        tables,
        namespaces,
        health,
        tasks,
        events,
        alerts,
        metrics,
        blockers,
        maintenance,
        tokens,
        audit,
        rules,
        refs,
        readiness,
        costs,
        pools,
    )
    routers = [module.router for module in modules] + [tables.fleet]
    for router in routers:
        app.include_router(router)
    # Every error: one body (ErrorOut), a 409 for conflicts, no 500 text, a complete Allow.
    errors.register(app, [route for router in routers for route in router.routes])
    access.document_security(app)
    app.mount("/ui", create_ui(app))  # the on-call dashboard (services/api/ui)
    return app


# The young generation's collection threshold in a server process (`freeze_startup_heap`).
GC_YOUNG_THRESHOLD = 50_000


def freeze_startup_heap() -> None:
    """Move what the process holds once started (modules, the app, its routes and models:
    ~260,000 objects) out of the garbage collector's reach, so its full collections
    scan only what came since. Before, a full collection took 180-300 ms at load 5 and
    ran in ~1 scrape of /metrics in 20 (its ~6,000 per-table rows tip the collector):
    the scrape's p95/p99 (B26). A server's, not a test's: frozen objects are never freed,
    and a test process starts many apps.

    And collect the young generation every GC_YOUNG_THRESHOLD allocations, not 700: an
    ingest batch allocates tens of thousands of short-lived objects (rows, metadata JSON,
    answers), and at 700 many were still in use when collected, so survived into older
    generations and set off full collections over and over (B25's batch road, 16 minutes:
    1,118 of them, 38 s in all, the longest 0.45 s, each stopping every thread: the commit
    latency's tail)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def main(rt: Runtime, host: str, port: int) -> None:
    import uvicorn

    # log_config=None: uvicorn's loggers (server, access log) keep no handlers of their own
    # and propagate to the root's, so the API logs in the one format (lakewarden.logs),
    # with the same redaction.
    app = create_app(rt, freeze_heap=True)
    app.state.bind_host = host  # the dashboard cookie's Secure default (headers.secure_cookie)
    manifest_cache.without_cache()  # explain plans now and then: no fleet's manifests here
    delta_incremental.without_cache()  # nor a fleet's Delta files
    hudi_incremental.without_cache()  # nor Hudi's file slices
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=rt.settings.log_level.lower(),
        log_config=None,
        proxy_headers=False,  # headers.TrustedProxies decides (uvicorn trusts 127.0.0.1)
    )


@contextmanager
def serve_in_thread(rt: Runtime, *, freeze_heap: bool = False) -> Iterator[str]:
    """The real app of `rt` (without its commit listener and poller) served by uvicorn on a
    free loopback port in a thread of this process: its URL. For the benchmarks and the
    browser tests, which need real HTTP and the caller's own runtime."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        create_app(rt, background=False, freeze_heap=freeze_heap),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        proxy_headers=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="api-in-thread", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the API did not start in its thread")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
