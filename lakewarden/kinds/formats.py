"""How the kinds judge and plan a table of a format with its own planners (Hudi, Delta),
by format: evaluation and the worker ask here, never a format's name. An Iceberg table is
planned by each kind's own `Kind.plan` (pyiceberg); a format listed here is judged and
planned from its own log and files (no JVM), and its jobs run in its own Spark family
(`lakewarden.jobs.execute`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.formats.delta.timeline import NotADeltaTable
from lakewarden.formats.hudi.timeline import NotAHudiTable
from lakewarden.kinds import delta, hudi
from lakewarden.kinds.base import PlanOutcome, Verdict
from lakewarden.policy.model import KindPolicy, Policy

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def _no_context(session: Session, table_id: int) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class FormatPlanner:
    # (kind, its policy section, the table's catalog, the table, `context`'s answer)
    plan: Callable[[str, KindPolicy, CatalogEntry, TableRef, dict[str, Any]], PlanOutcome]
    # (session, table id, its policy, its log as just read): the verdict of each kind that
    # runs on the format, when its log moved (`lakewarden.evaluate`); a kind left out is
    # recorded as not running on the format yet; a time-swept kind (clean) given here is
    # judged by the log too
    event_verdicts: Callable[[Session, int, Policy, Any], dict[str, Verdict]]
    # what the planner needs from the table's past runs, read in the caller's session
    context: Callable[[Session, int], dict[str, Any]] = _no_context
    gone: type[Exception] = LookupError  # the table is no longer at its path
    kinds: frozenset[str] = frozenset()  # the kinds that run on the format
    # the time-swept kinds `event_verdicts` judges too, so the registration's baseline
    # judged them: the sweep's first task of one waits its interval from registration
    judged_at_registration: frozenset[str] = frozenset()


def runs_on(table_format: str, kind: str) -> bool:
    """Whether `kind` runs on tables of `table_format` (every kind runs on Iceberg)."""
    planner = PLANNERS.get(table_format)
    return planner is None or kind in planner.kinds


def judged_at_registration(table_format: str, kind: str) -> bool:
    """Whether registering a table of `table_format` judged the time-swept `kind` already
    (its baseline event's verdicts), so that the sweep need not open one at once."""
    planner = PLANNERS.get(table_format)
    return planner is not None and kind in planner.judged_at_registration


PLANNERS: dict[str, FormatPlanner] = {
    "hudi": FormatPlanner(
        hudi.plan_table,
        hudi.event_verdicts,
        hudi.context,
        NotAHudiTable,
        hudi.KINDS,
        judged_at_registration=frozenset({"clean", "ttl", "stats"}),
    ),
    "delta": FormatPlanner(
        delta.plan,
        delta.event_verdicts,
        delta.context,
        NotADeltaTable,
        delta.KINDS,
        judged_at_registration=frozenset({"stats"}),
    ),
}
