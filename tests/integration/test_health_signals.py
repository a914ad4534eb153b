"""The health signals operators of peer tools read, on real pyiceberg-written tables and the
API: each checked against what pyiceberg lists of the same table, independently of
`lakewarden.metadata` (file-size buckets from `inspect.files()`)."""

from __future__ import annotations

import os

import pyarrow as pa
from fastapi.testclient import TestClient
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from lakewarden.runtime import Runtime

MiB = 1024 * 1024
BLOBS = pa.schema(
    [pa.field("region", pa.string(), nullable=False), pa.field("payload", pa.binary())]
)
BOUNDS = [0, MiB, 8 * MiB, 32 * MiB, 128 * MiB, 512 * MiB]


def _blobs_table(rt: Runtime, name: str) -> Table:
    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table(f"sales.{name}", schema=BLOBS)
    with table.update_spec() as spec:
        spec.add_field("region", IdentityTransform(), "region")
    return rt.catalog.load_table(f"sales.{name}")


def _append(table: Table, region: str, payload_bytes: int, rows: int = 1) -> Table:
    """One file in `region` of about `payload_bytes` (random: parquet cannot shrink it)."""
    each = payload_bytes // rows
    table.append(
        pa.table(
            {"region": [region] * rows, "payload": [os.urandom(each) for _ in range(rows)]},
            schema=BLOBS,
        )
    )
    return table.refresh()


def _register(client: TestClient, name: str) -> None:
    r = client.post("/api/v1/tables", json={"namespace": "sales", "name": name, "policy": {}})
    assert r.status_code == 201, r.text


def _bucket_of(size: int) -> int:
    return max(i for i, lo in enumerate(BOUNDS) if size >= lo)


def test_file_size_buckets_match_the_files_pyiceberg_lists(client: TestClient, rt: Runtime) -> None:
    table = _blobs_table(rt, "blobs")
    for region, size in [("a", 1000), ("a", 3 * MiB), ("a", 2000), ("b", 10 * MiB)]:
        table = _append(table, region, size)
    _register(client, "blobs")

    h = client.get("/api/v1/tables/sales/blobs/health").json()
    files = table.inspect.files().to_pylist()  # pyiceberg's own listing of the live files
    sizes: dict[str, list[int]] = {r["partition"]["region"]: [] for r in files}
    for r in files:
        sizes[r["partition"]["region"]].append(r["file_size_in_bytes"])

    def expected(group: list[int]) -> list[tuple[int, int]]:
        counts = [(0, 0)] * 6
        for size in group:
            i = _bucket_of(size)
            counts[i] = (counts[i][0] + 1, counts[i][1] + size)
        return counts

    def got(buckets: list[dict[str, int]]) -> list[tuple[int, int]]:
        return [(b["files"], b["bytes"]) for b in buckets]

    everything = [s for group in sizes.values() for s in group]
    assert got(h["file_size_buckets"]) == expected(everything)
    # the table spans three buckets: <1 MB (2 files), 1-8 MB and 8-32 MB (1 each)
    assert [b["files"] for b in h["file_size_buckets"]] == [2, 1, 1, 0, 0, 0]
    assert h["files_over_1gb"] == 0
    for p in h["partitions"]:
        assert got(p["file_size_buckets"]) == expected(sizes[p["partition"]["region"]])
        assert sum(b["files"] for b in p["file_size_buckets"]) == p["data_files"]
