"""Merge-on-read compaction through Hudi's own procedures (lakewarden.formats.hudi.jobs) in
a Hudi-family Spark session, validated by hudi-rs: the rows and their checksum at the last
deltacommit equal those after the compaction, and the latest file slices have no log
files left. A compaction someone else planned is left pending."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import HudiTables
from spark_writer import SparkWriters

from lakewarden.formats.hudi.facts import read_facts
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.formats.hudi.validation import digest


def test_compaction_merges_log_files_and_keeps_every_row(
    hudi_tables: HudiTables, spark_writers: SparkWriters, tmp_path: Path
) -> None:
    fresh, foreign = tmp_path / "fresh", tmp_path / "foreign"
    shutil.copytree(hudi_tables.mor, foreign)  # its compaction was planned by the fixture
    foreign_plan = HudiTimeline(str(foreign)).pending()
    part = {"path": fresh.as_uri(), "type": "MERGE_ON_READ", "partitioned": True}
    runs = spark_writers.run(
        "hudi",
        [
            {**part, "op": "insert", "ids": [0, 200], "value": 0},
            {**part, "op": "upsert", "ids": [0, 50], "value": 1},
            {**part, "op": "upsert", "ids": [25, 75], "value": 2},
            {"path": str(fresh), "compact": True},
            {"path": str(foreign), "compact": True},
        ],
    )
    ours, theirs = runs
    timeline = HudiTimeline(str(fresh))
    commits = timeline.completed()
    assert ours["completed"] and commits[-1].requested == ours["instant"]
    assert commits[-1].action == "commit"  # a compaction completes as a commit
    last_delta = commits[-2]
    assert last_delta.action == "deltacommit"
    before, after = digest(str(fresh), last_delta.requested), digest(str(fresh))
    assert before == after and after.rows == 200
    assert read_facts(str(fresh)).log_files == 0  # the latest slices are base files only
    assert timeline.pending() == []
    # The plan someone else made: never run by lakewarden (Hudi's schedule answers with it,
    # and lakewarden's own schedule found nothing more to plan); it stays pending.
    assert theirs == {"instant": None, "completed": False}
    assert HudiTimeline(str(foreign)).pending() == foreign_plan
