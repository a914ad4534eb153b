"""Hudi compaction as a kind, end to end through the real services: a merge-on-read table
with log files (a copy of `hudi_tables.mor_logs`), registered under a policy that makes it
due; the baseline event opens the task, the worker plans it from hudi-rs's file-system
view, the leader submits it as a Hudi-family application of its own (the task's pool is in
session mode: a Hudi job always runs so), which plans the instant, records it on the run,
compacts and validates. Checked with hudi-rs: no log files left, the same rows and checksum."""

from __future__ import annotations

import shutil
import threading
import time
from functools import partial
from pathlib import Path

from conftest import HudiTables
from fastapi.testclient import TestClient
from helpers import read_throughout, register_hudi_orders, run_hudi_pass
from spark_writer import SparkWriters

from lakewarden.formats.hudi.facts import read_facts
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.formats.hudi.validation import digest
from lakewarden.kinds import hudi_compaction
from lakewarden.policy.model import CompactionPolicy


def test_a_merge_on_read_table_is_compacted_by_a_submitted_hudi_application(
    client: TestClient, db_url: str, hudi_tables: HudiTables, tmp_path: Path
) -> None:
    table = tmp_path / "wh" / "lake" / "orders"
    shutil.copytree(hudi_tables.mor_logs, table)  # written once per run by the fixture
    before = read_facts(str(table))
    assert max(before.log_files_per_slice) == 2
    rows_before = digest(str(table))

    event = register_hudi_orders(client, tmp_path / "wh")
    assert event["decision"] == "task-created", event
    compaction = event["decision_detail"]["compaction"]
    assert "2 log files >= min_input_files 2" in compaction["reason"]
    detail = event["decision_detail"]
    assert "no more write commits than retained" in detail["clean"]["reason"], detail
    assert detail["clustering"]["decision"] == detail["zorder"]["decision"] == "disabled"
    task_id = compaction["task_id"]

    plans, states, runs = run_hudi_pass(db_url, tmp_path, {"compaction": task_id})
    planned, run = plans["compaction"], runs["compaction"]
    assert planned.plan and planned.plan["base_path"] == str(table)
    assert states["compaction"] == "succeeded", (run.error, run.log_tail)

    assert run.mode == "application" and run.spark_app_id
    metrics = run.metrics or {}
    instant = metrics[hudi_compaction.PLANNED]
    assert metrics["validation"]["status"] == "passed" and metrics["validation"]["rows"] == 60
    assert metrics["log_files_before"] == before.log_files and metrics["log_files_after"] == 0
    assert metrics["cost"]["executor_cpu_s"] > 0 and metrics["cost"]["tasks"] > 0  # Spark's own
    timeline = HudiTimeline(str(table))
    assert timeline.completed()[-1].requested == instant
    assert timeline.completed()[-1].action == "commit" and timeline.pending() == []
    assert read_facts(str(table)).log_files == 0
    assert digest(str(table)) == rows_before  # independent reader: same rows, same checksum

    # And why not, now: no log files are left; a compaction lakewarden did not plan would
    # be the writer's (this one is ours: its run recorded it).
    after, section = read_facts(str(table)), CompactionPolicy(min_input_files=2, min_small_files=2)
    assert (
        "0 log files per slice"
        in hudi_compaction.verdict(section, after, timeline, {instant}).reason
    )
    theirs = hudi_compaction.verdict(section, after, timeline, set())
    assert not theirs.needed and "not planned by lakewarden" in theirs.reason


def test_a_corrupted_compaction_is_never_seen_by_a_reader(
    client: TestClient,
    db_url: str,
    hudi_tables: HudiTables,
    spark_writers: SparkWriters,
    tmp_path: Path,
) -> None:
    """The test-only failpoint drops a row from a base file the compaction wrote, before
    its commit (issue 30, goal 5): the check against the file slices it replaces finds the
    row missing, the compaction is never committed (its inflight instant rolled back) and
    the task fails for good. A reader polling the table all along (hudi-rs, the latest
    snapshot) never sees a row missing or extra. (The old flow, which validated after the
    commit and then restored a savepoint, fails here: the reader saw 59 of 60 rows.)"""
    table = tmp_path / "wh" / "lake" / "orders"
    shutil.copytree(hudi_tables.mor_logs, table)
    path = str(table)
    rows_before = digest(path)
    task_id = register_hudi_orders(client, tmp_path / "wh")["decision_detail"]["compaction"][
        "task_id"
    ]

    with read_throughout(partial(digest, path)) as seen:
        _, states, runs = run_hudi_pass(
            db_url,
            tmp_path,
            {"compaction": task_id},
            warm=spark_writers,
            failpoint="corrupt-rewrite",
            failpoints_enabled=True,
        )
    run = runs["compaction"]
    wrong = [d for d in seen if d != rows_before]
    assert len(seen) > 10 and wrong == [], f"{len(wrong)} of {len(seen)} reads: {wrong[:3]}"
    assert states["compaction"] == "failed", (run.error, run.log_tail)
    metrics = run.metrics or {}
    found = metrics["validation"]
    assert found["status"] == "failed" and found["mode"] == "before commit", found
    assert (found["rows"], found["rows_after"]) == (60, 59), found
    assert len(found["partitions_differing"]) == 1, found
    assert metrics["undo"]["committed"] is False, metrics["undo"]
    assert metrics["undo"]["rolled_back_inflight"] == metrics[hudi_compaction.PLANNED]
    assert "readers never saw it" in (run.error or ""), run.error
    timeline = HudiTimeline(path)
    instant = metrics[hudi_compaction.PLANNED]
    assert instant not in {i.requested for i in timeline.completed()}
    # Hudi's rollback of the inflight compaction, then its plan unscheduled (never run
    # again: left requested, it kept its file groups out of every later plan)
    assert timeline.pending() == [] and metrics["undo"]["plan_purged"] is True
    assert "savepoint" not in {i.action for i in timeline.instants()}
    assert not list(table.rglob(f"*_{instant}.parquet"))
    assert digest(path) == rows_before


