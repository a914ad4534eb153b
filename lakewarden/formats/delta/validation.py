"""A Delta table's rows at a version, as a count and an order-independent checksum read by
delta-rs (no JVM; `formats.digest`): a rewrite's version and the one before it must agree.
delta-rs' `scan()` (its DataFusion engine) reads them, deletion vectors applied (its
`to_pyarrow_table` refuses the `deletionVectors` reader feature); a version it cannot read
is `Unreadable` (the caller records the validation as skipped, with that reason)."""

from __future__ import annotations

from collections.abc import Mapping

from lakewarden.formats.digest import Digest, digest_rows
from lakewarden.object_store import reader_options

__all__ = ["Digest", "Unreadable", "digest"]


class Unreadable(RuntimeError):
    """delta-rs cannot read the table's rows (a reader feature it does not support)."""


def digest(path: str, version: int, storage: Mapping[str, str] | None = None) -> Digest:
    """The table's rows as of `version` (`storage`: the catalog's resolved properties, for
    a table on an object store)."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    options = reader_options(storage or {}, path) or None
    try:
        scan = DeltaTable(path, version=version, storage_options=options).scan()
        table = pa.RecordBatchReader.from_stream(scan).read_all()
    except DeltaError as exc:
        raise Unreadable(f"delta-rs cannot read version {version} of {path}: {exc}") from exc
    return digest_rows(table)
