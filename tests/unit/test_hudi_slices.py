"""A partition's latest file slices from its folder (`formats.hudi.slices`) against hudi-rs'
own view of the whole table, on a small table written here (table version 6, JSON
instants, empty files: names and the timeline are what both read)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lakewarden.formats.hudi import slices
from lakewarden.formats.hudi.facts import full_slices
from lakewarden.formats.hudi.incremental import _comparable
from lakewarden.formats.hudi.timeline import HudiTimeline

T1, T2, T3, T4, T5 = (f"2026010100000{n}000" for n in range(1, 6))
PROPS = {
    "hoodie.table.name": "t",
    "hoodie.table.type": "MERGE_ON_READ",
    "hoodie.table.version": "6",
    "hoodie.timeline.layout.version": "1",
    "hoodie.table.partition.fields": "day",
    "hoodie.table.recordkey.fields": "id",
    "hoodie.datasource.write.hive_style_partitioning": "true",
    "hoodie.table.base.file.format": "PARQUET",
}


SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "t_record",
        "fields": [{"name": "id", "type": "long"}, {"name": "day", "type": "int"}],
    }
)


def _commit(root: Path, instant: str, action: str, meta: dict[str, Any]) -> None:
    meta = {**meta, "extraMetadata": {"schema": SCHEMA}}  # hudi-rs reads the schema
    for state in ("requested", "inflight"):
        (root / ".hoodie" / f"{instant}.{action}.{state}").write_text("")
    (root / ".hoodie" / f"{instant}.{action}").write_text(json.dumps(meta))


def _table(root: Path) -> None:
    (root / ".hoodie").mkdir(parents=True)
    (root / ".hoodie" / "hoodie.properties").write_text(
        "".join(f"{k}={v}\n" for k, v in PROPS.items())
    )
    for day in ("day=1", "day=2"):
        (root / day).mkdir()
        (root / day / ".hoodie_partition_metadata").write_text("partitionDepth=1\n")
    files = {
        "day=1": [
            f"a-0_0-1-0_{T1}.parquet",  # rewritten at T3: the T3 slice is latest
            f"a-0_0-2-0_{T3}.parquet",
            f".a-0_{T1}.log.1_0-1-1",  # the T1 slice's log: not the latest
            f".a-0_{T3}.log.1_0-3-1",  # the latest slice's logs
            f".a-0_{T3}.log.2_0-4-1",
            f".a-0_0-2-0_{T3}.parquet.crc",  # checksums: neither
            f"..a-0_{T3}.log.1_0-3-1.crc",
            f"b-0_0-1-0_{T1}.parquet",  # replaced at T4
            f"f-0_0-5-0_{T4}.parquet",  # what replaced it
            f"c-0_0-1-0_{T5}.parquet",  # an inflight write after the last completed one
        ],
        "day=2": [f"e-0_0-1-0_{T1}.parquet", f".e-0_{T2}.log.1_0-2-2"],
    }
    for day, names in files.items():
        for n, name in enumerate(names):
            (root / day / name).write_bytes(b"x" * n if ".log." in name else b"")
    stat = {"fileId": "a-0", "path": "day=1/x", "numWrites": 1}
    _commit(root, T1, "deltacommit", {"partitionToWriteStats": {"day=1": [stat]}})
    _commit(root, T2, "deltacommit", {"partitionToWriteStats": {"day=2": [stat]}})
    _commit(root, T3, "deltacommit", {"partitionToWriteStats": {"day=1": [stat]}})
    _commit(
        root,
        T4,
        "replacecommit",
        {
            "partitionToWriteStats": {"day=1": [{**stat, "fileId": "f-0"}]},
            "partitionToReplaceFileIds": {"day=1": ["b-0"]},
        },
    )
    (root / ".hoodie" / f"{T5}.deltacommit.requested").write_text("")


def test_a_partitions_folder_gives_hudi_rs_slices(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _table(root)
    timeline = HudiTimeline(str(root))
    done = timeline.completed()
    replaced = set()
    for i in done:
        if i.action == "replacecommit":
            replaced |= slices.replaced_by(timeline.read_instant(i))
    view = slices.basis(timeline, done, frozenset(replaced), None)
    mine = {
        p: found
        for p in ("day=1", "day=2", "day=3")
        if (found := slices.partition_slices(timeline, p, view)) is not None
    }
    full = full_slices(timeline)
    assert _comparable(mine) == _comparable(full)
    # a-0 at T3 and f-0; b-0 replaced, c-0 not committed
    assert sorted(mine["day=1"].log_files_per_slice) == [0, 2]


@pytest.mark.parametrize(
    "name",
    [f".a-0_{T3}.cdc.1_0-3-1", f".d-0_{T2}.log.1_0-2-1", f"g-0_0-1-0_{T1}.orc"],
    ids=["cdc", "log-only-group", "orc"],
)
def test_what_hudi_rs_reads_otherwise_is_left_to_it(tmp_path: Path, name: str) -> None:
    root = tmp_path / "t"
    _table(root)
    (root / "day=1" / name).write_bytes(b"")
    timeline = HudiTimeline(str(root))
    view = slices.basis(timeline, timeline.completed(), frozenset(), None)
    with pytest.raises(slices.NotListable):
        slices.partition_slices(timeline, "day=1", view)
