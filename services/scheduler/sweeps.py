"""The leader's periodic sweep: time-based kinds (TTL, clean, stats; compaction where the
policy tiers with a quiet merge) get a task once their interval (`sweep_minutes`) has
passed since the table's last task of that kind, on tables of every format that runs the
kind (`kinds.formats.runs_on`); on a Hudi table, whose registration judged TTL and clean
already (its baseline event), the first of each waits its interval from the registration
(`kinds.formats.judged_at_registration`). Idempotent: a second
sweep (or a second leader for a moment) finds the open task and creates nothing.
A table the sweep fails on (a stored policy that no longer validates, say) is skipped
and alerted (`lakewarden.isolation`): the others still get their tasks.

Scheduled tags (policy `tags`, `lakewarden.refs`): after the tasks, each table whose tags
are enabled, and that nothing holds, gets this period's tag on main's current snapshot,
unless it has it already (a metadata-only pyiceberg commit, outside any transaction).
The sweep remembers which period each table was tagged for, so a table's metadata is read
once per period, not once per sweep.

Cost: the live tables of every catalog are swept in batches of `sweep_batch_size`, each
batch one short fenced transaction that reads only its own tables' columns and last
tasks. A policy is parsed once per distinct (table settings, namespace defaults) pair,
not once per table, and a table none of whose time-based kinds is enabled costs no more
than that lookup. No transaction lasts the whole sweep: the lease row is never held
for long (`lakewarden.leader.check_fence`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, func, select, tuple_
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import TableRef, find_table
from lakewarden.catalogs.regions import in_region
from lakewarden.db.models import ManagedTable, NamespacePolicy, Task
from lakewarden.db.session import transaction
from lakewarden.isolation import PerTable
from lakewarden.kinds import REGISTRY
from lakewarden.kinds.base import Kind
from lakewarden.kinds.formats import judged_at_registration, runs_on
from lakewarden.leader import Fence, check_fence
from lakewarden.policy.model import KindPolicy, Policy, TagsPolicy, effective_policy, is_due
from lakewarden.refs import make_due_tag, tag_name, unwritable
from lakewarden.runtime import Runtime
from lakewarden.states import TableFormatName
from lakewarden.tables import LIVE, holds_on
from lakewarden.tasks.birth import open_task

log = logging.getLogger(__name__)

# What the sweep reads of a table: never the whole row.
_COLUMNS = (
    ManagedTable.id,
    ManagedTable.catalog,
    ManagedTable.namespace,
    ManagedTable.name,
    ManagedTable.format,
    ManagedTable.policy,
    ManagedTable.policy_version,
    ManagedTable.created_at,
)


def sweep_due_tasks(rt: Runtime, fence: Fence, now: datetime) -> list[int]:
    """Create the tasks that are due; returns their ids. A table the sweep fails on is
    skipped (its partial work rolled back to a savepoint) and alerted; the rest go on.
    Raises FencedOut, at the first batch after the lease moved on."""
    swept = [k for k in REGISTRY.values() if k.swept]
    if not swept:
        return []
    sweep = _Sweep(fence, swept, now)
    after = 0  # keyset: every live table once, whatever is registered meanwhile
    while True:
        with transaction(rt.engine) as s:
            check_fence(s, fence)
            rows = s.execute(
                select(*_COLUMNS)
                .where(LIVE, ManagedTable.id > after, in_region(fence.region))
                .order_by(ManagedTable.id)
                .limit(rt.settings.sweep_batch_size)
            ).all()
            if rows:
                sweep.batch(s, rows)
        if len(rows) < rt.settings.sweep_batch_size:
            break
        after = rows[-1].id
    made = make_tags(rt, sweep)
    with transaction(rt.engine) as s:
        check_fence(s, fence)
        sweep.isolated.record(s)
    if sweep.created:
        log.info("sweep created %d task(s): %s", len(sweep.created), sweep.created)
    if made:
        log.info("sweep made %d tag(s): %s", len(made), made)
    return sweep.created


# (database, catalog, table) -> the tag period it was last seen tagged for: once a table
# has this period's tag, its metadata is not read again until the next period.
_TAGGED: dict[tuple[str, str, str], str] = {}


def make_tags(rt: Runtime, sweep: _Sweep) -> list[str]:
    """This period's tag on each table of `sweep.tagging` that lacks it; returns
    `namespace.name@tag` of those made. A table that fails is alerted like any other."""
    made: list[str] = []
    for catalog, ref, policy in sweep.tagging:
        key = (rt.db_url, catalog, ref.dotted)
        period = tag_name(policy.every, sweep.now)
        if _TAGGED.get(key) == period:
            continue
        with sweep.isolated.table(ref.dotted):
            table = find_table(rt.catalogs.load(catalog), ref)
            if table is None:
                continue  # gone from the catalog: the table's own checks say so
            refused = unwritable(table, "a scheduled tag")
            if refused is not None:  # format v3: skipped, with the reason, until next period
                log.info("sweep: no tag on %s: %s", ref.dotted, refused)
                _TAGGED[key] = period
                continue
            name = make_due_tag(table, policy, sweep.now)
            if name is not None:
                made.append(f"{ref.dotted}@{name}")
            if period in table.metadata.refs:  # made now, or before
                _TAGGED[key] = period
    return made


@dataclass
class _Sweep:
    fence: Fence
    swept: list[Kind]
    now: datetime

    def __post_init__(self) -> None:
        self.created: list[int] = []
        self.isolated = PerTable("sweep")
        # (table settings, namespace defaults) as JSON -> the enabled time-based sections
        # of that effective policy, or the error parsing it raised (raised again per table).
        self._sections: dict[tuple[str, str], list[tuple[Kind, KindPolicy]] | Exception] = {}
        self._tags: dict[tuple[str, str], TagsPolicy | None] = {}  # the same pairs' tags
        # Tables to tag: those whose tags are enabled and nothing holds (a writer's blocker,
        # a pause, the freeze: a tag is a commit too); a held one is tagged once it is free.
        self.tagging: list[tuple[str, TableRef, TagsPolicy]] = []

    def batch(self, s: Session, rows: Sequence[Row[Any]]) -> None:
        defaults = _namespace_defaults(s, {(r.catalog, r.namespace) for r in rows})
        enabled: dict[int, list[tuple[Kind, KindPolicy]]] = {}
        tagged: dict[int, tuple[str, TableRef, TagsPolicy]] = {}
        for row in rows:
            with self.isolated.table(f"{row.namespace}.{row.name}"):  # pure: no savepoint
                ns_policy = defaults.get((row.catalog, row.namespace))
                # A Hudi or Delta table gets the time-based kinds its format runs (TTL,
                # clean); tags are Iceberg refs.
                sections = [
                    (kind, section)
                    for kind, section in self._enabled(row.policy, ns_policy)
                    if runs_on(row.format, kind.name)
                ]
                if sections:
                    enabled[row.id] = sections
                tags = self._tags.get(_key(row.policy, ns_policy))
                if tags is not None and row.format == TableFormatName.ICEBERG:
                    tagged[row.id] = (row.catalog, TableRef(row.namespace, row.name), tags)
        if tagged:
            held = {i for i, holds in holds_on(s, tagged).items() if holds}
            self.tagging += [t for i, t in tagged.items() if i not in held]
        if not enabled:
            return
        last = {
            (table_id, kind): at
            for table_id, kind, at in s.execute(
                select(Task.table_id, Task.kind, func.max(Task.created_at))
                .where(
                    Task.table_id.in_(list(enabled)),
                    Task.kind.in_([k.name for k in self.swept]),
                )
                .group_by(Task.table_id, Task.kind)
            )
        }
        for row in rows:
            name, due = f"{row.namespace}.{row.name}", []
            with self.isolated.table(name):
                due = [
                    (kind, section, why)
                    for kind, section in enabled.get(row.id, [])
                    for is_it, why in [
                        is_due(
                            section,
                            last.get((row.id, kind.name)),
                            self.now,
                            kind=kind.name,
                            judged_at=(
                                row.created_at
                                if judged_at_registration(row.format, kind.name)
                                else None
                            ),
                        )
                    ]
                    if is_it
                ]
            if due and name not in self.isolated.failed:
                with self.isolated.table(name, s):
                    self.created += self._create(s, row, due)

    def _enabled(
        self, table_policy: dict[str, Any] | None, namespace_policy: dict[str, Any] | None
    ) -> list[tuple[Kind, KindPolicy]]:
        key = _key(table_policy, namespace_policy)
        found = self._sections.get(key)
        if found is None:
            try:
                policy = effective_policy(table_policy, namespace_policy)
                found = _swept_sections(policy, self.swept)
                self._tags[key] = policy.tags if policy.tags.enabled else None
            except Exception as exc:
                self._sections[key] = exc
                raise
            self._sections[key] = found
        if isinstance(found, Exception):
            # The same error for each table with these settings, with a fresh traceback
            # (raising one object again and again would grow its traceback table by table).
            raise found.with_traceback(None)
        return found

    def _create(
        self, s: Session, row: Row[Any], due: list[tuple[Kind, KindPolicy, str]]
    ) -> list[int]:
        created: list[int] = []
        for kind, section, why in due:
            reason = f"{kind.name} sweep: {why}"
            task_id = open_task(
                s,
                table_id=row.id,
                policy_version=row.policy_version,
                kind=kind.name,
                section=section,
                actor=self.fence.holder,
                trigger={"source": "sweep", "reason": reason, "leader_epoch": self.fence.epoch},
            )
            if task_id is not None:
                created.append(task_id)
        return created


def _key(table_policy: dict[str, Any] | None, namespace_policy: dict[str, Any] | None) -> Any:
    return json.dumps(table_policy, sort_keys=True), json.dumps(namespace_policy, sort_keys=True)


def _swept_sections(policy: Policy, swept: list[Kind]) -> list[tuple[Kind, KindPolicy]]:
    sections = [(kind, kind.section(policy)) for kind in swept]
    return [(k, sec) for k, sec in sections if sec.enabled and sec.sweep_minutes() is not None]


def _namespace_defaults(
    s: Session, namespaces: set[tuple[str, str]]
) -> dict[tuple[str, str], dict[str, Any]]:
    """The defaults of the batch's namespaces, in one query."""
    rows = s.execute(
        select(NamespacePolicy.catalog, NamespacePolicy.namespace, NamespacePolicy.policy).where(
            tuple_(NamespacePolicy.catalog, NamespacePolicy.namespace).in_(list(namespaces))
        )
    )
    return {(catalog, namespace): policy for catalog, namespace, policy in rows}
