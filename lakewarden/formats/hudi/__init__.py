"""Apache Hudi behind the format seam (issue 28): a Hudi table found by its base path.

Who reads what (no JVM for any of it):
- `timeline`: the instants, from the names of the files in `.hoodie/timeline/` (table
  versions 8 and 9, Hudi 1.x) or `.hoodie/` (version 6), listed with pyarrow's file
  system; a completed instant's metadata decoded with fastavro (Avro in v8+) or json (v6).
  hudi-rs shows only completed commit, deltacommit and replacecommit instants, and no
  completion time; the timeline also needs clean, rollback, savepoint and pending
  compactions.
- `facts`: the file-system view (file groups, their base and log files per partition)
  from hudi-rs (`HudiTable.get_file_slices`), and pending table services from `timeline`.
"""
