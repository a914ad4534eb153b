"""B19: the same maintenance jobs on tables whose warehouse is HDFS vs a local disk.

B14's rounds (`benchmarks.cluster`: four small tables, a worker plans a compaction, a
Z-order, a TTL and a clean, one real scheduler process runs them one at a time on
`local[2]`), twice: first with the default catalog's warehouse on the local disk, then on
an HDFS of one NameNode and one DataNode started on this machine from Hadoop's own jars
(`lakewarden.spark.local_hdfs`). The tables are written, planned and checked through
hdfs-native (`lakewarden.hdfs`), the jobs run through Spark's Hadoop client. The first
round of each warms its session and is left out. Per job: `job_runs.duration_ms`.

On one machine HDFS can only cost: every file goes through a NameNode call and a DataNode
socket (the two JVMs share the cores), where the disk is a local `open`. What it proves is
that every kind runs unchanged on HDFS, and what the round trips cost on small tables.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from typing import Any

from benchmarks.cluster import KINDS, NAMESPACE, _clear, _mode, local_rounds
from benchmarks.harness import Context, Figure, Stat, measuring
from lakewarden.runtime import Runtime
from lakewarden.spark.local_hdfs import start_hdfs


def _on_hdfs(rt: Runtime, url: str) -> Runtime:
    """The same database and default catalog, its warehouse (new tables' home) on HDFS."""
    settings = rt.settings.model_copy(update={"warehouse": f"{url}/warehouse"})
    return Runtime(settings=settings, db_url=rt.db_url, engine=rt.engine, role=rt.role)


def _drop(rt: Runtime, prefix: str) -> None:
    """Forget the round's HDFS tables while the NameNode still answers (a later run would
    otherwise find them in the catalog, on a file system that is gone)."""
    catalog = rt.catalog
    for identifier in catalog.list_tables(NAMESPACE):
        if identifier[-1].startswith(prefix):
            with contextlib.suppress(Exception):
                catalog.drop_table(identifier)


def b19(ctx: Context) -> Figure:
    with measuring(
        "B19",
        "maintenance jobs (compaction, zorder, ttl, clean) on an HDFS warehouse (a NameNode "
        "and a DataNode from Hadoop's jars, on this machine)",
        "the same jobs on a local-disk warehouse",
        "every job passes on both; timings reported",
    ) as fig:
        rt = ctx.rt
        rounds = 2 if ctx.sizes.name == "smoke" else ctx.repeats + 1
        _clear(rt)
        local = local_rounds(ctx, rounds)  # the disk: B14's local[2] rounds
        mode = f"hdfs{uuid.uuid4().hex[:6]}"  # fresh names: no table of an earlier HDFS
        started = time.perf_counter()
        with start_hdfs(ctx.work_dir / "b19-hdfs", rt.settings) as hdfs:
            start_s = time.perf_counter() - started
            on_hdfs = _on_hdfs(rt, hdfs.url)
            try:
                remote = _mode(on_hdfs, ctx, mode, "local[2]", None, rounds)
            finally:
                _drop(on_hdfs, mode)
        _clear(rt)
        _report(fig, local, remote, start_s)
    return fig


def _report(fig: Figure, local: dict[str, Any], remote: dict[str, Any], start_s: float) -> None:
    per_kind: dict[str, Any] = {}
    lines = [f"{'kind':<11} {'disk s':>8} {'hdfs s':>8} {'hdfs/disk':>10}"]
    for kind in KINDS:
        lo, hd = local["seconds"][kind], remote["seconds"][kind]
        if not lo or not hd:
            continue
        lo_s, hd_s = Stat.of(lo), Stat.of(hd)
        ratio = hd_s.median / lo_s.median if lo_s.median else 0.0
        per_kind[kind] = {"disk_s": lo_s, "hdfs_s": hd_s, "ratio": round(ratio, 3)}
        lines.append(f"{kind:<11} {lo_s.median:>8.2f} {hd_s.median:>8.2f} {ratio:>10.2f}")
    pairs = list(zip(local["walls"], remote["walls"], strict=False))
    if pairs:
        fig.ratio = Stat.of([h / lo for lo, h in pairs if lo])
        fig.ratio_label = f"hdfs/disk time of a round of {len(per_kind)} job(s)"
    failed = local["failed"] + remote["failed"]
    fig.goal_met = not failed and bool(pairs)
    fig.values = {
        "per_kind": per_kind,
        "round_disk_s": Stat.of(local["walls"]) if local["walls"] else None,
        "round_hdfs_s": Stat.of(remote["walls"]) if remote["walls"] else None,
        "hdfs_start_s": round(start_s, 2),
        "failed": failed,
    }
    fig.notes.append(
        "job seconds: job_runs.duration_ms of each warm job (round 0 of each left out); the "
        "disk first, then HDFS, each on its own scheduler process on local[2]; a round runs "
        "from planning (a worker, pyiceberg) to the last job's outcome; table writing is "
        "outside it"
    )
    print("\nB17: median seconds per job\n" + "\n".join(lines), file=sys.stderr, flush=True)
