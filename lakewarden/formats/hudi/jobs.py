"""Hudi's table services through Hudi's own Spark procedures, on a Hudi-family session
(`lakewarden.spark.session`, `family="hudi"`).

Compaction is planned first (`op => 'schedule'`, which returns the instant it planned) and
then executed by that instant (`op => 'execute', instants => …`): the procedures take no
extra metadata, so the planned instant is lakewarden's mark on the commit (research note
§2), and a retry finds it completed (done) or still pending (run again: Hudi rolls back
the failed inflight attempt first). An instant someone else planned is never run here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.spark.sql import path_literal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_INSTANT_DIGITS = (14, 17)


@dataclass(frozen=True)
class CompactionRun:
    instant: str | None  # the compaction lakewarden planned; None: nothing to compact
    completed: bool  # its commit is on the timeline


def schedule_compaction(spark: SparkSession, base_path: str) -> str | None:
    """Plan a compaction of every file slice with log files (Hudi's default strategy, the
    delta-commit trigger set to one so that the plan is made now); its instant, or None.
    `op => 'schedule'` answers with every pending compaction, also those someone else
    planned earlier (seen on 1.2.0): only an instant that was not pending before is ours."""
    before = {i.requested for i in HudiTimeline(base_path).pending()}
    rows = spark.sql(
        f"CALL run_compaction(op => 'schedule', path => {path_literal(base_path)}, "
        "options => 'hoodie.compact.inline.max.delta.commits=1')"
    ).collect()
    ours = sorted(str(r["timestamp"]) for r in rows if str(r["timestamp"]) not in before)
    return ours[-1] if ours else None


def run_compaction(spark: SparkSession, base_path: str, instant: str) -> None:
    """Execute the planned compaction `instant` (and only it)."""
    if not instant.isdigit() or len(instant) not in _INSTANT_DIGITS:
        raise ValueError(f"not a Hudi instant: {instant!r}")
    spark.sql(
        f"CALL run_compaction(op => 'execute', path => {path_literal(base_path)}, "
        f"instants => '{instant}')"
    ).collect()


def compact(spark: SparkSession, base_path: str, planned: str | None = None) -> CompactionRun:
    """Compact the table: plan (unless a retry passes the instant it `planned` before),
    execute, and read the timeline to see the compaction's commit."""
    timeline = HudiTimeline(base_path)
    if planned is not None and planned in {i.requested for i in timeline.completed()}:
        return CompactionRun(planned, True)  # an earlier attempt finished it
    instant = planned or schedule_compaction(spark, base_path)
    if instant is None:
        return CompactionRun(None, False)
    run_compaction(spark, base_path, instant)
    done = {i.requested: i for i in HudiTimeline(base_path).completed()}
    return CompactionRun(instant, instant in done and done[instant].action == "commit")
