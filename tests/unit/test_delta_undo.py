"""A Delta job's undo (`jobs.delta.undo`) restores only when the job's commit is the table's
newest: after another writer's commit a RESTORE would undo theirs too, so nothing is
restored and the answer says which version to restore to (the alert's text). An
operator's rollback (delta-rs) of a table delta-rs cannot write is refused, naming
Spark's RESTORE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakewarden.catalogs.catalog import TableRef
from lakewarden.formats.delta.log_files import clustering_columns
from lakewarden.formats.delta.restore import RestoreRefused, restore_to
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.jobs.delta import undo
from lakewarden.jobs.execute import Job


def test_a_writer_after_the_jobs_commit_means_no_restore(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    for i in range(4):  # versions 0-3: say the job committed 2, a writer 3
        write_deltalake(path, pa.table({"id": [i]}), mode="append")
    job = Job(7, 1, "compaction", "dlake", TableRef("lake", "t"), {"path": path})
    spark: Any = None  # never reached: nothing is restored
    done = undo(spark, job, path, 2)
    assert done == {
        "restored": False,
        "to_version": 1,
        "how": f"RESTORE TABLE delta.`{path}` TO VERSION AS OF 1",
        "why": "versions 3..3 were committed after the job's 2",
    }
    # a job of two commits (OPTIMIZE 1, REORG 2): back to before the first
    assert undo(spark, job, path, 2, first=1)["to_version"] == 0


def test_a_table_delta_rs_cannot_write_is_refused_naming_sparks_restore(tmp_path: Path) -> None:
    """Liquid clustering's writer features (as Delta 3.3.3 writes them): delta-rs reads the
    table but refuses to commit to it; the operator's rollback says so and names Spark's
    RESTORE, never a conflict to retry."""
    path = tmp_path / "clustered"
    write_deltalake(str(path), pa.table({"id": [0]}))
    write_deltalake(str(path), pa.table({"id": [1]}), mode="append")
    protocol = {
        "protocol": {
            "minReaderVersion": 1,
            "minWriterVersion": 7,
            "writerFeatures": ["domainMetadata", "clustering", "appendOnly", "invariants"],
        }
    }
    domain = {
        "domainMetadata": {
            "domain": "delta.clustering",
            "configuration": json.dumps({"clusteringColumns": [["id"]]}),
            "removed": False,
        }
    }
    info = {"commitInfo": {"timestamp": 1795650825408, "operation": "CLUSTER BY"}}
    log = path / "_delta_log" / f"{2:020d}.json"
    log.write_text("".join(json.dumps(a) + "\n" for a in (info, protocol, domain)))
    timeline = DeltaTimeline(str(path))
    assert clustering_columns(timeline, None) == ["id"]
    with pytest.raises(RestoreRefused) as refused:
        restore_to(timeline, 1)
    said = str(refused.value)
    assert "ClusteredTable" in said and f"RESTORE TABLE delta.`{path}` TO VERSION AS OF 1" in said
    assert DeltaTimeline(str(path)).versions() == [0, 1, 2]  # nothing committed
