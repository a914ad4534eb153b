"""Process heartbeats: every api, worker and scheduler says it is alive, and what it holds.

One beat per tick is one statement, whatever the process holds: its own row, and the
heartbeat of every task it holds (the worker's task in planning, the scheduler's running
jobs and applications), which is how the reaper tells a live holder from a dead one."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Collection

from sqlalchemy import text

from lakewarden.runtime import Runtime
from lakewarden.states import HELD_TASK_STATES, sql_in

log = logging.getLogger(__name__)

# A task's heartbeat moves only while its holder still holds it: one a reaper or a new
# leader took meanwhile keeps the new holder's.
_BEAT = text(
    f"""
    WITH me AS (
        INSERT INTO process_heartbeats (process_id, role, hostname, pid, current_task_id)
        VALUES (:id, :role, :host, :pid, :task)
        ON CONFLICT (process_id) DO UPDATE SET last_seen = now(), current_task_id = :task
    ), held AS (
        UPDATE tasks SET heartbeat_at = now()
        WHERE id = ANY(CAST(:held AS bigint[])) AND holder = :id
          AND {sql_in("state", HELD_TASK_STATES)}
        RETURNING id
    )
    SELECT id FROM held
    """
)


def beat(rt: Runtime, current_task_id: int | None = None, held: Collection[int] = ()) -> set[int]:
    """Say this process is alive (and which task it works on), and that it still holds
    the tasks `held`, in one statement. Returns those of `held` it still holds."""
    with rt.engine.begin() as conn:
        found = conn.execute(
            _BEAT,
            {
                "id": rt.process_id,
                "role": rt.role,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "task": current_task_id,
                "held": sorted(held),
            },
        )
        return set(found.scalars())


def forget(rt: Runtime) -> None:
    with rt.engine.begin() as conn:
        conn.execute(
            text("DELETE FROM process_heartbeats WHERE process_id = :id"), {"id": rt.process_id}
        )


class Ticker(threading.Thread):
    """The one periodic runner of every process: run `fn` every `interval` seconds until
    `stop` is set. Runs never overlap (one thread per job, so a slow job never delays
    another's); errors are logged, not fatal. `wait_first`: wait one interval before the
    first run, not run at once. `fixed_rate`: the interval runs from one start to the
    next (a slow run does not push the next one back, e.g. a lease renewal), instead of
    from one run's end to the next's start (a slow sweep is not run back to back). `due_in`:
    asked after each run, the seconds until the next run is wanted when that is sooner than
    the interval (a standby tries the lease the moment it expires)."""

    def __init__(
        self,
        name: str,
        interval: float,
        fn: Callable[[], object],
        stop: threading.Event,
        *,
        wait_first: bool = False,
        fixed_rate: bool = False,
        due_in: Callable[[], float | None] | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.interval, self.fn, self.stop, self.wait_first = interval, fn, stop, wait_first
        self.fixed_rate = fixed_rate
        self.due_in = due_in

    def run(self) -> None:
        if self.wait_first:
            self.stop.wait(self.interval)
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.fn()
            except Exception:
                log.exception("%s failed", self.name)
            took = time.monotonic() - started if self.fixed_rate else 0.0
            wait = self.interval - took
            sooner = self.due_in() if self.due_in is not None else None
            if sooner is not None:
                wait = min(wait, sooner)
            self.stop.wait(max(0.0, wait))
