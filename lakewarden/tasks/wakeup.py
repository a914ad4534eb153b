"""Wake the loops that wait for tasks: a NOTIFY when a task becomes pending or planned.

`announce` is called by `lakewarden.tasks.repo` in the transaction that creates a task or
moves it to pending/planned, so every path (the API, the evaluator, the sweeps, the
worker, the reaper) wakes the waiting loop the moment the change commits (Postgres
delivers a NOTIFY at commit, and only then). `TaskWakeup` LISTENs on its own connection
and sets an event per state it waits for. A notification can be lost (while reconnecting),
so the loops still poll, just rarely.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import psycopg
from sqlalchemy import text
from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

CHANNEL = "lakewarden_tasks"
_NOTIFY = text("SELECT pg_notify(:channel, :state)")


def announce(session: Session, state: str) -> None:
    """Say, at this transaction's commit, that some task is now in `state`. The payload is
    the state alone: Postgres folds a transaction's identical notifications into one, so a
    sweep creating 500 tasks sends one."""
    session.execute(_NOTIFY, {"channel": CHANNEL, "state": str(state)})


class TaskWakeup(threading.Thread):
    """LISTEN for `announce`: set `events[state]` when a task reaches `state`.
    `libpq_url` is the control-plane database as libpq spells it
    (`lakewarden.events.listener.libpq_url`). `connected` is set while listening."""

    def __init__(
        self, libpq_url: str, events: Mapping[str, threading.Event], stop: threading.Event
    ) -> None:
        super().__init__(name="task-wakeup", daemon=True)
        self.url, self.events, self.stop = libpq_url, dict(events), stop
        self.connected = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.connected.set()
                    # Whatever was announced while we were not listening: look once.
                    for event in self.events.values():
                        event.set()
                    while not self.stop.is_set():
                        # A bounded wait, so a stop is noticed.
                        for note in conn.notifies(timeout=1.0):
                            woken = self.events.get(note.payload)
                            if woken is not None:
                                woken.set()
            except Exception:
                self.connected.clear()
                log.warning("task wake-up lost its connection; reconnecting", exc_info=True)
                self.stop.wait(1.0)
