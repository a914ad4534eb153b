"""Postgres restarted in the middle of a stream of event batches (issue 31): nothing a 202
acknowledged is lost, nothing is ingested twice, and the forwarder's retries of what the
restart refused record each commit once (a real Postgres of its own, restarted with
pg_ctl; the real API over HTTP; real pyiceberg tables in its JDBC catalog)."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
from conftest import make_test_runtime
from helpers import admin_headers, append_batches, make_table
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.embedded import _any_free_port, ensure_server, restart_server, stop_server
from lakewarden.db.migrate import migrate
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.states import OPEN_TASK_STATES
from lakewarden.tables import add_table
from services.api.app import serve_in_thread

pytestmark = pytest.mark.slow  # a Postgres server of its own

TABLES = 20
VERSIONS = 12
RESTART_AT = 3  # the version whose batch is posted as the restart begins

T = TypeVar("T")


def _retry(fn: Callable[[], T], seconds: float = 120) -> T:
    """`fn` again until it does not fail on the database (down while it restarts)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return fn()
        except DBAPIError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _move(rt: Runtime, refs: list[TableRef], location: str) -> None:
    """A commit on every table: its catalog pointer moved to `location` (one UPDATE)."""
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE iceberg_tables SET previous_metadata_location = metadata_location, "
                "metadata_location = :m WHERE catalog_name = :c AND table_namespace = 'sales' "
                "AND table_name = ANY(:names)"
            ),
            {"m": location, "c": rt.settings.catalog_name, "names": [r.name for r in refs]},
        )


def test_postgres_restarted_mid_ingest_loses_nothing_acknowledged(tmp_path: Path) -> None:
    # Its own server (the others keep theirs), outside pytest's temporary root: a pytest
    # session starting meanwhile makes that root 0700 again, and pg_ctl, run as the
    # server's system user, could no longer reach its data directory to restart it.
    pg_dir = Path(tempfile.mkdtemp(prefix="lakewarden-restart-pg-"))
    url = ensure_server(pg_dir, _any_free_port())
    try:
        rt = make_test_runtime(url, tmp_path)
        migrate(rt)
        source = make_table(rt, name="source")
        first = source.metadata_location
        files: list[str] = []
        snapshots: list[int] = []
        for v in range(VERSIONS):
            source = append_batches(source, 1, rows=2, start=10 * v)
            current = source.current_snapshot()
            assert current is not None
            files.append(source.metadata_location)
            snapshots.append(current.snapshot_id)
        # TABLES catalog entries of the source's first state: each commits by moving its
        # pointer to the source's next metadata file.
        refs = [TableRef("sales", f"t{i}") for i in range(TABLES)]
        for ref in refs:
            rt.catalog.register_table(ref.dotted, first)
            with transaction(rt.engine) as s:
                add_table(s, rt.settings.catalog_name, ref, {})

        acked: dict[tuple[str, int], int] = {}  # (table, snapshot) -> the event id answered
        new_events = refused = 0
        failed: list[BaseException] = []

        def restart() -> None:
            try:
                assert restart_server(pg_dir)
            except BaseException as exc:  # reported with the server's log below
                failed.append(exc)

        restarter = threading.Thread(target=restart)
        with (
            serve_in_thread(rt) as api,
            httpx.Client(base_url=api, headers=admin_headers(rt), timeout=60) as client,
        ):
            for v in range(VERSIONS):
                if v == RESTART_AT:
                    restarter.start()
                _retry(lambda: _move(rt, refs, files[v]))  # noqa: B023 (called at once)
                pending = list(refs)
                while pending:
                    body = {
                        "events": [
                            {
                                "namespace": r.namespace,
                                "name": r.name,
                                "snapshot_id": snapshots[v],
                                "metadata_location": files[v],
                            }
                            for r in pending
                        ]
                    }
                    try:
                        resp = client.post("/api/v1/events/batch", json=body)
                    except httpx.HTTPError:
                        resp = None
                    if resp is None or resp.status_code != 202:
                        refused += 1  # the whole batch: posted again
                        time.sleep(0.2)
                        continue
                    left = []
                    for ref, item in zip(pending, resp.json()["results"], strict=True):
                        if item["accepted"]:
                            assert item["event_id"] is not None, item
                            acked[(ref.name, snapshots[v])] = item["event_id"]
                            new_events += item["new_events"]
                        else:
                            refused += 1
                            left.append(ref)  # refused alone: posted again
                    pending = left
                if v == RESTART_AT:
                    restarter.join()  # the versions after it are ingested after the restart
        log = pg_dir / "pg" / "server.log"
        tail = log.read_text()[-3000:] if log.exists() else ""
        assert not restarter.is_alive() and not failed, f"{failed}: {tail}"

        with rt.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT m.name, e.snapshot_id, e.id FROM timeline_events e "
                    "JOIN managed_tables m ON m.id = e.table_id WHERE m.name LIKE 't%'"
                )
            ).all()
            doubled = conn.execute(
                text(
                    "SELECT count(*) FROM (SELECT 1 FROM tasks WHERE state = ANY(:open) "
                    "GROUP BY table_id, kind HAVING count(*) > 1) x"
                ),
                {"open": [str(s) for s in OPEN_TASK_STATES]},
            ).scalar_one()
        stored = {(name, snap): event_id for name, snap, event_id in rows}
        assert len(rows) == len(stored), "a commit was ingested twice"
        assert len(acked) == TABLES * VERSIONS  # every commit acknowledged in the end
        # Nothing acknowledged lost: each answered event is there, for its commit.
        assert stored == acked
        assert new_events == len(stored)  # each counted new once, retries included
        assert doubled == 0
        rt.engine.dispose()
    finally:
        stop_server(pg_dir)
        shutil.rmtree(pg_dir, ignore_errors=True)
