"""What every maintenance kind provides, as plain functions collected in a `Kind`.

- `event_verdict`: from a commit's snapshot summary alone (cheap, in the API), does the
  table need this kind now? None for kinds driven only by sweeps.
- `plan`: from the table's real metadata (pyiceberg, in a worker), the concrete job or
  the reason there is nothing to do.
- `run`: execute a plan with Iceberg's own Spark procedures (in the scheduler).
- `history`: what the planner needs from the table's past runs (read in the caller's
  session, passed to `plan` as keyword arguments); None for most kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyiceberg.table import Table

from lakewarden.catalogs.catalog import TableRef
from lakewarden.outcomes import PlanRejected
from lakewarden.policy.model import KindPolicy

__all__ = ["PlanRejected"]  # kinds raise it; it lives in lakewarden.outcomes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from sqlalchemy.orm import Session


@dataclass(frozen=True)
class Verdict:
    needed: bool
    reason: str
    metrics: dict[str, Any] = field(default_factory=dict)
    expected_gain: dict[str, Any] = field(default_factory=dict)
    # Needed, but not for this many seconds yet: the task opens now (so later commits find
    # it open) and its planning waits (`PlanOutcome.retry_in_s`).
    wait_s: float | None = None


@dataclass(frozen=True)
class EventFacts:
    """What the API knows when a commit arrives, without listing files."""

    summary: dict[str, Any]  # the newest snapshot's summary
    # data files added by writers' commits since the last task of this kind was created
    files_added_since_last_task: int
    # how the last task of this kind ended (None: no task yet, or still open)
    last_task_state: str | None = None


@dataclass(frozen=True)
class PlanOutcome:
    plan: dict[str, Any] | None  # None: nothing worth doing (the reason says why)
    reason: str
    # With no plan: not yet, plan again in this many seconds (the task goes back to
    # pending, no attempt spent) instead of skipping it.
    retry_in_s: float | None = None


@dataclass(frozen=True)
class JobResult:
    metrics: dict[str, Any]
    committed_snapshot_id: int | None


EventVerdict = Callable[[Any, EventFacts], Verdict]
Planner = Callable[[Any, Table, datetime], PlanOutcome]
Runner = Callable[["SparkSession", str, TableRef, dict[str, Any]], JobResult]
History = Callable[["Session", int], dict[str, Any]]  # (session, managed table id)


@dataclass(frozen=True)
class Kind:
    name: str
    plan: Planner
    run: Runner
    event_verdict: EventVerdict | None = None
    swept: bool = False  # also created by the leader's periodic sweep
    history: History | None = None

    def plan_context(self, session: Session, table_id: int) -> dict[str, Any]:
        """The keyword arguments of `plan` from the table's past runs (the worker and
        explain both ask, so explain shows what the worker would plan)."""
        return self.history(session, table_id) if self.history is not None else {}

    def section(self, policy: Any) -> KindPolicy:
        return policy.for_kind(self.name)
