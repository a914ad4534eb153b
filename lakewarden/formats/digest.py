"""A table's rows as a count and an order-independent checksum, from an Arrow table a
format's own reader produced (hudi-rs, delta-rs): what a rewrite (a compaction, a Z-order)
must leave unchanged. Rows are hashed one by one in Python, so it costs a full read."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class Digest:
    rows: int
    checksum: int  # sum of the rows' 64-bit hashes, mod 2**64


def digest_rows(table: pa.Table, skip: Iterable[str] = ()) -> Digest:
    """The rows of `table` over its columns but `skip` (a format's metadata columns that a
    rewrite changes), in sorted column order."""
    skipped = set(skip)
    columns = sorted(c for c in table.column_names if c not in skipped)
    total = 0
    for row in table.select(columns).to_pylist():
        text = repr([row[c] for c in columns]).encode()
        total += int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
    return Digest(table.num_rows, total % (1 << 64))
