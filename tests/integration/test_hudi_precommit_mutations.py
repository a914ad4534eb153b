"""The power of a Hudi compaction's or clustering's check before its commit
(`formats.hudi.precommit`; issue 30, goals 3 and 5): on a real merge-on-read table
(`hudi_tables.mor_logs`: three partitions, a base file and two log files per slice), the
file slices are rewritten as Hudi would (hudi-rs' merged read of them written as Parquet
base files: a compaction's one per slice; a clustering's one per partition, its slices'
rows sorted), then the output is corrupted in one way; the check reads the written files
and the slices with hudi-rs and compares them per partition. Every corruption is caught;
the faithful output passes. (A
NULL moved to its neighbour column is `tests/unit/test_digest.py`'s: this table has no
NULL.) No JVM of its own: the table is the session's."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import HudiTables

from lakewarden.formats.hudi import precommit

# Per output file: its partition and file id, its rows.
Outputs = dict[tuple[str, str], pa.Table]


def _swap_v(out: Outputs) -> None:
    """The `v` of two rows of one file with different values swapped: the same values."""
    s, t = next(iter(out.items()))
    v = t.column("v").to_pylist()
    j = next(j for j in range(1, len(v)) if v[j] != v[0])
    v[0], v[j] = v[j], v[0]
    out[s] = t.set_column(t.schema.get_field_index("v"), "v", pa.array(v, t.schema.field("v").type))


def _change_v(out: Outputs) -> None:
    s, t = next(iter(out.items()))
    v = t.column("v").to_pylist()
    v[0] += 1
    out[s] = t.set_column(t.schema.get_field_index("v"), "v", pa.array(v, t.schema.field("v").type))


def _drop_row(out: Outputs) -> None:
    s, t = next(iter(out.items()))
    out[s] = t.slice(1)


def _move_partition(out: Outputs) -> None:
    """One partition's rows written into another partition's file (the totals unchanged)."""
    (a, ta), (b, tb) = list(out.items())[:2]
    out[a] = ta.slice(0, 0)
    out[b] = pa.concat_tables([tb, ta.cast(tb.schema)])


MUTATIONS: dict[str, Callable[[Outputs], None] | None] = {
    "none": None,
    "a file dropped": None,  # below: a written file missing
    "a file doubled": None,  # below: a written file written twice
    "a row dropped": _drop_row,
    "a value changed": _change_v,
    "a value moved between rows": _swap_v,
    "a partition's rows moved to another partition": _move_partition,
}


@pytest.mark.parametrize("shape", ["compaction", "clustering"])
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_every_corruption_of_a_rewrites_output_is_caught_before_the_commit(
    hudi_tables: HudiTables, tmp_path: Path, mutation: str, shape: str
) -> None:
    from hudi import HudiTable

    table = tmp_path / "t"
    shutil.copytree(hudi_tables.mor_logs, table)
    path = str(table)
    slices = [
        precommit.Slice(
            s.partition_path,
            s.file_id,
            f"{s.partition_path}/{s.base_file_name}",
            tuple(f"{s.partition_path}/{n}" for n in s.log_file_names),
        )
        for s in HudiTable(path).get_file_slices()
    ]
    assert len({s.partition for s in slices}) == 3 and all(s.logs for s in slices)
    before = precommit.input_digests(path, slices)
    reader = HudiTable(path).create_file_group_reader_with_options()
    out: Outputs = {
        (s.partition, s.file_id): pa.Table.from_batches(
            [reader.read_file_slice_from_paths(str(s.base), list(s.logs))]
        )
        for s in slices
    }
    if shape == "clustering":  # one new file group per partition, sorted
        parts = sorted({p for p, _ in out})
        out = {
            (p, f"cluster-{p}"): pa.concat_tables(
                [t for (q, _), t in out.items() if q == p]
            ).sort_by("v")
            for p in parts
        }
    assert sum(t.num_rows for t in out.values()) == 60
    assert all(pc.all(pc.is_valid(t.column("v"))).as_py() for t in out.values())
    change = MUTATIONS[mutation]
    if change is not None:
        change(out)
    written = []
    for (partition, file_id), rows in out.items():
        name = f"{partition}/{file_id}_0-1-0_20991231000000000.parquet"
        pq.write_table(rows, table / name)
        written.append(precommit.Written(partition, file_id, name, rows.num_rows))
    if mutation == "a file dropped":
        (table / written[0].path).unlink()
    if mutation == "a file doubled":
        copy = written[0].path.replace("_0-1-0_", "_0-2-0_")
        shutil.copy(table / written[0].path, table / copy)
        written.append(precommit.Written(written[0].partition, written[0].file_id, copy, 0))

    after, missing = precommit.written_digests(path, written)
    found = precommit.compare(before, after)
    caught = bool(missing or found["partitions_differing"])
    assert caught == (mutation != "none"), (mutation, found, missing)
    if mutation == "a partition's rows moved to another partition":
        assert found["before"] == found["after"]  # only the per-partition check sees it
        assert len(found["partitions_differing"]) == 2, found
