"""The compose stack's writer (scripts/demo_writer.py) against a real catalog and API."""

from __future__ import annotations

from fastapi.testclient import TestClient

from lakewarden.runtime import Runtime
from scripts import demo_writer


def test_writer_creates_registers_and_commits_small_files(rt: Runtime, client: TestClient) -> None:
    table = demo_writer.ensure_table(rt.catalog)
    assert demo_writer.ensure_table(rt.catalog).name() == table.name()  # a rerun reuses it
    assert demo_writer.register(client, min_small_files=5) == "registered"
    assert demo_writer.register(client, min_small_files=5) == "already managed"
    table = demo_writer.write_commits(table, commits=5, rows=10)
    assert demo_writer.data_files(table) == 5
    table = demo_writer.write_commits(table, commits=1, rows=10)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(60))
    managed = client.get(f"/api/v1/tables/{demo_writer.NAMESPACE}/{demo_writer.NAME}")
    assert managed.status_code == 200, managed.json()
