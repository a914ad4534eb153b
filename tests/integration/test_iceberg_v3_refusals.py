"""Iceberg format v3 tables lakewarden cannot read are refused clearly (issue 32 §2): a
table with a `variant` column (pyiceberg 0.12 does not know the type, so its metadata
does not load) is not registered, with a 422 that says why, never a 500."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from urllib.parse import urlparse

from fastapi.testclient import TestClient
from helpers import append_batches, make_table
from sqlalchemy import text

from lakewarden.runtime import Runtime


def _as_v3_with_a_variant(rt: Runtime, namespace: str, name: str) -> None:
    """Rewrite the table's metadata as format v3 with a `variant` column (what Spark 4 or
    Iceberg's Java API would write), and point the JDBC catalog at it."""
    table = rt.catalog.load_table(f"{namespace}.{name}")
    old = table.metadata_location
    meta = json.loads(Path(urlparse(old).path).read_text())
    meta["format-version"] = 3
    meta["next-row-id"] = 0
    last = meta["last-column-id"] + 1
    for schema in meta["schemas"]:
        schema["fields"].append(
            {"id": last, "name": "payload", "required": False, "type": "variant"}
        )
    meta["last-column-id"] = last
    new = old.rsplit("/", 1)[0] + f"/99999-{uuid.uuid4()}.metadata.json"
    Path(urlparse(new).path).write_text(json.dumps(meta))
    with rt.catalog.engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(
            text(
                "UPDATE iceberg_tables SET metadata_location = :new, "
                "previous_metadata_location = :old WHERE table_namespace = :ns "
                "AND table_name = :name"
            ),
            {"new": new, "old": old, "ns": namespace, "name": name},
        )


def test_a_v3_table_with_a_variant_column_is_refused_with_the_reason(
    client: TestClient, rt: Runtime
) -> None:
    append_batches(make_table(rt, "v3variant", "events", partitioned=False), 1)
    _as_v3_with_a_variant(rt, "v3variant", "events")
    r = client.post("/api/v1/tables", json={"namespace": "v3variant", "name": "events"})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "v3variant.events" in detail and "variant" in detail and "pyiceberg 0.12" in detail
    assert client.get("/api/v1/tables/v3variant/events").status_code == 404  # not managed
