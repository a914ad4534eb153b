"""The health signals operators of peer tools read, on real pyiceberg-written tables and the
API: each checked against what pyiceberg lists of the same table, independently of
`lakewarden.metadata` (file-size buckets from `inspect.files()`)."""

from __future__ import annotations

import itertools
import os
import statistics
import time
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
from fastapi.testclient import TestClient
from helpers import SCHEMA, append_batches, current, make_table
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


def test_commits_skew_and_metadata_files_match_pyiceberg(client: TestClient, rt: Runtime) -> None:
    table = append_batches(make_table(rt, name="orders"), 5)  # a file in a and in b each
    table = append_batches(table, 2, regions=("a",))  # a: 7 files, b: 5
    with table.transaction() as tx:  # a commit without a snapshot: one more metadata.json
        tx.set_properties({"write.metadata.previous-versions-max": "3"})
    table = table.refresh()
    _register(client, "orders")

    h = client.get("/api/v1/tables/sales/orders/health").json()
    assert h["storage"] is None  # not listed unless asked

    snaps = table.inspect.snapshots().to_pylist()
    assert len(snaps) == 7 and {s["operation"] for s in snaps} == {"append"}
    c = h["commits"]
    assert (c["last_24h"], c["last_7d"], c["daily_7d"]) == (7, 7, [7, 0, 0, 0, 0, 0, 0])
    assert c["per_day_7d"] == 1.0
    assert c["data_commits_last_hour"] == 7
    times = sorted(s["committed_at"].timestamp() for s in snaps)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert c["median_interval_s_last_hour"] == round(statistics.median(gaps), 1)
    # 7 appends seconds apart, the newest just now: the rule reads a streaming writer
    assert c["streaming_writer_active"] is True

    parts = {
        r["partition"]["region"]: r for r in table.inspect.partitions().to_pylist()
    }  # pyiceberg's own per-partition sums
    skew = h["partition_skew"]
    assert skew["partitions"] == len(parts) == 2
    by_bytes = {k: p["total_data_file_size_in_bytes"] for k, p in parts.items()}
    busiest = max(by_bytes, key=lambda k: by_bytes[k])
    assert skew["bytes"]["busiest"] == by_bytes[busiest]
    assert skew["bytes"]["busiest_partition"] == {"region": busiest}
    assert skew["bytes"]["median"] == statistics.median(by_bytes.values())
    assert skew["bytes"]["ratio"] == round(
        by_bytes[busiest] / statistics.median(by_bytes.values()), 2
    )
    files = {k: p["file_count"] for k, p in parts.items()}
    assert files == {"a": 7, "b": 5}
    assert skew["data_files"] == {
        "median": 6,
        "busiest": 7,
        "busiest_partition": {"region": "a"},
        "ratio": round(7 / 6, 2),
    }

    log = table.inspect.metadata_log_entries().to_pylist()  # the current one included
    m = h["metadata_files"]
    assert m["files"] == len(log) == 4  # the log keeps 3 previous ones
    assert (m["delete_after_commit"], m["previous_versions_max"]) == (False, 3)
    assert m["bytes"] is None and m["current_bytes"] is None


def _local(location: str) -> Path:
    parsed = urlparse(location)
    return Path(parsed.path if parsed.scheme == "file" else location)


def test_storage_finds_unreferenced_bytes_and_bytes_only_old_snapshots_hold(
    client: TestClient, rt: Runtime
) -> None:
    table = append_batches(make_table(rt, name="orders"), 4)
    before = table.inspect.files().to_pylist()  # 8 files the overwrite below replaces
    before_overwrite = current(table).snapshot_id
    table.overwrite(pa.table({"id": [1], "region": ["a"], "amount": [1.0]}, schema=SCHEMA))
    table = table.refresh()
    root = _local(table.location())
    stray = root / "data" / "region=a" / "stray.parquet"  # a writer's leftover, say
    stray.write_bytes(b"x" * 5000)
    old_stray = root / "data" / "old-stray.bin"
    old_stray.write_bytes(b"y" * 300)
    four_days_ago = time.time() - 4 * 86400
    os.utime(old_stray, (four_days_ago, four_days_ago))
    # hidden names, which Iceberg's orphan removal never lists either
    (root / "data" / ".stray.parquet.crc").write_bytes(b"c" * 10)
    (root / "data" / "_temporary").mkdir()
    (root / "data" / "_temporary" / "part-0.parquet").write_bytes(b"t" * 10)
    _register(client, "orders")

    r = client.get("/api/v1/tables/sales/orders/health", params={"storage": "true"})
    assert r.status_code == 200, r.text
    h = r.json()
    s = h["storage"]

    # independently: every file on disk, less every file pyiceberg says the metadata reaches
    on_disk = {
        p: p.stat().st_size
        for p in root.rglob("*")
        if p.is_file() and not any(n[0] in "._" for n in p.relative_to(root).parts)
    }
    reached = {_local(e["file"]) for e in table.inspect.metadata_log_entries().to_pylist()}
    reached |= {_local(x["manifest_list"]) for x in table.inspect.snapshots().to_pylist()}
    reached |= {_local(x["path"]) for x in table.inspect.all_manifests().to_pylist()}
    reached |= {_local(x["file_path"]) for x in table.inspect.all_files().to_pylist()}
    unreferenced = set(on_disk) - reached
    assert unreferenced == {stray, old_stray}
    assert (s["listed_files"], s["listed_bytes"]) == (len(on_disk), sum(on_disk.values()))
    assert (s["unreferenced_files"], s["unreferenced_bytes"]) == (2, 5300)
    # only the one older than clean's orphan_min_age_hours (72 h by default) is removable
    assert (s["unreferenced_older_files"], s["unreferenced_older_bytes"]) == (1, 300)
    assert s["orphan_min_age_hours"] == 72 and s["capped"] is False

    # the files the overwrite replaced: only the snapshots before it hold them now
    live_now = {x["file_path"] for x in table.inspect.files().to_pylist()}
    held = {x["file_path"]: x["file_size_in_bytes"] for x in table.inspect.all_files().to_pylist()}
    old_only = {p: size for p, size in held.items() if p not in live_now}
    assert old_only == {f["file_path"]: f["file_size_in_bytes"] for f in before}
    assert s["old_snapshots_only_files"] == len(before) == 8
    assert s["old_snapshots_only_bytes"] == sum(old_only.values())

    log = [_local(e["file"]) for e in table.inspect.metadata_log_entries().to_pylist()]
    m = h["metadata_files"]
    assert m["files"] == len(log)
    assert m["bytes"] == sum(p.stat().st_size for p in log)
    assert m["current_bytes"] == _local(table.metadata_location).stat().st_size

    # a tag on a snapshot before the overwrite holds its files: no longer only old snapshots'
    table.manage_snapshots().create_tag(before_overwrite, "before").commit()
    tagged = client.get("/api/v1/tables/sales/orders/health", params={"storage": "true"})
    assert tagged.json()["storage"]["old_snapshots_only_files"] == 0

    capped = client.get(
        "/api/v1/tables/sales/orders/health", params={"storage": "true", "max_files": 3}
    ).json()["storage"]
    assert (capped["capped"], capped["listed_files"], capped["max_files"]) == (True, 3, 3)
    r = client.get("/api/v1/tables/sales/orders/health", params={"storage": "1", "max_files": 0})
    assert r.status_code == 422 and "max_files" in r.text
