"""The chart's catalog hook (charts/lakewarden/files/register_catalogs.py) against the real
API: a values entry is registered, and on the next upgrade brought up to date."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi.testclient import TestClient

from lakewarden.runtime import Runtime

SCRIPT = Path(__file__).resolve().parents[2] / "charts/lakewarden/files/register_catalogs.py"


def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("register_catalogs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_registers_then_updates(
    rt: Runtime, client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a secret: only its reference is stored
    monkeypatch.setenv("LW_SECRET_HOOK_CATALOG_URL", rt.db_url)
    entry: dict[str, Any] = {
        "name": "sales",
        "type": "jdbc",
        "properties": {
            "uri": {"env": "LW_SECRET_HOOK_CATALOG_URL"},
            "warehouse": tmp_path.as_uri(),
        },
        "pollIntervalS": 45,
    }
    register = hook().register
    assert register(client, entry) == "registered"
    assert client.get("/api/v1/catalogs/sales").json()["poll_interval_s"] == 45
    assert register(client, {**entry, "pollIntervalS": 90, "pollConcurrency": 2}) == "updated"
    got = client.get("/api/v1/catalogs/sales").json()
    assert (got["poll_interval_s"], got["poll_concurrency"]) == (90, 2)
    assert got["properties"]["uri"] == {"env": "LW_SECRET_HOOK_CATALOG_URL"}


def test_a_refusal_fails_the_hook(client: TestClient) -> None:
    entry = {"name": "bad", "type": "jdbc", "properties": {"uri": "postgresql://u:pw@h/db"}}
    with pytest.raises(SystemExit, match="catalog bad: 422"):
        hook().register(client, entry)  # a password given as a value, not a reference