def test_a_policy_changed_during_a_compaction_leaves_nothing_committed(
    client: TestClient,
    db_url: str,
    hudi_tables: HudiTables,
    spark_writers: SparkWriters,
    tmp_path: Path,
) -> None:
    """The table's compaction policy changes while its compaction executes (its instant
    inflight): the policy's last look, right before the commit (after the execution and
    the check), stops it, the inflight instant is rolled back (its plan requested again,
    for the re-planned task's next attempt) and the task goes back to be planned under the
    new policy. Nothing is committed. (The last look before the execution let it commit.)"""
    table = tmp_path / "wh" / "lake" / "orders"
    shutil.copytree(hudi_tables.mor_logs, table)
    path = str(table)
    rows_before = digest(path)
    task_id = register_hudi_orders(client, tmp_path / "wh")["decision_detail"]["compaction"][
        "task_id"
    ]
    changed: list[tuple[int, str]] = []
    stop = threading.Event()

    def change_once_inflight() -> None:
        while not stop.is_set():
            instants = HudiTimeline(path).instants()
            if any(i.action == "compaction" and i.state == "inflight" for i in instants):
                got = client.put(
                    "/api/v1/catalogs/hlake/tables/lake/orders/policy",
                    json={"compaction": {"min_input_files": 2, "min_small_files": 3}},
                )
                changed.append((got.status_code, got.text[:300]))
                return
            time.sleep(0.01)

    changer = threading.Thread(target=change_once_inflight, name="changer", daemon=True)
    changer.start()
    try:
        _, states, runs = run_hudi_pass(
            db_url, tmp_path, {"compaction": task_id}, warm=spark_writers
        )
    finally:
        stop.set()
        changer.join(60)
    run = runs["compaction"]
    assert [code for code, _ in changed] == [200], changed
    timeline = HudiTimeline(path)
    instant = (run.metrics or {})[hudi_compaction.PLANNED]
    assert instant not in {i.requested for i in timeline.completed()}, run.metrics
    assert states["compaction"] == "pending", (states, run.error, run.log_tail)
    assert "stopped before committing" in (run.error or ""), run.error
    assert "policy changed since this task was planned" in (run.error or ""), run.error
    assert [(i.requested, i.state) for i in timeline.pending()] == [(instant, "requested")]
    assert (run.metrics or {})["undo"]["rolled_back_inflight"] == instant, run.metrics
    assert not list(table.rglob(f"*_{instant}.parquet"))
    assert digest(path) == rows_before


def test_a_compaction_that_fails_after_writing_leaves_nothing_pending(
    client: TestClient,
    db_url: str,
    hudi_tables: HudiTables,
    spark_writers: SparkWriters,
    tmp_path: Path,
) -> None:
    """The compaction fails once it has written its files, before its check and commit (the
    `fail-before-commit` failpoint: as a lost executor or a cancelled job would): its
    inflight instant is rolled back, its files deleted and its plan requested again (the
    retry executes it), not left inflight, where it kept its file groups from being
    compacted again."""
    table = tmp_path / "wh" / "lake" / "orders"
    shutil.copytree(hudi_tables.mor_logs, table)
    path = str(table)
    rows_before = digest(path)
    task_id = register_hudi_orders(client, tmp_path / "wh")["decision_detail"]["compaction"][
        "task_id"
    ]
    _, states, runs = run_hudi_pass(
        db_url,
        tmp_path,
        {"compaction": task_id},
        warm=spark_writers,
        failpoint="fail-before-commit",
        failpoints_enabled=True,
    )
    run = runs["compaction"]
    assert states["compaction"] == "pending", (states, run.error)  # to be retried
    assert "failed after writing its files" in (run.error or ""), run.error
    instant = (run.metrics or {})[hudi_compaction.PLANNED]
    assert (run.metrics or {})["undo"]["rolled_back_inflight"] == instant, run.metrics
    timeline = HudiTimeline(path)
    assert [(i.requested, i.state) for i in timeline.pending()] == [(instant, "requested")]
    assert not list(table.rglob(f"*_{instant}.parquet"))
    assert digest(path) == rows_before


def test_why_not_copy_on_write_a_foreign_plan_or_a_writer_that_compacts(
    hudi_tables: HudiTables, tmp_path: Path
) -> None:
    """The verdict's reasons for leaving a table alone, on real tables (no JVM here)."""
    section = CompactionPolicy(min_input_files=2, min_small_files=2)

    def why(path: str) -> str:
        found = hudi_compaction.verdict(section, read_facts(path), HudiTimeline(path), set())
        assert not found.needed
        return found.reason

    assert why(hudi_tables.cow).startswith("copy-on-write")
    assert "planned by someone else and is pending" in why(hudi_tables.mor)
    inline = tmp_path / "inline"
    shutil.copytree(hudi_tables.mor_logs, inline)
    with open(inline / ".hoodie" / "hoodie.properties", "a") as props:
        props.write("hoodie.compact.inline=true\n")
    assert "hoodie.compact.inline=true: the writer compacts" in why(str(inline))
    due = hudi_compaction.verdict(
        section, read_facts(hudi_tables.mor_logs), HudiTimeline(hudi_tables.mor_logs), set()
    )
    assert due.needed and due.metrics["max_log_files_per_slice"] == 2
