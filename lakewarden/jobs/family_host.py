"""A warm family host: one long-lived process holding a Spark session of a format family
(Hudi's or Delta's: `lakewarden.spark.session`), running the leader's attempts of that
family one after another, each exactly as its own application would
(`application_entry.run_application`: load, heartbeat, fence, run, record its outcome),
without a JVM start per attempt. Started and watched by the leader
(`services.scheduler.family_hosts`), with `settings_env`'s environment, as an application:

    python -m lakewarden.jobs.family_host --family delta --status-fd N

stdin, one line each: `run <task> <attempt> <group>`, queued; `cancel <group>`: a queued
attempt is dropped (answered `done ... 2`), the running one's Spark job group cancelled.
At EOF (the leader closed it: idle, or the leader is gone) the running attempt ends and the
queued ones are left unstarted (a new leader judges them: never run, so retried). The status
fd, one line each: `ready <app id> <jvm pid>` once the session runs, `failed <why>` if it
cannot start, `start <task> <attempt>` before an attempt loads, `done <task> <attempt>
<exit code>` after (application_entry's codes). A `start` without its `done` means the
attempt was running when the host died: the leader judges it from the table's commits.

The host beats in `process_heartbeats` (role `<family>-host`, current task), so it shows
in /metrics' `lakewarden_process_up` as the other processes do.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import os
import sys
import threading
from typing import IO, TYPE_CHECKING

from lakewarden import process
from lakewarden.errors import headline
from lakewarden.jobs.application_entry import NOT_REPORTED, NOTHING_TO_DO, run_application
from lakewarden.logs import log_context, setup_logging
from lakewarden.runtime import Runtime, make_runtime

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("lakewarden.family_host")

Attempt = tuple[int, int, str]  # task, attempt, job group


class Inbox:
    """The leader's lines, read on a thread of their own so that a cancel reaches the
    running attempt: the queued attempts, in order, and whether stdin ended."""

    def __init__(self, spark: SparkSession, report: Status) -> None:
        self.spark, self.report = spark, report
        self.queued: collections.deque[Attempt] = collections.deque()
        self.running: Attempt | None = None
        self.ended = False
        self.cond = threading.Condition()

    def read(self, lines: IO[str]) -> None:
        for line in lines:
            self.take(line)
        with self.cond:
            self.ended = True
            self.cond.notify()

    def take(self, line: str) -> None:
        words = line.split()
        if len(words) == 4 and words[0] == "run":
            with self.cond:
                self.queued.append((int(words[1]), int(words[2]), words[3]))
                self.cond.notify()
        elif len(words) == 2 and words[0] == "cancel":
            self.cancel(words[1])

    def cancel(self, group: str) -> None:
        with self.cond:
            dropped = [a for a in self.queued if a[2] == group]
            for a in dropped:
                self.queued.remove(a)
            running = self.running is not None and self.running[2] == group
        for task_id, attempt, _ in dropped:
            self.report.send(f"done {task_id} {attempt} {NOTHING_TO_DO}")
        if running:
            log.info("cancelling Spark job group %s", group)
            self.spark.sparkContext.cancelJobGroup(group)

    def next(self) -> Attempt | None:
        """The next attempt to run; None once stdin ended (the queued ones stay unstarted)."""
        with self.cond:
            while not self.queued and not self.ended:
                self.cond.wait()
            if self.ended:
                return None
            self.running = self.queued.popleft()
            return self.running


class Status:
    """The status fd. A leader that died closed its end: the host's attempts still record
    their own outcomes, so a line that cannot be written is dropped."""

    def __init__(self, fd: int) -> None:
        self.out = os.fdopen(fd, "w", buffering=1)
        self.lock = threading.Lock()

    def send(self, line: str) -> None:
        with self.lock, contextlib.suppress(OSError, ValueError):
            self.out.write(line + "\n")


def jvm_pid(spark: SparkSession) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]


def serve(rt: Runtime, family: str, status: Status) -> int:
    from lakewarden.spark.session import build_session, jvm_alive

    try:
        spark = build_session(rt.settings, rt.db_url, f"lakewarden-{family}-host", family=family)
    except Exception as exc:
        log.exception("the %s host's Spark session did not start", family)
        status.send(f"failed {headline(exc)}".replace("\n", " "))
        return 1
    status.send(f"ready {spark.sparkContext.applicationId} {jvm_pid(spark)}")
    inbox = Inbox(spark, status)
    threading.Thread(target=inbox.read, args=(sys.stdin,), name="inbox", daemon=True).start()
    current: list[int] = []
    stop = threading.Event()
    beat = process.Ticker(
        "heartbeat",
        rt.settings.heartbeat_interval_s,
        lambda: process.beat(rt, current[0] if current else None),
        stop,
    )
    beat.start()
    try:
        while (attempt := inbox.next()) is not None:
            task_id, number, _ = attempt
            current[:] = [task_id]
            status.send(f"start {task_id} {number}")
            with log_context(task_id=task_id, attempt=number):
                try:
                    code = run_application(rt, task_id, number, warm=spark)
                except Exception:  # its outcome unrecorded: the leader judges it, we go on
                    log.exception("task %d attempt %d: not reported", task_id, number)
                    code = NOT_REPORTED
            status.send(f"done {task_id} {number} {code}")
            current.clear()
            with inbox.cond:
                inbox.running = None
            if not jvm_alive(spark):  # the leader starts a new host
                log.error("the %s host's JVM is gone: exiting", family)
                return 1
        return 0
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            process.forget(rt)
        with contextlib.suppress(Exception):
            spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lakewarden.family_host", description=__doc__)
    parser.add_argument("--family", required=True, choices=("hudi", "delta"))
    parser.add_argument("--status-fd", type=int, required=True)
    args = parser.parse_args(argv)
    rt = make_runtime(f"{args.family}-host")
    setup_logging(rt.settings, rt.db_url)
    return serve(rt, args.family, Status(args.status_fd))


if __name__ == "__main__":
    raise SystemExit(main())
