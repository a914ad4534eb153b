"""A writer for the docker compose stack: creates `demo.events` in the JDBC catalog, has
lakewarden manage it, then commits many small files with pyiceberg, so that the stack has
something to compact. Run from the host:

    docker compose run --rm writer                  # or: docker compose up (runs it once)
    docker compose run --rm writer --commits 60 --wait 0

It runs in the lakewarden image (same settings, LAKEWARDEN_*), mints itself an admin API
token with `lakewarden token create` (the bootstrap path: it can reach the database) and
registers the table through the API (LAKEWARDEN_API_URL, default http://api:8080). It then
waits, at most --wait seconds, for a compaction to bring the table's file count down.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

import httpx
import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

NAMESPACE, NAME = "demo", "events"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "amount", DoubleType(), required=False),
)
ARROW = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64())])
REGIONS = ("emea", "amer", "apac", "latam")


def ensure_table(catalog: Catalog) -> Table:
    catalog.create_namespace_if_not_exists(NAMESPACE)
    return catalog.create_table_if_not_exists(f"{NAMESPACE}.{NAME}", schema=SCHEMA)


def register(api: httpx.Client, min_small_files: int) -> str:
    """Have lakewarden manage the table (compaction once it holds that many small files)."""
    policy = {"compaction": {"min_small_files": min_small_files}}
    r = api.post("/api/v1/tables", json={"namespace": NAMESPACE, "name": NAME, "policy": policy})
    if r.status_code == 409:  # a previous run registered it
        return "already managed"
    r.raise_for_status()
    return "registered"


def write_commits(table: Table, commits: int, rows: int = 100) -> Table:
    """`commits` appends, each one small data file."""
    snapshot = table.current_snapshot()
    start = int(snapshot.summary.get("total-records") or 0) if snapshot and snapshot.summary else 0
    for c in range(commits):
        ids = list(range(start + c * rows, start + (c + 1) * rows))
        batch = {
            "id": ids,
            "region": [REGIONS[i % len(REGIONS)] for i in ids],
            "amount": [i / 100 for i in ids],
        }
        table.append(pa.Table.from_pydict(batch, schema=ARROW))
    return table.refresh()


def data_files(table: Table) -> int:
    return len(list(table.refresh().scan().plan_files()))


def admin_token() -> str:
    """A one-day admin token, minted in the database (`lakewarden token create`)."""
    out = subprocess.run(
        ["lakewarden", "token", "create", "--admin", "--name", "writer", "--expires-days", "1"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().splitlines()[-1]


def wait_for_api(api: httpx.Client, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if api.get("/readyz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"the API at {api.base_url} was not ready within {timeout_s:.0f}s")
        time.sleep(2)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--commits", type=int, default=40, help="small commits to write")
    p.add_argument("--min-small-files", type=int, default=20, help="the compaction trigger")
    p.add_argument("--wait", type=float, default=600, help="seconds to wait for compaction")
    return p


def main(argv: list[str] | None = None) -> int:
    from lakewarden.runtime import make_runtime

    args = build_parser().parse_args(argv)

    url = os.environ.get("LAKEWARDEN_API_URL", "http://api:8080")
    headers: dict[str, Any] = {"Authorization": f"Bearer {admin_token()}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
        wait_for_api(api, 300)
        table = ensure_table(make_runtime("writer").catalog)
        print(f"{NAMESPACE}.{NAME}: {register(api, args.min_small_files)}", flush=True)
        table = write_commits(table, args.commits)
        before = data_files(table)
        print(f"wrote {args.commits} commits: {before} data files", flush=True)
        deadline = time.monotonic() + args.wait
        while time.monotonic() < deadline:
            now = data_files(table)
            if now < before:
                print(f"compacted: {before} -> {now} data files", flush=True)
                return 0
            time.sleep(5)
    if args.wait:
        print(f"no compaction within {args.wait:.0f}s: see `docker compose logs scheduler`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
