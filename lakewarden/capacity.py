"""Elastic capacity per pool (settings `pool_capacity`): the jobs a pool may run at once
follow its backlog, between its `min` and `max`.

The unit is the slot dispatch already counts: one running job of the pool (an `application`
pool's job is its own Spark application, so a slot is an application: its driver and
executors exist only while it runs; a `session` pool's job shares the leader's warm
session, whose executors Spark's dynamic allocation can follow on a cluster master). The
leader decides each `capacity_interval_s` (`decide`, pure) and records each change under
its fence (`apply`): the pool's row in `pool_capacity`, a `capacity_decisions` row saying
from, to and why, and a log line. Dispatch reads the leader's last decision as the pool's
limit (`limits`); the pools endpoint, `lakewarden pools`, the metrics and a waiting task's
`on_hold` show it (`describe_wait`).

Up, by `step`, while every slot is busy and the pool's runnable queue (planned tasks due,
whose table runs nothing) waited longer than `scale_up_wait_s` at its oldest, or holds
more than `scale_up_queued_per_slot` tasks per slot. Down to what runs (never below `min`)
once a slot stayed free with nothing runnable for `scale_down_idle_s`. A capacity outside
changed limits is brought inside them first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from lakewarden.db.models import CapacityDecision, PoolCapacityRow
from lakewarden.leader import Fence, check_fence
from lakewarden.settings import PoolCapacity, Settings
from lakewarden.states import TaskState, sql_in

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Load:
    """A pool's work now: runnable queued tasks, running jobs, the oldest queued wait."""

    queued: int
    running: int
    oldest_wait_s: float | None


@dataclass(frozen=True)
class Decision:
    """What a pool's capacity should be: `after` (== before: unchanged), why, and since
    when it has been idle (None: not idle)."""

    before: int
    after: int
    reason: str
    idle_since: datetime | None

    @property
    def changed(self) -> bool:
        return self.after != self.before


def decide(
    limits: PoolCapacity,
    current: int | None,
    load: Load,
    idle_since: datetime | None,
    now: datetime,
) -> Decision:
    """The pool's next capacity (pure: the scheduler round and the unit tests call it)."""
    if current is None:
        return Decision(0, limits.min, f"started at its minimum {limits.min}", None)
    if current < limits.min or current > limits.max:
        after = min(max(current, limits.min), limits.max)
        return Decision(current, after, f"limits are now {limits.min}..{limits.max}", idle_since)
    full = load.running >= current
    if load.queued and full and current < limits.max:
        wait = load.oldest_wait_s or 0.0
        why = None
        if wait > limits.scale_up_wait_s:
            why = (
                f"the oldest of {load.queued} queued tasks waited {wait:.0f}s "
                f"> {limits.scale_up_wait_s:g}s"
            )
        elif load.queued > limits.scale_up_queued_per_slot * current:
            why = (
                f"{load.queued} tasks queued for {current} busy slots "
                f"> {limits.scale_up_queued_per_slot:g} per slot"
            )
        if why is not None:
            after = min(limits.max, current + limits.step)
            return Decision(current, after, f"scaled up: {why}", None)
    if load.queued or load.running >= current:
        return Decision(current, current, "busy", None)
    since = idle_since or now
    idle_s = (now - since).total_seconds()
    floor = max(limits.min, load.running)
    if floor < current and idle_s >= limits.scale_down_idle_s:
        return Decision(
            current,
            floor,
            f"scaled down: {current - load.running} of {current} slots idle for "
            f"{idle_s:.0f}s >= {limits.scale_down_idle_s:g}s, nothing queued",
            None,
        )
    return Decision(current, current, "idle" if floor < current else "at its minimum", since)


def limits(settings: Settings, capacity: dict[str, int]) -> dict[str, int]:
    """The jobs each pool may run at once, as dispatch applies them: `pool_limits`, with
    each elastic pool's current capacity (its minimum before the leader's first decision);
    a `pool_limits` entry of an elastic pool still caps it."""
    out = dict(settings.pool_limits)
    for pool, cfg in settings.pool_capacity.items():
        now = capacity.get(pool, cfg.min)
        out[pool] = min(now, out[pool]) if pool in out else now
    return out


# Per pool: runnable planned tasks (due, their table running nothing, as dispatch needs),
# the oldest one's wait, and running tasks.
_LOAD = text(
    f"""
    SELECT pool,
           count(*) FILTER (WHERE runnable),
           extract(epoch FROM now() - min(created_at) FILTER (WHERE runnable)),
           count(*) FILTER (WHERE {sql_in("state", TaskState.RUNNING)})
    FROM (SELECT t.pool, t.state, t.created_at,
                 {sql_in("t.state", TaskState.PLANNED)} AND t.not_before <= now()
                 AND NOT EXISTS (SELECT 1 FROM tasks r WHERE r.table_id = t.table_id
                                 AND {sql_in("r.state", TaskState.RUNNING)}) AS runnable
          FROM tasks t
          WHERE t.pool = ANY(:pools)
            AND {sql_in("t.state", (TaskState.PLANNED, TaskState.RUNNING))}) AS w
    GROUP BY pool
    """
)


def loads(s: Session, pools: list[str]) -> dict[str, Load]:
    """Each pool's work now (a pool with none: zero)."""
    found = {
        pool: Load(int(queued), int(running), None if wait is None else float(wait))
        for pool, queued, wait, running in s.execute(_LOAD, {"pools": pools})
    }
    return {p: found.get(p, Load(0, 0, None)) for p in pools}


