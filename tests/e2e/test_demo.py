"""End to end, as a user runs it: `lakewarden demo` with real processes, real Spark commits,
a real Postgres; then the table is read back by pyiceberg's own catalog client."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from sqlalchemy import create_engine, text

from lakewarden.spark.commits import TASK_KEY

pytestmark = pytest.mark.spark


def _rows_checksum(table: Table, snapshot_id: int | None = None) -> tuple[int, int, str]:
    """Files, rows and a checksum of the rows of a snapshot (default: the current one)."""
    scan = table.scan(snapshot_id=snapshot_id)
    data = scan.to_arrow().sort_by([("id", "ascending")])
    digest = hashlib.sha256()
    for row in data.to_pylist():
        digest.update(repr((row["id"], row["region"], row["amount"], row["ts"])).encode())
    return sum(1 for _ in scan.plan_files()), data.num_rows, digest.hexdigest()


def test_demo_compacts_a_real_table_from_commit_events(db_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "LAKEWARDEN_DATABASE_URL": db_url, "LAKEWARDEN_DATA_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "demo", "--json", "--files", "60", "--timeout", "300"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    logs = "\n".join(
        (tmp_path / "logs" / f"demo-{r}.log").read_text()[-3000:]
        for r in ("api", "worker", "scheduler")
        if (tmp_path / "logs" / f"demo-{r}.log").exists()
    )
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n{logs}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # Spark's console noise (its WARN lines at least: the JVM's start always logs some) is
    # in the demo writer's log file, not on the terminal; stdout is the report alone.
    assert re.search(r"\bWARN\b", (tmp_path / "logs" / "demo-spark.log").read_text())
    assert not re.search(r"\bWARN\b", proc.stdout + proc.stderr), proc.stderr[-3000:]
    assert len(proc.stdout.strip().splitlines()) == 1
    assert report["task_state"] == "succeeded"
    assert report["files_before"] > 60 and report["files_after"] < report["files_before"]

    # Independent read-back: pyiceberg's own SQL catalog client on the same catalog.
    catalog = SqlCatalog("lake", uri=db_url, warehouse=(tmp_path / "warehouse").as_uri())
    table = catalog.load_table("demo.clicks")
    # The table as it was just before the task's first commit, from its own history.
    task = str(report["task_id"])
    ours = [s for s in table.snapshots() if s.summary and s.summary.get(TASK_KEY) == task]
    assert ours, "no commit of the compaction task"
    first = min(ours, key=lambda s: s.sequence_number or 0)
    assert first.parent_snapshot_id is not None
    files_before, rows_before, checksum_before = _rows_checksum(table, first.parent_snapshot_id)
    files, rows, checksum = _rows_checksum(table)
    # Computed here, independently of the demo's own fingerprint: the same rows, to the bit.
    assert checksum == checksum_before and rows == rows_before
    assert files_before == report["files_before"]
    assert files == report["files_after"] == 4  # one file per region
    assert rows == report["rows_before"] == report["rows_after"]
    expected_rows = report["commits"] * 2000
    assert rows == expected_rows

    # Nothing lost, nothing done twice: every id written exactly once.
    ids = catalog.load_table("demo.clicks").scan(selected_fields=("id",)).to_arrow()["id"]
    assert sorted(ids.to_pylist()) == list(range(expected_rows))

    engine = create_engine(db_url)
    with engine.connect() as conn:
        decision = conn.execute(
            text(
                "SELECT source, decision, (decision_detail->'compaction'->>'task_id')::bigint "
                "FROM timeline_events WHERE decision = 'task-created'"
            )
        ).one()
        states = conn.execute(
            text("SELECT count(*) FROM tasks WHERE state = 'succeeded' AND kind = 'compaction'")
        ).scalar()
    engine.dispose()
    assert decision[0] in ("notify", "poll") and decision[2] == report["task_id"]
    assert states == 1  # one compaction, not two
