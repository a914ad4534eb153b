"""Real Delta tables for the tests, written by delta-rs (`write_deltalake`): no JVM, a few
milliseconds each."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake


def rows(ids: range, day: str) -> pa.Table:
    return pa.table({"id": list(ids), "day": [day] * len(ids), "v": [f"x{i}" for i in ids]})


def write_orders(path: Path) -> DeltaTable:
    """Versions 0-2, partitioned by `day`: a create, an append that carries a userMetadata
    and lakewarden's job mark (delta-rs writes custom metadata as commitInfo keys), and a
    delete that rewrites a file; then a checkpoint at version 2."""
    write_deltalake(str(path), rows(range(0, 30), "d1"), partition_by=["day"])
    write_deltalake(
        str(path),
        rows(range(30, 40), "d2"),
        mode="append",
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": "nightly load", "lakewarden.task-id": "41"}
        ),
    )
    table = DeltaTable(str(path))
    table.delete("id < 5")
    table.create_checkpoint()
    return table


def write_unreadable(path: Path, feature: str = "futureFeature") -> None:
    """A Delta table whose protocol asks for a reader feature no reader knows."""
    log = path / "_delta_log"
    log.mkdir(parents=True)
    schema = {
        "type": "struct",
        "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}],
    }
    actions = [
        {"commitInfo": {"timestamp": 1795650825408, "operation": "CREATE TABLE"}},
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": [feature],
                "writerFeatures": [feature],
            }
        },
        {
            "metaData": {
                "id": "t",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [],
                "configuration": {},
                "createdTime": 1795650825408,
            }
        },
    ]
    (log / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def parquet_on_disk(path: Path) -> dict[str, int]:
    """Every data file under the table (not the log), relative path -> bytes: the disk's
    own answer, to check health against."""
    return {
        str(p.relative_to(path)): p.stat().st_size
        for p in path.rglob("*.parquet")
        if "_delta_log" not in p.parts
    }
