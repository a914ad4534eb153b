"""Process heartbeats: every api, worker and scheduler says it is alive, and what it holds."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

from sqlalchemy import text

from lakewarden.runtime import Runtime

log = logging.getLogger(__name__)

_UPSERT = text(
    """
    INSERT INTO process_heartbeats (process_id, role, hostname, pid, current_task_id)
    VALUES (:id, :role, :host, :pid, :task)
    ON CONFLICT (process_id) DO UPDATE SET last_seen = now(), current_task_id = :task
    """
)


def beat(rt: Runtime, current_task_id: int | None = None) -> None:
    with rt.engine.begin() as conn:
        conn.execute(
            _UPSERT,
            {
                "id": rt.process_id,
                "role": rt.role,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "task": current_task_id,
            },
        )


def forget(rt: Runtime) -> None:
    with rt.engine.begin() as conn:
        conn.execute(
            text("DELETE FROM process_heartbeats WHERE process_id = :id"), {"id": rt.process_id}
        )


class Ticker(threading.Thread):
    """The one periodic runner of every process: run `fn` every `interval` seconds until
    `stop` is set. Runs never overlap (one thread per job); errors are logged, not fatal.
    `wait_first`: wait one interval before the first run, not run at once."""

    def __init__(
        self,
        name: str,
        interval: float,
        fn: Callable[[], object],
        stop: threading.Event,
        *,
        wait_first: bool = False,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.interval, self.fn, self.stop, self.wait_first = interval, fn, stop, wait_first

    def run(self) -> None:
        if self.wait_first:
            self.stop.wait(self.interval)
        while not self.stop.is_set():
            try:
                self.fn()
            except Exception:
                log.exception("%s failed", self.name)
            self.stop.wait(self.interval)
