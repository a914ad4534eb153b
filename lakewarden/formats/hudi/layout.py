"""How a Hudi table's latest base files are laid out for lookups on some columns: each
file's min/max bounds of the columns, read from its Parquet footer (pyarrow, no JVM; a
footer is a few KB at the file's end), by partition; and the table's columns, from the
schema its last write commit recorded. What the clustering kind judges
(`lakewarden.kinds.hudi_clustering`, with `health.files_per_lookup`)."""

from __future__ import annotations

import json
from typing import Any

from lakewarden.formats.hudi.timeline import WRITE_ACTIONS, HudiTimeline
from lakewarden.metadata import DataFile


def table_columns(timeline: HudiTimeline) -> list[str] | None:
    """The columns of the schema the newest write commit recorded (None: none recorded)."""
    writes = [i for i in timeline.completed() if i.action in WRITE_ACTIONS]
    for instant in reversed(writes):
        schema = (timeline.read_instant(instant).get("extraMetadata") or {}).get("schema")
        if schema:
            return [str(f["name"]) for f in json.loads(schema).get("fields", [])]
    return None


def _bounds(metadata: Any, columns: list[str]) -> dict[str, tuple[Any, Any]]:
    """Each column's (min, max) over the file's row groups, where every row group has
    statistics for it."""
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    out: dict[str, tuple[Any, Any]] = {}
    for col in columns:
        if col not in names:
            continue
        idx = names.index(col)
        lows, highs = [], []
        for rg in range(metadata.num_row_groups):
            stats = metadata.row_group(rg).column(idx).statistics
            if stats is None or not stats.has_min_max:
                break
            lows.append(stats.min)
            highs.append(stats.max)
        else:
            if lows:
                out[col] = (min(lows), max(highs))
    return out


def base_files(timeline: HudiTimeline, columns: list[str]) -> dict[str, list[DataFile]]:
    """The latest base file of each file group, by partition, with `columns`' bounds."""
    import pyarrow.parquet as pq

    out: dict[str, list[DataFile]] = {}
    for s in timeline.table().get_file_slices():
        if not s.base_file_name:
            continue
        part = s.partition_path
        path = "/".join(p for p in (timeline.base.rstrip("/"), part, s.base_file_name) if p)
        bounds: dict[str, tuple[Any, Any]] = {}
        records = 0
        if s.base_file_name.endswith(".parquet"):
            with timeline.fs.open_input_file(path) as f:
                meta = pq.ParquetFile(f).metadata
            bounds, records = _bounds(meta, columns), meta.num_rows
        out.setdefault(part, []).append(
            DataFile(path, int(s.base_file_byte_size), records, 0, (), bounds)
        )
    return out
