"""Warm family hosts' pure logic: how the leader reads a host's status lines
(services.scheduler.family_hosts) and how a host takes the leader's lines
(lakewarden.jobs.family_host). The real host and JVM: tests/integration/test_family_hosts.py."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lakewarden.jobs.family_host import Inbox
from services.scheduler.family_hosts import GONE, NEVER_STARTED, FamilyHost, Seen


@pytest.fixture
def host(tmp_path: Path) -> Any:
    process = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)
    process.wait()
    yield FamilyHost("delta", process, tmp_path / "delta-host.log")


def test_an_attempts_end_is_its_done_line_or_its_hosts_exit(host: FamilyHost) -> None:
    for task_id in (1, 2, 3):  # queued on it, as `FamilyHosts.take` does
        host.attempts[(task_id, 1)] = Seen()
    host._heard(["ready", "local-1", "42"])
    host._heard(["start", "1", "1"])
    assert host.ended(1, 1) is None and host.ended(2, 1) is None  # running; queued
    host._heard(["done", "1", "1", "0"])
    host._heard(["start", "2", "1"])
    assert host.ended(1, 1) == "its warm delta host ran it (exit code 0)"
    assert host.outstanding() == 2
    host.state = GONE  # its status fd ended: every line it wrote was read
    assert "exited (0) while it ran" in (host.ended(2, 1) or "")
    assert host.ended(3, 1) == NEVER_STARTED  # never ran: launched again, not judged


class _Spark:
    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.sparkContext = self

    def cancelJobGroup(self, group: str) -> None:
        self.cancelled.append(group)


class _Status:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def send(self, line: str) -> None:
        self.lines.append(line)


def test_a_host_runs_in_order_unqueues_a_cancel_and_leaves_the_rest_at_eof() -> None:
    spark, status = _Spark(), _Status()
    inbox = Inbox(spark, status)  # type: ignore[arg-type]
    for line in ("run 1 1 g1", "run 2 1 g2", "run 3 1 g3", "cancel g2"):
        inbox.take(line)
    # g2 was queued: unqueued and answered (application_entry's NOTHING_TO_DO)
    assert status.lines == ["done 2 1 2"] and spark.cancelled == []
    assert inbox.next() == (1, 1, "g1")
    inbox.take("cancel g1")  # running: its Spark job group is cancelled
    assert spark.cancelled == ["g1"]
    inbox.read(io.StringIO(""))  # stdin ended: nothing more starts (g3 stays unstarted)
    assert inbox.next() is None and list(inbox.queued) == [(3, 1, "g3")]
