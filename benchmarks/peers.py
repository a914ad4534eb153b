"""B9: a peer maintenance tool on the same table as lakewarden's compaction.

Each tool gets a fresh copy of one seeded small-file table (the same seed writes the same
rows), compacts it, and the result is read back by lakewarden.fingerprint: data files, rows
and an order-free checksum against the source's. The peers live in their own venv
(`.venv-peers`, made on first use): iceberg-zamboni pins pyiceberg-core<0.11 and its own
DuckDB, which must not move lakewarden's dependencies. Each runs as a subprocess that
times its own compaction call; the process's wall time (interpreter, imports, DuckDB
start) is reported beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from benchmarks.data import Shape, create
from benchmarks.harness import Context, Figure, Stat, measuring, timed
from benchmarks.rewrite import compact
from lakewarden.catalogs.catalog import TableRef
from lakewarden.fingerprint import Fingerprint, fingerprint
from lakewarden.policy.model import CompactionPolicy

PEERS_VENV = Path(__file__).resolve().parents[1] / ".venv-peers"
# Pinned: a figure compares with a named version. psycopg: the SqlCatalog on Postgres.
PEER_REQUIREMENTS = [
    "iceberg-zamboni==0.7.0",
    "iceberg-compaction==202604.9.0rc0",
    "psycopg[binary]>=3.2",
]
NAMESPACE = "bench"
SEED = 7

# zamboni's Python API (its CLI only opens REST catalogs or a SQLite one): a session
# around our SqlCatalog, one TableCompactor with its default config but lakewarden's
# target size. Left alone, zamboni takes the table's write.target-file-size-bytes, which
# benchmarks.data sets small to make small files: it would rewrite them into as many.
ZAMBONI = """
import json, os, sys, time
from importlib.metadata import version
from pyiceberg.catalog.sql import SqlCatalog
from zamboni import CatalogSession, CompactionConfig, TableCompactor

catalog = SqlCatalog(
    os.environ["B9_CATALOG"], uri=os.environ["B9_CATALOG_URI"],
    warehouse=os.environ["B9_WAREHOUSE"],
)
with CatalogSession.from_catalog(catalog, threads=os.cpu_count() or 1) as session:
    start = time.perf_counter()
    config = CompactionConfig(target_file_size_bytes=int(sys.argv[2]))
    result = TableCompactor(session, sys.argv[1], config).execute()
    seconds = time.perf_counter() - start
print(json.dumps({"compact_s": seconds, "version": version("iceberg-zamboni"), **result.as_dict()}))
"""

# iceberg-compaction's bindings open only the catalogs it exports; this asks which.
ICEBERG_COMPACTION_PROBE = """
import json, iceberg_compaction as ic
from importlib.metadata import version
catalogs = sorted(n for n in ic.__all__ if n.endswith("Catalog"))
print(json.dumps({"version": version("iceberg-compaction"), "catalogs": catalogs}))
"""
# Checked here (2026-11): its bindings export Glue, Hms, Memory, Rest and S3Tables
# catalogs; the probe below records the list on every run.
NOT_RUN = (
    "it opens only the catalogs listed, not a SQL/JDBC one; no REST catalog server is "
    "available here (pyiceberg ships only the REST client, the Iceberg Spark runtime jar "
    "has CatalogHandlers but not the REST servlet, no network for Lakekeeper or Polaris), "
    "and its MemoryCatalog cannot register an existing table"
)


def peer_python() -> tuple[Path, float]:
    """The peers' interpreter, and the seconds spent installing it (0 if it was there)."""
    python = PEERS_VENV / "bin" / "python"
    check = [str(python), "-c", "import zamboni, iceberg_compaction, psycopg"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python, 0.0
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS]
    proc = subprocess.run(pip, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"installing the peers failed: {proc.stderr[-1500:]}")
    return python, time.perf_counter() - start


