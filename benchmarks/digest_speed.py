"""B46: what Delta's and Hudi's post-rewrite validation costs per read (issue 30 goal 3):
a Delta table of `delta_rows` rows (B27's shape plus a timestamp and a nullable column)
read at its version by delta-rs and digested as validation does (`formats.delta.validation
.digest`: DuckDB's hash summed over the Arrow table), against the same read digested as
the code before did (each row's repr hashed by blake2b in Python, kept here as the
baseline), alternated in one process. Hudi's validation digests hudi-rs' read the same way
(`formats.hudi.validation`)."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from benchmarks.harness import Context, Figure, measuring, ratios

STAMP = pa.timestamp("us", "UTC")


def _write(path: Path, rows: int, files: int) -> None:
    from deltalake import write_deltalake

    per = rows // files
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for f in range(files):
        ids = range(f * per, (f + 1) * per)
        batch = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "x": pa.array([i % 1000 for i in ids], pa.int64()),
                "v": [f"v{i % 977}" for i in ids],
                "ts": pa.array([start + timedelta(seconds=i) for i in ids], STAMP),
                "note": [None if i % 3 else f"n{i}" for i in ids],
            }
        )
        write_deltalake(str(path), batch, mode="append")


def _python_digest(path: str, version: int) -> tuple[int, int]:
    """The code before (formats.digest to 2026-11-27): each row's repr, blake2b in Python."""
    from deltalake import DeltaTable

    table = pa.RecordBatchReader.from_stream(DeltaTable(path, version=version).scan()).read_all()
    columns = sorted(table.column_names)
    total = 0
    for row in table.select(columns).to_pylist():
        text = repr([row[c] for c in columns]).encode()
        total += int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
    return table.num_rows, total % (1 << 64)


def b46(ctx: Context) -> Figure:
    with measuring(
        "B46",
        "Delta/Hudi validation's digest of one read: delta-rs reads a table version, its rows "
        "counted and checksummed (formats.digest: DuckDB's hash over the Arrow table)",
        "the same read hashed row by row in Python (repr + blake2b: the code before), "
        "alternated in the same run",
        "report (issue 30 goal 3: validation <= 1.15x on large rewrites)",
    ) as fig:
        from deltalake import DeltaTable

        from lakewarden.formats.delta.validation import digest

        rows, files = ctx.sizes.delta_rows, ctx.sizes.delta_files
        work = Path(tempfile.mkdtemp(prefix="b46-", dir=ctx.work_dir))
        try:
            _write(work / "t", rows, files)
            path = str(work / "t")
            version = DeltaTable(path).version()
            found = digest(path, version)  # warm both: the first scan pays delta-rs' start
            assert found.rows == rows and _python_digest(path, version)[0] == rows
            timed = ratios(
                ctx.repeats,
                lambda: digest(path, version),
                lambda: _python_digest(path, version),
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
        fig.ratio, fig.ratio_label = timed["speedup"], "Python per-row digest / DuckDB digest time"
        fig.values.update(
            rows=rows,
            files=files,
            duckdb_s=timed["subject_s"],
            python_s=timed["baseline_s"],
            rows_per_s=round(rows / timed["subject_s"].median),
        )
    return fig
