"""A Hudi table's rows at an instant, as a count and an order-independent checksum, read by
hudi-rs (no JVM): what a rewrite (a compaction) must leave unchanged. Every column but
Hudi's `_hoodie_*` metadata (which a rewrite changes: file names, commit times) enters the
checksum; rows are hashed one by one, so it costs a full read of the table in Python."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Digest:
    rows: int
    checksum: int  # sum of the rows' 64-bit hashes, mod 2**64


def digest(base_path: str, as_of: str | None = None) -> Digest:
    """The table's rows as of instant `as_of` (None: the latest)."""
    import pyarrow as pa
    from hudi import HudiReadOptions, HudiTable

    options = HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    batches = HudiTable(base_path).read(options)
    if not batches:
        return Digest(0, 0)
    table = pa.Table.from_batches(batches)
    columns = sorted(c for c in table.column_names if not c.startswith("_hoodie_"))
    total = 0
    for row in table.select(columns).to_pylist():
        text = repr([row[c] for c in columns]).encode()
        total += int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
    return Digest(table.num_rows, total % (1 << 64))
