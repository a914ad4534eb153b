"""A Delta job's undo (`jobs.delta.undo`) restores only when the job's commit is the table's
newest: after another writer's commit a RESTORE would undo theirs too, so nothing is
restored and the answer says which version to restore to (the alert's text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from lakewarden.catalogs.catalog import TableRef
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
