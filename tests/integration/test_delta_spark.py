"""Delta tables Spark wrote, in a Delta-family session (Delta's pinned jars, its extension
beside Iceberg's, `spark_catalog` = DeltaCatalog): deletion vectors counted by health as
Spark wrote them, and a job's mark in `userMetadata` found on its OPTIMIZE commit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from delta_tables import rows
from deltalake import write_deltalake
from spark_writer import SparkWriters

from lakewarden.formats.base import JobMarker, marker_of
from lakewarden.formats.delta.facts import read_facts
from lakewarden.formats.delta.timeline import DeltaTimeline

MiB = 1 << 20


@pytest.mark.spark
def test_deletion_vectors_and_a_marked_optimize_in_a_delta_family_session(
    spark_writers: SparkWriters, tmp_path: Path
) -> None:
    dv, small = tmp_path / "dv", tmp_path / "small"
    for i in range(3):  # three small files in one partition, for OPTIMIZE to merge
        write_deltalake(str(small), rows(range(10 * i, 10 * i + 10), "d1"), mode="append")
    mark = json.dumps({"lakewarden.task-id": "43", "lakewarden.attempt": "1"})
    spark_writers.run(
        "delta",
        [
            {
                "sql": f"CREATE TABLE delta.`{dv}` (id BIGINT, day STRING) USING delta "
                "PARTITIONED BY (day) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
            },
            {
                "sql": f"INSERT INTO delta.`{dv}` "
                "SELECT id, IF(id % 2 = 0, 'a', 'b') FROM range(1000)"
            },
            {"sql": f"DELETE FROM delta.`{dv}` WHERE id % 10 = 0"},
            {"sql": f"OPTIMIZE delta.`{small}`", "user_metadata": mark},
        ],
    )
    timeline = DeltaTimeline(str(dv))
    delete = timeline.since("1", 10).commits[0]
    assert delete.operation == "DELETE" and delete.summary["deletion-vectors-added"] == "2"
    facts = read_facts(timeline, target_file_size=128 * MiB, small_file_ratio=0.75)
    assert facts.reader_features == ["deletionVectors"] and facts.min_reader_version == 3
    assert facts.deletion_vector_files == 2 and facts.deleted_rows == 100  # id % 10 == 0
    assert sum(p.records for p in facts.partitions.values()) == 1000  # still in the files

    optimize = DeltaTimeline(str(small))
    head = optimize.since("2", 10).commits
    assert [c.operation for c in head] == ["OPTIMIZE"]
    assert head[0].summary["files-removed"] == "3" and head[0].summary["files-added"] == "1"
    assert marker_of(head[0].summary) == JobMarker(43, 1)
    found = optimize.find_job_commits(43)
    assert found is not None and found.id == "3"
