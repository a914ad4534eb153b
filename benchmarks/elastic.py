"""B37 (issue 32 §4): the time to drain a backlog of tiny compactions, a pool with elastic
capacity against the same pool fixed at its minimum, same run.

Real processes (`python -m cli scheduler` and `python -m cli worker`) on the benchmark's
database, real Spark jobs (B12's tiny tables: one append of 4 small files, each compacted
on the scheduler's warm session): N tables get one compaction task each in one
transaction, and the drain is the queueing commit to the last run's end (the database's
clock). The pool (`default`) is either fixed at 1 job at once (`POOL_LIMITS`) or elastic
from 1 to `ELASTIC_MAX` (`POOL_CAPACITY`); the two alternate, each with its own scheduler.
After the elastic drain the pool must shrink back to its minimum once idle, and its
capacity never pass its maximum (both read from the leader's decisions).

Why the session and not applications: an application pool's job is a cold JVM each (B13:
seconds of CPU on 2 cores), so 200 at one at a time would take most of an hour here; the
slot the elastic limit counts is the same in both modes (one running job of the pool).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from sqlalchemy import select, text

from benchmarks import dispatch, processes
from benchmarks.harness import Context, Figure, Stat, measuring
from lakewarden.db.models import CapacityDecision, PoolCapacityRow
from lakewarden.db.session import transaction

ELASTIC_MAX = 4  # the default max_concurrent_jobs on 2 cores: the session's own ceiling
ELASTIC = {
    "default": {
        "min": 1,
        "max": ELASTIC_MAX,
        "scale_up_wait_s": 5,
        "scale_up_queued_per_slot": 2,
        "scale_down_idle_s": 10,
    }
}
GOAL_X = 1.5  # elastic drains at least this much faster than fixed at its minimum


def _settings(elastic: bool) -> dict[str, str]:
    common = {"max_concurrent_jobs": str(ELASTIC_MAX), "capacity_interval_s": "2"}
    if elastic:
        return {**common, "pool_capacity": json.dumps(ELASTIC)}
    return {**common, "pool_limits": json.dumps({"default": 1})}


def _peak_running(ctx: Context, ids: list[int]) -> int:
    """The most runs of the tasks that overlapped in time."""
    with transaction(ctx.rt.engine) as s:
        spans = s.execute(
            text("SELECT started_at, finished_at FROM job_runs WHERE task_id = ANY(:ids)"),
            {"ids": ids},
        ).all()
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans if b is not None])
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def _drain(ctx: Context, elastic: bool, n: int, tag: str) -> dict[str, Any]:
    env = processes.process_env(
        ctx.rt.db_url,
        ctx.rt.settings.data_dir / "elastic",
        drop="LAKEWARDEN_",
        warehouse=ctx.rt.settings.warehouse_uri,
        spark_master=ctx.rt.settings.spark_master,
        log_level="INFO",
    )
    env.update(processes.setting_vars(_settings(elastic)))
    with transaction(ctx.rt.engine) as s:  # each configuration starts from nothing decided
        s.execute(text("DELETE FROM pool_capacity"))
        s.execute(text("DELETE FROM capacity_decisions"))
    names = dispatch._tables(ctx, tag, n)
    load = [round(os.getloadavg()[0], 2)]
    # a shared machine at load 30 took over 5 minutes to warm a session: wait longer
    with dispatch.processes_for(env, ctx.work_dir / "elastic-logs", tag, warm_timeout_s=1200):
        ids = dispatch._queue(ctx, names)
        dispatch._wait(ctx, ids, timeout=3600)
        _, span = dispatch._runs(ctx, ids)
        load.append(round(os.getloadavg()[0], 2))
        out: dict[str, Any] = {"drain_s": span, "peak_running": _peak_running(ctx, ids)}
        if elastic:  # idle now: back to the minimum within scale_down_idle_s (+ a round)
            deadline = time.monotonic() + 120
            while True:
                with transaction(ctx.rt.engine) as s:
                    row = s.get(PoolCapacityRow, "default")
                    now = None if row is None else row.capacity
                if now == ELASTIC["default"]["min"] or time.monotonic() > deadline:
                    break
                time.sleep(1)
            with transaction(ctx.rt.engine) as s:
                decisions = s.execute(
                    select(
                        CapacityDecision.before, CapacityDecision.after, CapacityDecision.reason
                    ).order_by(CapacityDecision.id)
                ).all()
            out["capacity_after_idle"] = now
            out["decisions"] = [f"{b}->{a}: {r}" for b, a, r in decisions]
            out["max_capacity"] = max(a for _, a, _ in decisions)
    dispatch._forget(ctx, names)
    out["load_avg_1m_before_after"] = load
    return out


def b37(ctx: Context) -> Figure:
    smoke = ctx.sizes.name == "smoke"
    n = 12 if smoke else 200
    repeats = 1  # 200 tiny jobs at 1 at a time take minutes each on 2 shared cores
    with measuring(
        "B37",
        f"time to drain {n} tiny compactions (real Spark, real scheduler + worker), pool "
        f"elastic 1..{ELASTIC_MAX} (POOL_CAPACITY)",
        "the same pool fixed at its minimum (1 job at once), same run",
        f">= {GOAL_X:g}x faster; back to its minimum when idle; never past its maximum",
    ) as fig:
        fixed_s, elastic_s, ratios, runs = [], [], [], []
        for r in range(repeats):
            fixed = _drain(ctx, False, n, f"fix{r}")
            elastic = _drain(ctx, True, n, f"ela{r}")
            runs.append({"fixed": fixed, "elastic": elastic})
            fixed_s.append(fixed["drain_s"])
            elastic_s.append(elastic["drain_s"])
            ratios.append(fixed["drain_s"] / elastic["drain_s"])
        fig.ratio = Stat.of(ratios)
        fig.ratio_label = "fixed drain s / elastic drain s"
        shrank = all(
            run["elastic"]["capacity_after_idle"] == ELASTIC["default"]["min"] for run in runs
        )
        bounded = all(
            run["elastic"]["max_capacity"] <= ELASTIC_MAX
            and run["elastic"]["peak_running"] <= ELASTIC_MAX
            and run["fixed"]["peak_running"] == 1
            for run in runs
        )
        fig.goal_met = fig.ratio.median >= GOAL_X and shrank and bounded
        fig.values = {
            "tasks": n,
            "fixed_drain_s": Stat.of(fixed_s).as_json(),
            "elastic_drain_s": Stat.of(elastic_s).as_json(),
            "shrank_to_min_when_idle": shrank,
            "within_limits": bounded,
            "runs": runs,
        }
        fig.notes.append(
            "session pool: each job on the scheduler's warm session (local[2]); an application "
            "pool's cold JVM per job would make the fixed drain of 200 most of an hour here"
        )
    return fig