def _peer(python: Path, script: str, args: list[str], env: dict[str, str], secret: str) -> Any:
    """Run `script` in the peers' venv; its last stdout line is JSON."""
    proc = subprocess.run(
        [str(python), "-c", script, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=False,
    )
    if proc.returncode != 0:
        # the catalog URL (with its password) is in the environment, never in the report
        tail = proc.stderr[-1500:].replace(secret, "***") if secret else proc.stderr[-1500:]
        raise RuntimeError(f"peer exited {proc.returncode}: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _same(before: Fingerprint, after: Fingerprint) -> dict[str, Any]:
    return {
        "data_files": after.data_files,
        "rows": after.rows,
        "rows_unchanged": after.rows == before.rows,
        "checksum_unchanged": after.checksum == before.checksum,
    }


def b9(ctx: Context) -> Figure:
    with measuring(
        "B9",
        "compaction of one small-file table: data files, rows, checksum, wall time",
        "iceberg-zamboni 0.7.0 (pyiceberg + DuckDB); iceberg-compaction (iceberg-rust)",
        "lakewarden warm time <= 2x the fastest peer's, rows and checksum unchanged, "
        "data files <= the peer's",
    ) as fig:
        rt, sz = ctx.rt, ctx.sizes
        catalog = rt.catalog
        shape = Shape(sz.peer_appends, sz.peer_files_per_append, sz.peer_rows_per_file)
        source = fingerprint(create(catalog, f"{NAMESPACE}.b9_source", shape, SEED))
        fig.values["source"] = {
            "data_files": source.data_files,
            "rows": source.rows,
            "checksum": source.checksum[:16],
        }
        python, setup_s = peer_python()
        fig.values["peer_venv_setup_s"] = setup_s
        uri = rt.catalogs.default.jdbc_url or ""
        env = {
            "B9_CATALOG": rt.settings.catalog_name,
            "B9_CATALOG_URI": uri,
            "B9_WAREHOUSE": rt.settings.warehouse_uri,
        }
        secret = make_url(uri).password or ""
        policy = CompactionPolicy()

        def lakewarden_once() -> tuple[float, Fingerprint]:
            ref = TableRef(NAMESPACE, "b9_lakewarden")
            create(catalog, ref.dotted, shape, SEED)
            seconds, _ = timed(lambda: compact(ctx, ref, policy))
            return seconds, fingerprint(catalog.load_table(ref.dotted))

        def zamboni_once() -> tuple[float, float, Fingerprint, dict[str, Any]]:
            ident = f"{NAMESPACE}.b9_zamboni"
            create(catalog, ident, shape, SEED)
            args = [ident, str(policy.target_file_size_bytes)]
            process_s, out = timed(lambda: _peer(python, ZAMBONI, args, env, secret))
            return out["compact_s"], process_s, fingerprint(catalog.load_table(ident)), out

        # lakewarden is measured warm: the first compaction on a new session also loads
        # Iceberg's classes and JIT-compiles them, reported apart as first_run_s
        _ = ctx.spark
        first_s, _ = lakewarden_once()
        lw_s, zb_s, zb_proc_s, ratio = [], [], [], []
        lw_fp = zb_fp = source
        zb_out: dict[str, Any] = {}
        for _ in range(ctx.repeats):  # alternated, so drifting load hits both alike
            seconds, lw_fp = lakewarden_once()
            lw_s.append(seconds)
            peer_s, proc_s, zb_fp, zb_out = zamboni_once()
            zb_s.append(peer_s)
            zb_proc_s.append(proc_s)
            ratio.append(seconds / peer_s if peer_s else 0.0)

        fig.values["lakewarden"] = {
            "compact_s": Stat.of(lw_s),
            "first_run_s": first_s,
            **_same(source, lw_fp),
        }
        fig.values["iceberg-zamboni"] = {
            "version": zb_out.get("version"),
            "compact_s": Stat.of(zb_s),
            "process_s": Stat.of(zb_proc_s),
            "data_files_rewritten": zb_out.get("data_files_rewritten"),
            "data_files_added": zb_out.get("data_files_added"),
            **_same(source, zb_fp),
        }
        probe = _peer(python, ICEBERG_COMPACTION_PROBE, [], {}, "")
        fig.values["iceberg-compaction"] = {
            "version": probe["version"],
            "ran": False,
            "catalogs": probe["catalogs"],
            "reason": NOT_RUN,
        }
        fig.notes.append(f"iceberg-compaction {probe['version']}: not run, {NOT_RUN}")
        fig.notes.append(
            "lakewarden: plan (CompactionPolicy defaults) + run on the warm Spark session "
            "(after one untimed-for-the-ratio first run); zamboni: TableCompactor.execute() "
            "with the same 128 MiB target, timed inside its process (interpreter start and "
            "imports are in process_s, not in the ratio)"
        )
        fig.notes.append(
            "each tool compacts its own rebuild of the source table (same seed, same rows); "
            f"the ratio is taken per pair of {ctx.repeats} alternated runs"
        )
        fig.ratio = Stat.of(ratio)
        fig.ratio_label = "lakewarden / iceberg-zamboni compaction time (the only peer that ran)"
        lw, zb = fig.values["lakewarden"], fig.values["iceberg-zamboni"]
        fig.goal_met = (
            fig.ratio.median <= 2.0
            and lw["rows_unchanged"]
            and lw["checksum_unchanged"]
            and lw["data_files"] <= zb["data_files"]
        )
    return fig