def apply(s: Session, fence: Fence, settings: Settings) -> dict[str, Decision]:
    """The leader's round, in one fenced transaction: decide each elastic pool's capacity,
    record what changed (its row, a decision, a log line), and return every pool's."""
    check_fence(s, fence)
    pools = sorted(settings.pool_capacity)
    now = s.scalar(select(text("now()")))
    rows = {
        r.pool: r for r in s.scalars(select(PoolCapacityRow).where(PoolCapacityRow.pool.in_(pools)))
    }
    out = {}
    for pool, load in loads(s, pools).items():
        row = rows.get(pool)
        new = row is None
        d = decide(
            settings.pool_capacity[pool],
            None if row is None else row.capacity,
            load,
            None if row is None else row.idle_since,
            now,
        )
        out[pool] = d
        if row is None:
            row = PoolCapacityRow(pool=pool, capacity=d.after, reason=d.reason)
            s.add(row)
        row.idle_since, row.checked_at = d.idle_since, now
        if not (d.changed or new):
            continue
        row.capacity, row.reason, row.changed_at = d.after, d.reason, now
        s.add(
            CapacityDecision(
                pool=pool,
                before=d.before,
                after=d.after,
                reason=d.reason,
                queued=load.queued,
                running=load.running,
                oldest_wait_s=load.oldest_wait_s,
                holder=fence.holder,
                leader_epoch=fence.epoch,
            )
        )
        log.info(
            "pool %s: capacity %d -> %d: %s (queued %d, running %d)",
            pool,
            d.before,
            d.after,
            d.reason,
            load.queued,
            load.running,
        )
    return out


def current(s: Session, settings: Settings) -> dict[str, int]:
    """Each elastic pool's capacity as the leader last decided it."""
    rows = s.execute(
        select(PoolCapacityRow.pool, PoolCapacityRow.capacity).where(
            PoolCapacityRow.pool.in_(list(settings.pool_capacity))
        )
    )
    return {pool: int(capacity) for pool, capacity in rows}


def pools_view(s: Session, settings: Settings, decisions: int = 5) -> list[dict[str, Any]]:
    """Every pool the settings or the open tasks name: its mode, what runs and waits, its
    limit now, and for an elastic pool its limits, since when and why, and its last
    decisions (newest first)."""
    named = (
        set(settings.pool_limits)
        | set(settings.pool_modes)
        | set(settings.pool_capacity)
        | set(settings.pool_quotas)
        | set(
            s.scalars(
                text(
                    "SELECT DISTINCT pool FROM tasks "
                    f"WHERE {sql_in('state', (TaskState.PLANNED, TaskState.RUNNING))}"
                )
            )
        )
    )
    pools = sorted(named)
    work = loads(s, pools)
    rows = {
        r.pool: r for r in s.scalars(select(PoolCapacityRow).where(PoolCapacityRow.pool.in_(pools)))
    }
    now_limits = limits(settings, {p: r.capacity for p, r in rows.items()})
    out = []
    for pool in pools:
        cfg = settings.pool_capacity.get(pool)
        row = rows.get(pool)
        recent = (
            s.scalars(
                select(CapacityDecision)
                .where(CapacityDecision.pool == pool)
                .order_by(CapacityDecision.id.desc())
                .limit(decisions)
            ).all()
            if cfg is not None and decisions
            else []
        )
        load = work[pool]
        out.append(
            {
                "pool": pool,
                "mode": str(settings.pool_modes.get(pool, "session")),
                "running": load.running,
                "queued": load.queued,
                "oldest_wait_s": load.oldest_wait_s,
                "limit": now_limits.get(pool),
                "elastic": None
                if cfg is None
                else {
                    **cfg.model_dump(),
                    "capacity": row.capacity if row is not None else cfg.min,
                    "reason": row.reason if row is not None else "no decision yet: its minimum",
                    "changed_at": None if row is None else row.changed_at,
                    "idle_since": None if row is None else row.idle_since,
                    "decisions": [
                        {
                            "at": d.at,
                            "before": d.before,
                            "after": d.after,
                            "reason": d.reason,
                            "queued": d.queued,
                            "running": d.running,
                            "leader_epoch": d.leader_epoch,
                        }
                        for d in recent
                    ],
                },
            }
        )
    return out


def describe_wait(settings: Settings, pool: str, capacity: int | None, running: int) -> str | None:
    """What a waiting task of an elastic pool says while the pool is full: "waiting: pool
    big runs 2 of its capacity 2 (elastic 1..8: grows while its queue waits)". None: not
    elastic, or a slot is free."""
    cfg = settings.pool_capacity.get(pool)
    if cfg is None:
        return None
    now = capacity if capacity is not None else cfg.min
    if running < now:
        return None
    grows = (
        f"grows after {cfg.scale_up_wait_s:g}s of waiting" if now < cfg.max else "at its maximum"
    )
    return (
        f"waiting: pool {pool} runs {running} of its capacity {now} "
        f"(elastic {cfg.min}..{cfg.max}: {grows})"
    )


def pool_waits(s: Session, settings: Settings, pools: set[str]) -> dict[str, str]:
    """For each elastic pool of `pools` whose slots are all taken, what its waiting tasks
    say (`describe_wait`)."""
    elastic = sorted(p for p in pools if p in settings.pool_capacity)
    if not elastic:
        return {}
    now = current(s, settings)
    out = {}
    for pool, load in loads(s, elastic).items():
        said = describe_wait(settings, pool, now.get(pool), load.running)
        if said is not None:
            out[pool] = said
    return out
