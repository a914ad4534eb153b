"""LISTEN for the catalog trigger's commit notifications (NOTIFY wakes, polling guarantees)."""

from __future__ import annotations

import json
import logging
import threading

import psycopg
from sqlalchemy.engine import make_url

from lakewarden.catalog import InvalidIdentifier, TableRef, catalog_db_url
from lakewarden.db.trigger import CHANNEL
from lakewarden.events.poller import poll_once
from lakewarden.events.refresh import refresh_table
from lakewarden.runtime import Runtime

log = logging.getLogger(__name__)


def libpq_url(sqlalchemy_url: str) -> str:
    return (
        make_url(sqlalchemy_url).set(drivername="postgresql").render_as_string(hide_password=False)
    )


class CommitListener(threading.Thread):
    def __init__(self, rt: Runtime, stop: threading.Event) -> None:
        super().__init__(name="commit-listener", daemon=True)
        self.rt, self.stop = rt, stop
        self.connected = threading.Event()

    def run(self) -> None:
        url = libpq_url(catalog_db_url(self.rt.settings, self.rt.db_url))
        while not self.stop.is_set():
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.connected.set()
                    # Anything committed while we were not listening is caught up now.
                    poll_once(self.rt)
                    while not self.stop.is_set():
                        for note in conn.notifies(timeout=1.0):
                            self._handle(note.payload)
            except Exception:
                self.connected.clear()
                log.exception("commit listener lost its connection; reconnecting")
                self.stop.wait(1.0)

    def _handle(self, payload: str) -> None:
        try:
            msg = json.loads(payload)
            if msg.get("catalog") != self.rt.settings.catalog_name:
                return
            ref = TableRef(msg["namespace"], msg["name"])
        except (ValueError, KeyError, InvalidIdentifier):
            log.warning("ignoring commit notification %r", payload)
            return
        try:
            refresh_table(self.rt, ref, source="notify")
        except Exception:
            log.exception("could not ingest commit of %s (the poller will retry)", ref.dotted)
