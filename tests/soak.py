"""A live writer beside lakewarden's table services (issues 28 and 29, "never fight the
writer"): the family's Spark writer process (`spark_writer`, a soak step) writes to a table
while lakewarden's real services run beside it, turn by turn: the poller ingests the
table's new commits (its kinds judge them and open tasks), the worker plans, the leader
submits each job as an application of its own. The writer stops once it has written for
`LAKEWARDEN_SOAK_SECONDS` (default `DEFAULT_SECONDS`, short for CI) and lakewarden's
services have each run to their end beside it; then the runs end and the test reads the
table with an independent reader."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import application_runtime
from sqlalchemy import select

from lakewarden.db.models import JobRun, Task
from lakewarden.db.session import transaction
from lakewarden.events.poller import poll_once
from lakewarden.process import Ticker
from lakewarden.runtime import Runtime
from lakewarden.states import TERMINAL_TASK_STATES
from services.scheduler.main import Scheduler
from services.worker.main import Worker

DEFAULT_SECONDS = 45.0
# However long lakewarden's first runs take to start their JVMs, the writer stops by then.
MAX_SECONDS = 1500.0


def soak_seconds() -> float:
    return float(os.environ.get("LAKEWARDEN_SOAK_SECONDS") or DEFAULT_SECONDS)


@dataclass
class Soak:
    """lakewarden's services on one Postgres, turned by the test (`turn`)."""

    rt: Runtime
    sched: Scheduler
    stop: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def start(cls, db_url: str, data_dir: Path, **settings: Any) -> Soak:
        rt = application_runtime(db_url, data_dir, **settings)
        soak = cls(rt, Scheduler(rt))
        soak.sched.renew()
        Ticker("lease", 1.0, soak.sched.renew, soak.stop).start()
        return soak

    def turn(self) -> None:
        """One turn: poll the catalogs (new commits judged, tasks opened), plan every
        pending task, end and start applications."""
        poll_once(self.rt)
        worker = Worker(self.rt)
        while worker.run_once():
            pass
        self.sched.applications.poll(self.sched.leading())
        while self.sched.dispatch_once():
            pass

    def runs(self) -> list[tuple[Task, JobRun]]:
        with transaction(self.rt.engine) as s:
            found = s.execute(
                select(Task, JobRun).join(JobRun, JobRun.task_id == Task.id).order_by(JobRun.id)
            ).all()
            s.expunge_all()
        return [(t, r) for t, r in found]

    def succeeded(self, kind: str) -> int:
        return sum(1 for t, r in self.runs() if t.kind == kind and r.state == "succeeded")

    def idle(self) -> bool:
        """No task of lakewarden's is running or waiting to run."""
        with transaction(self.rt.engine) as s:
            states = s.scalars(select(Task.state)).all()
        return all(state in TERMINAL_TASK_STATES for state in states)

    def close(self) -> None:
        self.stop.set()
        self.sched.applications.kill_all()
        self.rt.engine.dispose()


def run_beside(
    soak: Soak,
    write: Any,
    stop_file: Path,
    kinds: tuple[str, ...],
    seconds: float,
) -> dict[str, Any]:
    """Start `write()` (the soak step, answering the writer's counts) in a thread, turn
    lakewarden's services until the writer has written `seconds` and every kind of
    `kinds` has succeeded at least once beside it, stop the writer, then turn until
    lakewarden is idle. The writer's counts, and how long it wrote."""
    answer: list[Any] = []
    failed: list[BaseException] = []

    def writer() -> None:
        try:
            answer.extend(write())
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=writer, name="live-writer", daemon=True)
    started = time.monotonic()
    thread.start()
    while thread.is_alive():
        soak.turn()
        elapsed = time.monotonic() - started
        if elapsed >= seconds and all(soak.succeeded(k) for k in kinds):
            stop_file.touch()
        time.sleep(1.0)
    wrote_s = time.monotonic() - started
    assert not failed, failed[0]
    deadline = time.monotonic() + 900
    while not soak.idle():  # what lakewarden opened meanwhile runs to its end
        assert time.monotonic() < deadline, [(t.kind, t.state) for t, _ in soak.runs()]
        soak.turn()
        time.sleep(1.0)
    counts: dict[str, Any] = answer[0]
    counts["seconds"] = round(wrote_s, 1)
    return counts


def stop_by(seconds: float) -> float:
    """The writer's own cap: it writes no longer than this whatever happens."""
    return max(seconds, 0.0) + MAX_SECONDS
