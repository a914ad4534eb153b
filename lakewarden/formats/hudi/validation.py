"""A Hudi table's rows at an instant, as a count and an order-independent checksum read by
hudi-rs (no JVM; `formats.digest`). Every column but Hudi's `_hoodie_*` metadata (which a
rewrite changes: file names, commit times) enters the checksum."""

from __future__ import annotations

from lakewarden.formats.digest import Digest, digest_rows

__all__ = ["Digest", "digest"]


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
    return digest_rows(table, [c for c in table.column_names if c.startswith("_hoodie_")])
