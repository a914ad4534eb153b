"""DuckDB's Delta extension as the tests' second independent reader of Delta tables, beside
delta-rs (issue 29). Its PyPI wheel (`duckdb-extension-delta` 1.5.5, DuckDB's delta-kernel
based `delta_scan`) loads only into the DuckDB release it was built for (1.5.5), and the
project's own duckdb is 2.0.0, so both are installed apart by scripts/setup.sh
(`scripts/duckdb-delta.txt`, into `<venv>/duckdb-delta`) and read in a process of their own,
which hands the rows back as Arrow IPC."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from lakewarden.formats.digest import Digest, digest_rows

SIDECAR = Path(sys.prefix) / "duckdb-delta"

_READ = """
import os, sys
import duckdb, duckdb_extension_delta
import pyarrow as pa
assert duckdb.__version__ == "1.5.5", duckdb.__version__
ext = os.path.join(os.path.dirname(duckdb_extension_delta.__file__),
                   "extensions", "v1.5.5", "delta.duckdb_extension")
con = duckdb.connect()
con.execute("LOAD '" + ext.replace("'", "''") + "'")
path, version = sys.argv[1], sys.argv[2]
args = "?" + (", version := " + str(int(version)) if version else "")
table = con.execute("SELECT * FROM delta_scan(" + args + ")", [path]).fetch_arrow_table()
with pa.ipc.new_stream(sys.stdout.buffer, table.schema) as out:
    out.write_table(table)
"""


def read(path: str, version: int | None = None) -> pa.Table:
    """The table's rows at `version` (the newest if None), read by DuckDB's `delta_scan`
    (deletion vectors applied)."""
    if not (SIDECAR / "duckdb_extension_delta").is_dir():
        raise RuntimeError(
            f"DuckDB's Delta extension is not installed at {SIDECAR}: run scripts/setup.sh "
            f"(or pip install --target {SIDECAR} -r scripts/duckdb-delta.txt)"
        )
    env = {**os.environ, "PYTHONPATH": str(SIDECAR)}  # its duckdb before the venv's
    done = subprocess.run(
        [sys.executable, "-c", _READ, path, "" if version is None else str(version)],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"DuckDB's delta_scan of {path}: {done.stderr.decode()[-2000:]}")
    table = pa.ipc.open_stream(done.stdout).read_all()
    # Delta's `timestamp` is an instant in UTC: DuckDB names the zone Etc/UTC, delta-rs
    # UTC; the same values, spelled alike so that rows compare equal.
    schema = pa.schema(
        pa.field(f.name, pa.timestamp(f.type.unit, "UTC"), f.nullable)
        if pa.types.is_timestamp(f.type) and f.type.tz is not None
        else f
        for f in table.schema
    )
    return table.cast(schema)


def digest(path: str, version: int | None = None) -> Digest:
    """Rows and checksum at `version` as DuckDB reads them (`formats.digest`, as validation
    computes them from delta-rs)."""
    return digest_rows(read(path, version))


def agreed_digest(path: str, version: int | None = None) -> Digest:
    """Rows and checksum at `version` (None: the latest; deletion vectors applied) as
    delta-rs' scan reads them (as validation does), checked against DuckDB's Delta
    extension."""
    from deltalake import DeltaTable

    from lakewarden.formats.delta.validation import digest as validation_digest

    version = DeltaTable(path, version=version).version()
    ours = validation_digest(path, version)
    assert ours == digest(path, version), "delta-rs and DuckDB disagree"
    return ours


def files_per_day(path: str) -> dict[str, int]:
    """Live files per `day` partition, read by delta-rs."""
    from deltalake import DeltaTable

    found: dict[str, int] = {}
    for row in pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist():
        found[row["partition.day"]] = found.get(row["partition.day"], 0) + 1
    return found
