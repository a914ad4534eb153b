"""A Hudi table's rows at an instant, as a count and an order-independent checksum read by
hudi-rs (no JVM; `formats.digest`). Every column but Hudi's `_hoodie_*` metadata (which a
rewrite changes: file names, commit times) enters the checksum.

Beside a live writer the table's rows change while a rewrite runs, so the two digests
cannot be compared; `rows_by_key` and `compare_beside_writer` compare record by record
instead: every record no other writer's commit wrote meanwhile (its `_hoodie_commit_time`,
which a compaction, clustering or clean keeps) must be there after, unchanged, and once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lakewarden.formats.digest import Digest, digest_rows, hashed_rows
from lakewarden.formats.hudi.storage import storage_for
from lakewarden.object_store import reader_options

__all__ = ["Digest", "KeyedRows", "compare_beside_writer", "digest", "rows_by_key"]

_KEY = ("_hoodie_partition_path", "_hoodie_record_key")
_COMMIT = "_hoodie_commit_time"


def _read(base_path: str, as_of: str | None = None) -> Any:
    import pyarrow as pa
    from hudi import HudiReadOptions, HudiTable

    options = HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    # A job's table on an object store: with the credentials its job set (`storage`).
    batches = HudiTable(base_path, reader_options(storage_for(base_path), base_path)).read(options)
    return pa.Table.from_batches(batches) if batches else None


def digest(base_path: str, as_of: str | None = None) -> Digest:
    """The table's rows as of instant `as_of` (None: the latest)."""
    table = _read(base_path, as_of)
    if table is None:
        return Digest(0, 0)
    return digest_rows(table, [c for c in table.column_names if c.startswith("_hoodie_")])


@dataclass(frozen=True)
class KeyedRows:
    """The table's records by (partition path, record key): the commit that wrote each
    and the hash of its data columns; and the keys read more than once."""

    rows: dict[tuple[str, str], tuple[str, int]]
    duplicates: int
    digest: Digest


def rows_by_key(base_path: str) -> KeyedRows:
    """The latest records, by key (hudi-rs), with the table's digest from the same read."""
    table = _read(base_path)
    if table is None:
        return KeyedRows({}, 0, Digest(0, 0))
    data = sorted(c for c in table.column_names if not c.startswith("_hoodie_"))
    hashed = hashed_rows(table, data, keep=[*_KEY, _COMMIT]).to_pydict()
    rows: dict[tuple[str, str], tuple[str, int]] = {}
    seen: Counter[tuple[str, str]] = Counter()
    for partition, record, commit, value in zip(
        hashed[_KEY[0]], hashed[_KEY[1]], hashed[_COMMIT], hashed["hash"], strict=True
    ):
        key = (str(partition), str(record))
        seen[key] += 1
        rows[key] = (str(commit), int(value))
    total = sum(int(v) for v in hashed["hash"])
    duplicates = sum(1 for n in seen.values() if n > 1)
    return KeyedRows(rows, duplicates, Digest(table.num_rows, total % (1 << 64)))


def compare_beside_writer(
    before: KeyedRows, after: KeyedRows, others: Iterable[str], deletes: bool
) -> dict[str, Any]:
    """Record by record, what a rewrite did beside other writers' commits `others`
    (their instants; `deletes`: one of them deleted records, so a key gone may be
    theirs): records lost, changed, appearing from nowhere, read twice. All zero: the
    rewrite kept every record it read."""
    theirs = set(others)
    lost = changed = appeared = by_writer = 0
    for key, (commit, value) in before.rows.items():
        now = after.rows.get(key)
        if now is None:
            lost += 0 if deletes else 1
        elif now[0] in theirs:
            by_writer += 1  # the writer wrote it again meanwhile: its value is the writer's
        elif now != (commit, value):
            changed += 1
    for key, (commit, _) in after.rows.items():
        if key not in before.rows and commit not in theirs:
            appeared += 1
    return {
        "records_compared": len(before.rows) - by_writer,
        "records_rewritten_by_writers": by_writer,
        "lost": lost,
        "changed": changed,
        "appeared": appeared,
        "duplicates": after.duplicates,
        "writer_deleted": deletes,
    }
