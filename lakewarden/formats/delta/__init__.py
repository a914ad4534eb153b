"""Delta Lake behind the format seam (issue 29): a Delta table found by its path.

Who reads what (no JVM for any of it, the `delta` extra):
- `timeline`: the versions, from the commit files of `_delta_log/` listed with pyarrow's
  file system and read as JSON lines (commitInfo, add and remove actions); the protocol
  from delta-rs.
- `facts`: the files of the newest version (sizes, partition values, records, deletion
  vectors) from delta-rs (`DeltaTable.get_add_actions`), and the log's length and last
  checkpoint from `_delta_log/`.
"""
