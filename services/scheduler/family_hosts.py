"""Warm family hosts (`warm_families`): the leader's one long-lived process per Spark session
family (Hudi's, Delta's; `lakewarden.jobs.family_host`) that runs the family's attempts one
after another in its warm session, instead of a spark-submit and a JVM start per attempt.

An attempt on a host is still an application to `Applications` (mode application, its
submission the host's process: `pid:<host>:<pid>`): it records its own outcome under its
run's fence and heartbeats as one; the leader polls, times out, cancels and judges it as
any application, and after a failover the next leader re-attaches or judges it by the same
code (`applications.reattach`, `judge_ended_run`). Only how it starts, how its end is seen
and how it is stopped differ, here:

- a host is started at its family's first attempt (pools share it: they differ in limits,
  not in the session), restarted after it died, and closed when idle (`warm_family_idle_s`);
- one that could not start (its session failed, or it exited before `ready`) is not tried
  again for FALLBACK_S: its family's attempts run as their own applications meanwhile, and
  an attempt it held unstarted is launched so, each saying why in its log;
- an attempt's end: its `done` line, or its host's exit. One the host never started is
  relaunched as its own application (it never ran: nothing to judge); one it started is
  judged from the table's commits, as an application that ended without reporting.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lakewarden.jobs import family_host
from lakewarden.jobs.execute import Job
from lakewarden.runtime import Runtime
from lakewarden.spark.submit import (
    application_master,
    application_settings,
    is_kubernetes,
    settings_env,
)

log = logging.getLogger(__name__)

FALLBACK_S = 300.0  # after a host failed to start: own applications for this long
STARTING, READY, GONE = "starting", "ready", "gone"
NEVER_STARTED = "its warm host was gone before it started the attempt"


@dataclass
class Seen:
    """What the host said of one attempt."""

    started_at: float | None = None  # monotonic
    exit_code: int | None = None


@dataclass
class FamilyHost:
    """One host process and what it said (its status lines, read on a thread)."""

    family: str
    process: subprocess.Popen[bytes]
    log_path: Path
    state: str = STARTING
    app_id: str | None = None
    jvm_pid: int | None = None
    why_not: str | None = None  # why it could not start
    attempts: dict[tuple[int, int], Seen] = field(default_factory=dict)
    idle_since: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def pid(self) -> int:
        return self.process.pid

    def listen(self, status: int) -> None:
        with os.fdopen(status, "r") as lines:
            for line in lines:
                self._heard(line.split())
        with self.lock:  # the status fd closes when the host exits
            if self.state == STARTING:
                self.why_not = self.why_not or "it exited before its session was ready"
            self.state = GONE

    def _heard(self, words: list[str]) -> None:
        with self.lock:
            if words[:1] == ["ready"] and len(words) == 3:
                self.state, self.app_id, self.jvm_pid = READY, words[1], int(words[2])
                log.info("warm %s host %d ready: %s", self.family, self.pid, self.app_id)
            elif words[:1] == ["failed"]:
                self.why_not = " ".join(words[1:]) or "its session did not start"
            elif words[:1] == ["start"] and len(words) == 3:
                key = (int(words[1]), int(words[2]))
                self.attempts.setdefault(key, Seen()).started_at = time.monotonic()
            elif words[:1] == ["done"] and len(words) == 4:
                key = (int(words[1]), int(words[2]))
                self.attempts.setdefault(key, Seen()).exit_code = int(words[3])

    def send(self, line: str) -> bool:
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(line.encode() + b"\n")
            self.process.stdin.flush()
        except (OSError, ValueError):
            return False
        return True

    def alive(self) -> bool:
        return self.state != GONE and self.process.poll() is None

    def outstanding(self) -> int:
        with self.lock:
            return sum(1 for s in self.attempts.values() if s.exit_code is None)

    def forget(self, task_id: int, attempt: int) -> None:
        with self.lock:
            self.attempts.pop((task_id, attempt), None)
            if not any(s.exit_code is None for s in self.attempts.values()):
                self.idle_since = time.monotonic()

    def seen(self, task_id: int, attempt: int) -> Seen:
        with self.lock:
            return Seen(**vars(self.attempts.get((task_id, attempt), Seen())))

    def ended(self, task_id: int, attempt: int) -> str | None:
        """Why the attempt is over (NEVER_STARTED: the host is gone and never started it),
        or None while it is queued or runs. Gone means its status fd reached its end, so
        every line the host wrote has been read."""
        seen = self.seen(task_id, attempt)
        if seen.exit_code is not None:
            return f"its warm {self.family} host ran it (exit code {seen.exit_code})"
        if self.state != GONE:
            return None
        if seen.started_at is None:
            return NEVER_STARTED
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        code = self.process.returncode
        return f"its warm {self.family} host {self.pid} exited ({code}) while it ran"

    def stop(self, task_id: int, attempt: int, group: str, *, hard: bool) -> None:
        """Cancel the attempt (its job group, or unqueue it); hard, if it runs: kill the
        host (its queued attempts are then launched again, `ended`: NEVER_STARTED)."""
        if hard and self.seen(task_id, attempt).started_at is not None:
            log.warning("task %d: killing the warm %s host %d", task_id, self.family, self.pid)
            self.kill()
        else:
            self.send(f"cancel {group}")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)  # its JVM too: the host's process group


class FamilyHosts:
    """The leader's hosts, one per family of `warm_families`."""

    def __init__(self, rt: Runtime, log_dir: Path) -> None:
        self.rt, self.log_dir = rt, log_dir
        self.hosts: dict[str, FamilyHost] = {}
        self.failed_until: dict[str, float] = {}
        self.lock = threading.Lock()

    def serves(self, family: str) -> str | None:
        """Why the family's attempt does not run on a host (None: it does)."""
        s = self.rt.settings
        if family not in s.warm_families:
            return "warm_families does not name it"
        if s.application_deploy_mode != "client" or is_kubernetes(application_master(s)):
            return "warm hosts run in client mode only"
        host = self.hosts.get(family)
        # One that never got ready: its failure counted once (a host started later is newer).
        never_ready = host is not None and host.state == GONE and host.app_id is None
        if (
            host is not None
            and never_ready
            and self.failed_until.get(family, 0.0) < host.idle_since
        ):
            self.failed_until[family] = time.monotonic() + FALLBACK_S
            log.warning("the warm %s host could not start: %s", family, host.why_not)
        until = self.failed_until.get(family, 0.0)
        if time.monotonic() < until:
            why = host.why_not if host is not None else None
            left = until - time.monotonic()
            return f"its warm host could not start ({why}); tried again in {left:.0f}s"
        return None

    def take(self, job: Job) -> FamilyHost | None:
        """The family's host, the attempt queued on it (started first if need be); None
        when the attempt must run as its own application (`serves(job.family)` says why)."""
        if self.serves(job.family) is not None:
            return None
        with self.lock:
            host = self.hosts.get(job.family)
            if host is None or not host.alive():
                host = self._start(job.family)
                if host is None:
                    return None
            with host.lock:
                host.attempts[(job.task_id, job.attempt)] = Seen()
            if not host.send(f"run {job.task_id} {job.attempt} {job.group}"):
                host.forget(job.task_id, job.attempt)
                return None
            return host

    def _start(self, family: str) -> FamilyHost | None:
        old = self.hosts.pop(family, None)
        if old is not None:
            log.warning("the warm %s host %d is gone: starting a new one", family, old.pid)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{family}-host.log"
        read_end, write_end = os.pipe()
        s = self.rt.settings
        argv = [sys.executable, "-m", family_host.__name__, "--family", family]
        try:
            with open(log_path, "ab") as out:
                process = subprocess.Popen(
                    [*argv, "--status-fd", str(write_end)],
                    env={**os.environ, **settings_env(application_settings(s), self.rt.db_url)},
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    pass_fds=(write_end,),
                    start_new_session=True,  # it outlives this leader: the next re-attaches
                )
        except OSError as exc:
            os.close(read_end)
            self.failed_until[family] = time.monotonic() + FALLBACK_S
            log.warning("the warm %s host could not start: %s", family, exc)
            return None
        finally:
            os.close(write_end)
        host = FamilyHost(family, process, log_path)
        threading.Thread(
            target=host.listen, args=(read_end,), name=f"{family}-host", daemon=True
        ).start()
        self.hosts[family] = host
        log.info("warm %s host started (pid %d, log %s)", family, process.pid, log_path)
        return host

    def close_idle(self) -> None:
        """Close the stdin of a host idle for `warm_family_idle_s`: it exits, and starts
        again with its family's next attempt."""
        idle_s = self.rt.settings.warm_family_idle_s
        with self.lock:
            for family, host in list(self.hosts.items()):
                if not host.alive():
                    continue
                if host.outstanding() == 0 and time.monotonic() - host.idle_since > idle_s:
                    log.info("warm %s host %d idle for %.0fs: closing it", family, host.pid, idle_s)
                    with contextlib.suppress(OSError):
                        assert host.process.stdin is not None
                        host.process.stdin.close()
                    self.hosts.pop(family)

    def kill_all(self) -> None:
        """For tests and benchmarks."""
        with self.lock:
            for host in self.hosts.values():
                host.kill()
            self.hosts.clear()
