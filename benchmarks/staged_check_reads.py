"""How long the staged Delta check (`formats.delta.staged_rewrite.sums`) takes to sum
small files on an object store: READERS files read at once and up to CHUNK_BYTES of them
hashed per DuckDB query, against one file at a time and a query each (what it did before),
alternated in one process on S3Proxy (benchmarks/s3_server.py: a local JVM, no added
latency; a real store's round trips favour reading several at once more). Both give the
same sums. Prints the medians and their ratio.

    python -m benchmarks.staged_check_reads [FILES]     # 200 by default, n=5
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.s3_server import free_port, serve_s3
from lakewarden.formats.delta import staged_rewrite
from lakewarden.formats.delta.staged_rewrite import Column, ParquetInput, sums
from lakewarden.object_store import filesystem

REPEATS = 5
ROWS = 500  # per file


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with (
        tempfile.TemporaryDirectory(prefix="lw-s3-") as root,
        serve_s3(Path(root), free_port()) as s3,
    ):
        props = {
            "s3.endpoint": s3.endpoint,
            "s3.access-key-id": s3.access_key,
            "s3.secret-access-key": s3.secret_key,
            "s3.region": "us-east-1",
        }
        fs, base = filesystem(props, f"{s3.bucket('lw-check-reads')}/t")
        files = []
        for i in range(count):
            rows = pa.table(
                {
                    "id": pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64()),
                    "v": [f"v{j}" for j in range(ROWS)],
                }
            )
            path = f"{base}/f{i}.parquet"
            pq.write_table(rows, path, filesystem=fs)
            # every third file with two deleted rows, as deletion vectors leave them; its
            # size as its add action says
            size = fs.get_file_info(path).size
            files.append(ParquetInput(path, (1, 2) if i % 3 == 0 else (), size=size))
        columns = [Column("id"), Column("v")]
        batched, one_by_one = [], []
        defaults = staged_rewrite.READERS, staged_rewrite.CHUNK_BYTES
        load = os.getloadavg()[0]
        for _ in range(REPEATS):
            staged_rewrite.READERS, staged_rewrite.CHUNK_BYTES = 1, 1
            started = time.perf_counter()
            before = sums(files, columns, fs)
            one_by_one.append(time.perf_counter() - started)
            staged_rewrite.READERS, staged_rewrite.CHUNK_BYTES = defaults
            started = time.perf_counter()
            after = sums(files, columns, fs)
            batched.append(time.perf_counter() - started)
            assert after == before, (after, before)
    a, b = statistics.median(one_by_one), statistics.median(batched)
    print(
        f"{count} files on S3Proxy, n={REPEATS} alternated, load {load:.1f} -> "
        f"{os.getloadavg()[0]:.1f}: one at a time {a:.2f} s, {defaults[0]} at once in "
        f"chunks {b:.2f} s: {a / b:.1f}x faster, the same sums"
    )


if __name__ == "__main__":
    main()
