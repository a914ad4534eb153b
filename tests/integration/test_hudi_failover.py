"""kill -9 mid-Hudi-compaction (issue 28): two real scheduler processes; a merge-on-read
table's compaction runs as a Hudi-family Spark application; once Hudi has made the
compaction inflight, the leader and the application are killed with SIGKILL (the host
lost). The standby takes over, finds the application dead and re-plans the task; the next
attempt executes the instant the first one planned and recorded (Hudi rolls back the
inflight attempt first). Checked on the timeline and with hudi-rs: one completed compaction,
of that instant; nothing inflight or savepointed left by lakewarden; the same rows."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from helpers import job_runs, process_logs, register_hudi_orders, task_of, wait_for
from hudi import HudiReadOptions, HudiTable
from spark_writer import SparkWriters

from benchmarks import processes
from lakewarden.db.session import transaction
from lakewarden.formats.hudi.facts import read_facts
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.formats.hudi.validation import digest, rows_by_key
from lakewarden.kinds import hudi_compaction
from lakewarden.runtime import Runtime
from lakewarden.states import TERMINAL_TASK_STATES
from lakewarden.tasks import repo
from services.scheduler.applications import local_pid
from services.worker.main import Worker

# A table's writes, then two Hudi-family applications one after the other: ~3 min each on
# a loaded 2-core box.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

# Longer than the other failover tests' 3 s: on a loaded 2-core box (load 40+) a 3 s lease
# moved between the two schedulers before the kill.
TTL_S = 10.0
TERMINAL = {s.value for s in TERMINAL_TASK_STATES}
# Enough file groups that the compaction's Spark tasks (one per slice, on local[1]) run for
# seconds: the kill lands while it is inflight.
KEYS, PER_FILE_GROUP = 1_500, 50


@pytest.fixture
def schedulers(
    db_url: str, tmp_path: Path
) -> Iterator[Callable[[], list[subprocess.Popen[bytes]]]]:
    """Starts two scheduler processes when called (once the table is written: their
    polling would slow the writer), stopped after the test."""
    env = processes.process_env(
        db_url,
        tmp_path,
        lease_ttl_s=str(TTL_S),
        lease_renew_interval_s="1",
        spark_warmup="false",
        application_master="local[1]",
        application_driver_memory="768m",
        heartbeat_interval_s="1",
        stale_after_s="15",
        scheduler_poll_interval_s="1",
        retry_base_s="1",
    )
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> list[subprocess.Popen[bytes]]:
        procs.extend(
            processes.start(["scheduler"], env, tmp_path / f"scheduler-{i}.log") for i in range(2)
        )
        return procs

    yield start
    processes.stop(procs, timeout=10, crash=True)


def _write_table(spark_writers: SparkWriters, path: Path) -> dict[int, int]:
    """A merge-on-read table of KEYS rows in KEYS/PER_FILE_GROUP file groups, each slice
    with a log file, some with two; its expected rows (id -> v)."""
    table = {"path": path.as_uri(), "type": "MERGE_ON_READ", "partitioned": True}
    split = {
        "hoodie.copyonwrite.insert.auto.split": "false",
        "hoodie.copyonwrite.insert.split.size": str(PER_FILE_GROUP),
    }
    spark_writers.run(
        "hudi",
        [
            {**table, "op": "insert", "ids": [0, KEYS], "value": 0, "options": split},
            {**table, "op": "upsert", "ids": [0, KEYS], "value": 1},
            {**table, "op": "upsert", "ids": [0, 30], "value": 2},
        ],
        timeout=1200,  # a loaded 2-core box took over 600 s for these writes
    )
    return {i: i * 10 + (2 if i < 30 else 1) for i in range(KEYS)}


def _inflight(base_path: str) -> str | None:
    """The compaction instant Hudi is executing (inflight, not completed), if any."""
    pending = HudiTimeline(base_path).pending()
    return next(
        (i.requested for i in pending if i.action == "compaction" and i.state == "inflight"),
        None,
    )


def test_kill_the_leader_and_its_application_mid_compaction_and_the_next_attempt_finishes_it(
    rt: Runtime,
    client: TestClient,
    spark_writers: SparkWriters,
    schedulers: Callable[[], list[subprocess.Popen[bytes]]],
    tmp_path: Path,
) -> None:
    base = tmp_path / "wh" / "lake" / "orders"
    expected = _write_table(spark_writers, base)
    base_path = str(base)
    before = read_facts(base_path)
    assert len(before.base_file_sizes) >= 20 and min(before.log_files_per_slice) >= 1
    assert max(before.log_files_per_slice) == 2
    rows_before = digest(base_path)

    event = register_hudi_orders(client, tmp_path / "wh")
    task_id = event["decision_detail"]["compaction"]["task_id"]
    assert Worker(rt).run_once() and task_of(rt, task_id).state == "planned"

    procs = schedulers()
    wait_for(lambda: processes.lease_holder(rt.engine), 240, "a leader")
    on_timeout = lambda: process_logs(tmp_path)  # noqa: E731

    # Hudi made the compaction inflight: its application is writing base files. Freeze it
    # at once (so that it cannot finish between the look and the kill), then kill -9 the
    # leader and the application's whole process group: the host is gone.
    instant = wait_for(lambda: _inflight(base_path), 420, "the compaction inflight", on_timeout)
    (first,) = job_runs(rt)
    pid = local_pid(first.submission_id)
    assert pid is not None
    os.killpg(pid, signal.SIGSTOP)
    holder, epoch = wait_for(lambda: processes.lease_holder(rt.engine), 60, "the leader")
    leader = next(p for p in procs if f"-{p.pid}-" in holder)  # the one leading now
    leader.send_signal(signal.SIGKILL)
    os.killpg(pid, signal.SIGKILL)
    leader.wait(10)
    assert (first.metrics or {}).get(hudi_compaction.PLANNED) == instant  # recorded first
    assert instant not in {i.requested for i in HudiTimeline(base_path).completed()}, (
        "the compaction completed before the kill: nothing was killed mid-compaction"
    )

    def ended() -> str | None:
        Worker(rt).run_once()  # re-plans the task the new leader returned to pending
        state = task_of(rt, task_id).state
        return state if state in TERMINAL else None

    try:
        state = wait_for(ended, 480, "the task to end", on_timeout)
        runs = job_runs(rt)
        assert state == "succeeded", [(r.attempt, r.state, r.error) for r in runs]
        new_holder, new_epoch = wait_for(
            lambda: processes.lease_holder(rt.engine), 5, "the new leader"
        )
        assert new_holder != holder and new_epoch > epoch
    finally:
        for run in job_runs(rt):
            app_pid = local_pid(run.submission_id)
            if app_pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(app_pid, signal.SIGKILL)

    # The next attempt executed the same instant (never a new schedule), under the new
    # leader; the task ended once.
    last = runs[-1]
    assert len(runs) >= 2 and last.state == "succeeded", [(r.attempt, r.state) for r in runs]
    assert (last.metrics or {})[hudi_compaction.PLANNED] == instant
    assert last.leader_epoch == new_epoch
    with transaction(rt.engine) as s:
        history = repo.history(s, task_id)
    assert len([h for h in history if h.to_state in TERMINAL]) == 1

    # The timeline: one completed compaction, of that instant; Hudi rolled back the killed
    # attempt; nothing pending, no savepoint of lakewarden's left.
    timeline = HudiTimeline(base_path)
    done = timeline.completed()
    compactions = [i for i in done if i.action == "commit"]
    assert [i.requested for i in compactions] == [instant], [(i.requested, i.action) for i in done]
    assert timeline.pending() == []
    assert [i for i in timeline.instants() if i.action == "savepoint"] == []
    assert "rollback" in {i.action for i in done}, [(i.requested, i.action) for i in done]

    # Independent reader (hudi-rs): no log files left, every row once with its last value.
    assert read_facts(base_path).log_files == 0
    assert digest(base_path) == rows_before
    assert rows_by_key(base_path).duplicates == 0
    read = pa.Table.from_batches(HudiTable(base_path).read(HudiReadOptions()))
    assert dict(zip(read["id"].to_pylist(), read["v"].to_pylist(), strict=True)) == expected
    print(f"compaction {instant}: killed inflight, finished by attempt {last.attempt}")
