"""Auto-management: management rules, and adopting the tables of a catalog they cover.

A rule (`ManagementRule`) covers tables of one catalog: those whose namespace matches its
`namespace` glob, whose name matches one of its `include` globs and none of its `exclude`
globs. Globs are `fnmatchcase` globs of identifier characters, dots and `*` `?` (no
`[classes]`, so they read the same as grant globs and SQL LIKE):

- `*` matches any run of characters, dots included: it matches across namespace levels.
  `sales*` matches `sales`, `sales_eu` and `sales.eu.daily`; `sales.*` only the levels
  under `sales`; `*` every namespace. (The same as a grant's namespace glob, and the
  table list's `namespace` filter.)
- An include or exclude glob without a dot is matched against the table's name; one with
  a dot against `namespace.name`, so `sales.tmp_*` excludes `tmp_*` tables of `sales`
  only (and `*.tmp_*` those of every namespace, since `*` matches dots too).
- A disabled rule matches nothing.

Several rules may cover a table: the most specific wins, so the result never depends on
the order rules are read in: a rule naming the namespace exactly (no `*` or `?`) beats a
glob, then the longer namespace pattern beats the shorter, then the lowest id. Only rules
that match count: a table excluded by the most specific rule is still managed by a wider
rule that covers it (exclude it there too).

`adopt` brings a catalog's managed tables in line with its listing, in a few set-based
statements (see its docstring). Retirement reasons it writes and reads:

- `DROPPED`: the table left the catalog. A rule (or, for a registered table, its
  registration) takes it back if it reappears.
- `OPTED_OUT`: its owner opted it out (`opt_out`); no rule takes it back.
- `OPT_OUT_CLEARED`: the opt-out was cleared; a rule that covers it takes it back.
- `RULE_REMOVED`: the rule that adopted it was removed, with its tables; another rule
  that covers it takes it back.
- anything else (unregistered through the API: no reason; maintained by another
  optimizer): no rule takes it back; registering it explicitly does.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, NamedTuple

from pydantic import ValidationError
from sqlalchemy import case, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import IDENTIFIER, TableRef
from lakewarden.db.models import (
    Catalog,
    ManagedTable,
    ManagementRule,
    NamespacePolicy,
    PolicyVersion,
)
from lakewarden.policy.model import effective_policy, validation_problems
from lakewarden.states import PATH_CATALOGS, CatalogType, TableFormatName
from lakewarden.tables import cancel_open_tasks, lock_namespace, retire_tables

DROPPED = "dropped from the catalog"
OPTED_OUT = "opted out"
OPT_OUT_CLEARED = "opt-out cleared"
RULE_REMOVED = "its management rule was removed"
# Retired for these reasons, a table a rule covers is managed again when it is listed.
REVIVABLE = (DROPPED, OPT_OUT_CLEARED, RULE_REMOVED)

# A glob: identifier characters, dots (namespace levels, or namespace.name) and * ?.
GLOB = re.compile(r"\A[A-Za-z0-9_.*?]{1,255}\Z")
MAX_GLOBS = 100
# managed_tables.namespace and .name are varchar(255)
MAX_NAME = 255


class InvalidRule(ValueError):
    """A rule that cannot be stored as given (the message says what to fix)."""


def check_glob(what: str, glob: str) -> None:
    if not isinstance(glob, str) or not GLOB.match(glob):
        raise InvalidRule(
            f"invalid {what} glob {glob!r}: use letters, digits, underscores, dots and the "
            "glob characters * and ? (1 to 255 of them)"
        )


def check_rule(namespace: str, include: Sequence[str], exclude: Sequence[str]) -> None:
    """InvalidRule unless the globs are well formed (see the module's docstring)."""
    check_glob("namespace", namespace)
    if not include:
        raise InvalidRule("include needs at least one glob ('*' for every table)")
    for what, globs in (("include", include), ("exclude", exclude)):
        if len(globs) > MAX_GLOBS:
            raise InvalidRule(f"{what} has {len(globs)} globs; at most {MAX_GLOBS}")
        for glob in globs:
            check_glob(what, glob)


def rule_actor(rule_id: int) -> str:
    """`managed_by` of the tables a rule adopted, and the author of their policy version."""
    return f"rule:{rule_id}"


def is_glob(pattern: str) -> bool:
    return "*" in pattern or "?" in pattern


def _name_matches(glob: str, namespace: str, name: str) -> bool:
    return fnmatchcase(f"{namespace}.{name}" if "." in glob else name, glob)


def covers(rule: ManagementRule, namespace: str, name: str) -> bool:
    """Whether the rule covers the table (its catalog already checked)."""
    return (
        rule.enabled is not False  # None: a rule not yet flushed, enabled by default
        and fnmatchcase(namespace, rule.namespace)
        and any(_name_matches(g, namespace, name) for g in rule.include)
        and not any(_name_matches(g, namespace, name) for g in rule.exclude or ())
    )


def specificity(rule: ManagementRule) -> tuple[bool, int, int]:
    """The sort key of rules, most specific first: an exact namespace, then the longer
    namespace pattern, then the lowest id."""
    return (is_glob(rule.namespace), -len(rule.namespace), rule.id)


def matching_rule(
    rules: Iterable[ManagementRule], namespace: str, name: str
) -> ManagementRule | None:
    """The rule that manages the table, of `rules` (one catalog's), or None."""
    found = [r for r in rules if covers(r, namespace, name)]
    return min(found, key=specificity) if found else None


class _Matcher:
    """`matching_rule` for many tables: the rules whose namespace glob matches, most
    specific first, worked out once per namespace."""

    def __init__(self, rules: Iterable[ManagementRule]) -> None:
        self.rules = sorted((r for r in rules if r.enabled is not False), key=specificity)
        self._by_namespace: dict[str, list[ManagementRule]] = {}

    def __call__(self, namespace: str, name: str) -> ManagementRule | None:
        candidates = self._by_namespace.get(namespace)
        if candidates is None:
            candidates = [r for r in self.rules if fnmatchcase(namespace, r.namespace)]
            self._by_namespace[namespace] = candidates
        for rule in candidates:
            if covers(rule, namespace, name):
                return rule
        return None


# --- Adoption --------------------------------------------------------------------------


@dataclass
class AdoptResult:
    """What `adopt` did: the ids of the rows it adopted (inserted), revived (retired rows
    taken back), renamed and retired; and what it left out, and why."""

    adopted: list[int] = field(default_factory=list)
    revived: list[int] = field(default_factory=list)
    renamed: list[int] = field(default_factory=list)
    retired: list[int] = field(default_factory=list)
    cancelled_tasks: list[int] = field(default_factory=list)
    # listed tables in some rule's scope that stay unmanaged: opted out, unregistered...
    held_back: int = 0
    # why some listed tables were not adopted (invalid names, a rule's policy that is not
    # valid over a namespace's current defaults), one line per cause
    problems: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        """How many rows changed, by change: all zero when there was nothing to do
        (`held_back` is not a change, so it is not counted here)."""
        return {
            "adopted": len(self.adopted),
            "revived": len(self.revived),
            "renamed": len(self.renamed),
            "retired": len(self.retired),
        }

    @property
    def changed(self) -> list[int]:
        """Rows the caller should refresh (load and ingest): adopted and revived ones."""
        return sorted(self.adopted + self.revived)


class _Known(NamedTuple):
    """A row of the catalog that adoption may change, and whether the listing has it."""

    id: int
    namespace: str
    name: str
    metadata_location: str | None
    live: bool
    retired_reason: str | None
    opt_out: bool
    managed_by: str
    listed: bool


# The difference between the listing and what lakewarden knows, computed by Postgres so
# that only what may change comes back (nothing, in the steady state), not the whole fleet:
# the listed tables lakewarden does not know ('new'), and the known rows that are live and
# no longer listed (when the listing is complete), retired and listed, or no longer listed
# at the metadata location of a new one (a rename; in a partial listing only from a row
# already dropped).
_DIFF = text(
    f"""
    WITH listed AS MATERIALIZED (
        SELECT DISTINCT ON (namespace, name) namespace, name, location
        FROM jsonb_to_recordset(CAST(:rows AS jsonb))
             AS l(namespace text, name text, location text)
    ), new AS MATERIALIZED (
        SELECT l.namespace, l.name, l.location FROM listed l
        WHERE NOT EXISTS (
            SELECT FROM managed_tables m
            WHERE m.catalog = :catalog AND m.namespace = l.namespace AND m.name = l.name
        )
    )
    SELECT 'new', NULL::bigint, namespace, name, location, NULL::bool, NULL, NULL::bool,
           NULL, true
    FROM new
    UNION ALL
    SELECT 'known', m.id, m.namespace, m.name, m.metadata_location, m.retired_at IS NULL,
           m.retired_reason, m.opt_out, m.managed_by, l.name IS NOT NULL
    FROM managed_tables m
    LEFT JOIN listed l ON l.namespace = m.namespace AND l.name = m.name
    WHERE m.catalog = :catalog AND (
        (l.name IS NULL AND m.retired_at IS NULL AND :complete)
        OR (l.name IS NOT NULL AND m.retired_at IS NOT NULL)
        OR (l.name IS NULL AND (:complete OR m.retired_reason = '{DROPPED}')
            AND m.metadata_location IN (SELECT location FROM new))
    )
    """
)


def _valid_key(namespace: str, name: str) -> bool:
    return (
        isinstance(namespace, str)
        and isinstance(name, str)
        and len(namespace) <= MAX_NAME
        and bool(IDENTIFIER.match(name))
        and all(IDENTIFIER.match(level) for level in namespace.split("."))
    )


def _rows_json(rows: Iterable[dict[str, Any]]) -> str:
    return json.dumps(list(rows), separators=(",", ":"))


_LOCK_ROWS = text(
    "SELECT id FROM managed_tables WHERE id = ANY(CAST(:ids AS bigint[])) ORDER BY id FOR UPDATE"
)

# Insert the adopted tables (sorted, so two replicas adopting at once wait for each other
# instead of deadlocking), and policy version 1 of each, authored by its rule.
_INSERT = text(
    """
    WITH listed AS (
        SELECT v.namespace, v.name, v.rule_id, v.format, r.policy
        FROM jsonb_to_recordset(CAST(:rows AS jsonb))
             AS v(namespace text, name text, rule_id bigint, format text)
        JOIN jsonb_to_recordset(CAST(:rules AS jsonb)) AS r(id bigint, policy jsonb)
          ON r.id = v.rule_id
        ORDER BY v.namespace, v.name
    ), adopted AS (
        INSERT INTO managed_tables
            (catalog, namespace, name, format, policy, policy_version, managed_by)
        SELECT :catalog, namespace, name, format, policy, 1, 'rule:' || rule_id FROM listed
        ON CONFLICT (catalog, namespace, name) DO NOTHING
        RETURNING id, policy, managed_by
    ), versions AS (
        INSERT INTO policy_versions (table_id, version, policy, author)
        SELECT id, 1, policy, managed_by FROM adopted
    )
    SELECT id FROM adopted
    """
)

# Take back retired rows a rule covers (under that rule's policy, as a new version) or that
# were registered and dropped (their own policy). Guarded: still retired, for a revivable
# reason, not opted out, under the same name (a concurrent change may have moved it).
_REVIVE = text(
    f"""
    WITH listed AS (
        SELECT v.id, v.namespace, v.name, v.rule_id, v.format, r.policy
        FROM jsonb_to_recordset(CAST(:rows AS jsonb))
             AS v(id bigint, namespace text, name text, rule_id bigint, format text)
        LEFT JOIN jsonb_to_recordset(CAST(:rules AS jsonb)) AS r(id bigint, policy jsonb)
          ON r.id = v.rule_id
    ), revived AS (
        UPDATE managed_tables m SET
            retired_at = NULL,
            retired_reason = NULL,
            managed_by = CASE WHEN l.rule_id IS NULL THEN m.managed_by
                              ELSE 'rule:' || l.rule_id END,
            policy = coalesce(l.policy, m.policy),
            policy_version = m.policy_version + (l.rule_id IS NOT NULL)::int,
            -- created again, perhaps in another format (a Hive catalog's name)
            format = coalesce(l.format, m.format),
            -- a table created again: the first refresh loads it and ingests its commits
            metadata_location = NULL,
            health_score = NULL,
            health_signals = NULL,
            health_measured_at = NULL,
            unhealthy_since = NULL,
            updated_at = now()
        FROM listed l
        WHERE m.id = l.id AND m.namespace = l.namespace AND m.name = l.name
          AND m.retired_at IS NOT NULL AND NOT m.opt_out
          AND m.retired_reason IN ({", ".join(f"'{r}'" for r in REVIVABLE)})
        RETURNING m.id, m.policy, m.policy_version, m.managed_by, l.rule_id
    ), versions AS (
        INSERT INTO policy_versions (table_id, version, policy, author)
        SELECT id, policy_version, policy, managed_by FROM revived WHERE rule_id IS NOT NULL
    )
    SELECT id FROM revived
    """
)

_RENAME = text(
    """
    UPDATE managed_tables SET
        namespace = :namespace, name = :name, updated_at = now(),
        retired_at = CASE WHEN retired_reason = :dropped THEN NULL ELSE retired_at END,
        retired_reason = CASE WHEN retired_reason = :dropped THEN NULL ELSE retired_reason END
    WHERE id = :id AND namespace = :old_namespace AND name = :old_name
      AND metadata_location = :location
    RETURNING id
    """
)


def adopt(
    session: Session,
    catalog: str,
    listing: Iterable[tuple[str, str, str | None]],
    *,
    actor: str,
    complete: bool = True,
    formats: Mapping[tuple[str, str], str] | None = None,
) -> AdoptResult:
    """Bring the managed tables of `catalog` in line with `listing`, the catalog's tables as
    (namespace, name, metadata_location), in the caller's transaction:

    - renamed: a listed table lakewarden does not know whose metadata location equals
      that of exactly one known row no longer listed (live, or retired for any reason) is
      that table renamed: the row takes the new name, its history kept; a row dropped
      earlier is live again, any other retired row stays retired (an opt-out follows the
      table). Rows never refreshed (no metadata location yet) cannot be recognised.
    - adopted: a listed table not known that a rule covers (`matching_rule`) is inserted
      with the rule's policy (`managed_by` "rule:<id>", policy version 1 authored
      "rule:<id>"), its metadata location left NULL so that the first refresh loads it and
      ingests its commits (`AdoptResult.changed`: the caller decides when).
    - revived: a listed table retired for a revivable reason (`REVIVABLE`), not opted out,
      that was registered through the API and dropped (with its own policy: a
      registration outranks rules), or that a rule covers (under that rule's policy, as a
      new version), is managed again, as a table created anew (metadata location and
      health reset).
    - retired (only when `complete`): a live row no longer listed, whether a rule adopted
      it or it was registered, is retired as `DROPPED` with its history kept, and its open
      tasks are cancelled.
    - nothing else: opted-out, unregistered and otherwise retired tables stay so
      (`held_back` counts those in a rule's scope).

    `formats`: the format of each listed (namespace, name) that is not an Iceberg table
    (a Hive catalog's Hudi and Delta tables); a table adopted takes it, and so does one
    revived when `formats` is given (a revived row keeps its format otherwise).

    `complete=False`: `listing` is only some of the catalog's tables (those a commit
    notification named): nothing is retired, and only rows already dropped are candidates
    for a rename. With `complete=True` an empty listing retires every table of the catalog:
    pass only a listing that was read completely.

    A rule's policy was checked when the rule was stored; over a namespace whose defaults
    changed since, it may no longer be valid: those tables are not adopted and
    `problems` says why. Tables are never loaded here.

    Safe to run concurrently, e.g. by two API replicas with the same listing: inserts are
    ON CONFLICT DO NOTHING, every update is guarded by the state it expects, rows are
    locked in id order before they change, and the namespaces' policy locks are taken
    (shared) as a registration takes them, so nothing is done twice and nothing deadlocks.
    `actor`: who cancels the retired tables' tasks (the caller's process)."""
    result = AdoptResult()

    def format_of(key: tuple[str, str]) -> str:
        return (formats or {}).get(key, TableFormatName.ICEBERG.value)

    rules = list(
        session.scalars(
            select(ManagementRule)
            .where(ManagementRule.catalog == catalog, ManagementRule.enabled)
            .order_by(ManagementRule.id)
        )
    )
    unknown, known = _diff(session, catalog, listing, complete, result)
    renames = _renames(unknown, known)
    plan = _plan(unknown, known, renames, _Matcher(rules), complete, result)

    # Registrations and policy changes of these namespaces wait, as for one registration.
    namespaces = {ns for ns, _, _ in plan.adopt} | {k.namespace for k, _ in plan.revive}
    namespaces |= {new[0] for _, new in renames}
    for ns in sorted(namespaces):  # in one order: two adoptions never deadlock
        lock_namespace(session, catalog, ns, exclusive=False)

    # A rule's policy over each namespace's current defaults: the adoptions it would make
    # invalid are left out (and said why).
    valid = _valid_policies(
        session,
        catalog,
        {(rule.id, ns) for ns, _, rule in plan.adopt}
        | {(rule.id, k.namespace) for k, rule in plan.revive if rule is not None},
        {rule.id: rule for rule in rules},
        result.problems,
    )
    plan.adopt = [r for r in plan.adopt if (r[2].id, r[0]) in valid]
    plan.revive = [
        (k, rule) for k, rule in plan.revive if rule is None or (rule.id, k.namespace) in valid
    ]

    # Lock every existing row that changes, in id order, before changing any.
    changing = {old.id for old, _ in renames} | {k.id for k, _ in plan.revive}
    touched = sorted(changing | set(plan.retire))
    if touched:
        session.execute(_LOCK_ROWS, {"ids": touched})

    result.renamed = _rename(session, renames)
    rule_policies = _rows_json({"id": r.id, "policy": r.policy or {}} for r in rules)
    if plan.revive:
        rows = _rows_json(
            {
                "id": k.id,
                "namespace": k.namespace,
                "name": k.name,
                "rule_id": None if rule is None else rule.id,
                "format": None if formats is None else format_of((k.namespace, k.name)),
            }
            for k, rule in plan.revive
        )
        found = session.execute(_REVIVE, {"rows": rows, "rules": rule_policies})
        result.revived = sorted(found.scalars())

    if plan.retire:
        result.retired, result.cancelled_tasks = retire_tables(
            session, plan.retire, reason=DROPPED, by=actor
        )

    if plan.adopt:
        rows = _rows_json(
            {"namespace": ns, "name": n, "rule_id": rule.id, "format": format_of((ns, n))}
            for ns, n, rule in sorted(plan.adopt, key=lambda r: (r[0], r[1]))
        )
        found = session.execute(_INSERT, {"rows": rows, "rules": rule_policies, "catalog": catalog})
        result.adopted = sorted(found.scalars())
    session.expire_all()  # rows changed under the ORM's feet
    return result


_Key = tuple[str, str]  # (namespace, name)
_Rename = tuple[_Known, _Key]  # the row, and the name it takes


@dataclass
class _Plan:
    """What `adopt` will do, before the rules' policies are checked against the namespaces'
    defaults."""

    adopt: list[tuple[str, str, ManagementRule]] = field(default_factory=list)
    revive: list[tuple[_Known, ManagementRule | None]] = field(default_factory=list)
    retire: list[int] = field(default_factory=list)


def _diff(
    session: Session,
    catalog: str,
    listing: Iterable[tuple[str, str, str | None]],
    complete: bool,
    result: AdoptResult,
) -> tuple[dict[_Key, str | None], list[_Known]]:
    """The listed tables no row knows (key -> metadata location), and the known rows (with
    whether each is listed), in one statement. Names lakewarden cannot manage are counted
    in `result.problems`."""
    listed = _rows_json(
        {"namespace": namespace, "name": name, "location": location}
        for namespace, name, location in listing
        if isinstance(namespace, str) and isinstance(name, str)
    )
    unknown: dict[_Key, str | None] = {}
    known: list[_Known] = []
    invalid = 0
    for kind, *fields in session.execute(
        _DIFF, {"rows": listed, "catalog": catalog, "complete": complete}
    ):
        if kind == "known":
            known.append(_Known(*fields))
        elif _valid_key(fields[1], fields[2]):
            unknown[(fields[1], fields[2])] = fields[3]
        else:
            invalid += 1
    if invalid:
        result.problems.append(
            f"{invalid} listed table(s) have names lakewarden cannot manage (letters, digits "
            "and underscores, starting with a letter or underscore; namespaces of such levels "
            "joined by dots)"
        )
    return unknown, known


def _renames(unknown: dict[_Key, str | None], known: list[_Known]) -> list[_Rename]:
    """One unknown listed table and one vanished row that share a metadata location: that
    row renamed. Any ambiguity (two of either at a location) is no rename."""
    vanished = [k for k in known if not k.listed and k.metadata_location]
    new_at: dict[str, list[_Key]] = defaultdict(list)
    for key, location in unknown.items():
        if location:
            new_at[location].append(key)
    old_at: dict[str, list[_Known]] = defaultdict(list)
    for k in vanished:
        if k.metadata_location in new_at:
            old_at[k.metadata_location].append(k)
    return [
        (olds[0], new_at[location][0])
        for location, olds in sorted(old_at.items())
        if len(olds) == 1 and len(new_at[location]) == 1
    ]


def _plan(
    unknown: dict[_Key, str | None],
    known: list[_Known],
    renames: list[_Rename],
    match: _Matcher,
    complete: bool,
    result: AdoptResult,
) -> _Plan:
    """Adoptions and revivals, each under the rule that covers it, and the rows to retire."""
    plan = _Plan()
    renamed_to = {new for _, new in renames}
    renamed_from = {old.id for old, _ in renames}
    for key in unknown:
        if key not in renamed_to:
            rule = match(*key)
            if rule is not None:
                plan.adopt.append((*key, rule))
    for k in known:
        if not k.listed or k.live:
            continue
        rule = match(k.namespace, k.name)
        revivable = not k.opt_out and k.retired_reason in REVIVABLE
        if revivable and k.managed_by == "api" and k.retired_reason == DROPPED:
            plan.revive.append((k, None))  # registered: it keeps its own policy
        elif revivable and rule is not None:
            plan.revive.append((k, rule))
        elif rule is not None:
            result.held_back += 1
    plan.retire = [
        k.id for k in known if complete and k.live and not k.listed and k.id not in renamed_from
    ]
    return plan


def _rename(session: Session, renames: list[_Rename]) -> list[Any]:
    """Each row takes its new name (a savepoint each: a concurrent adoption may have taken
    the name first, and then that rename is not made)."""
    renamed = []
    for old, (namespace, name) in renames:
        try:
            with session.begin_nested():
                done = session.execute(
                    _RENAME,
                    {
                        "id": old.id,
                        "namespace": namespace,
                        "name": name,
                        "old_namespace": old.namespace,
                        "old_name": old.name,
                        "location": old.metadata_location,
                        "dropped": DROPPED,
                    },
                ).scalar_one_or_none()
        except IntegrityError:  # a concurrent adoption took the new name first
            continue
        if done is not None:
            renamed.append(done)
    return renamed


def _valid_policies(
    session: Session,
    catalog: str,
    pairs: set[tuple[int, str]],
    rules: dict[int, ManagementRule],
    problems: list[str],
) -> set[tuple[int, str]]:
    """Those (rule id, namespace) pairs whose rule's policy, over the namespace's current
    defaults, is a valid policy; one line in `problems` for each that is not."""
    if not pairs:
        return set()
    namespaces = sorted({ns for _, ns in pairs})
    defaults: dict[str, dict[str, Any]] = dict(
        session.execute(
            select(NamespacePolicy.namespace, NamespacePolicy.policy).where(
                NamespacePolicy.catalog == catalog, NamespacePolicy.namespace.in_(namespaces)
            )
        ).all()
    )
    valid = set()
    for rule_id, ns in sorted(pairs):
        try:
            effective_policy(rules[rule_id].policy or {}, defaults.get(ns))
        except ValidationError as exc:
            why = validation_problems(exc)
            problems.append(
                f"rule {rule_id}: its policy over the defaults of namespace {ns!r} is not "
                f"valid ({why}); that namespace's tables were not adopted"
            )
        else:
            valid.add((rule_id, ns))
    return valid


# --- Opting a table out ----------------------------------------------------------------


@dataclass(frozen=True)
class OptOut:
    """A table's row after an opt-out change; `cancelled_tasks`: its open tasks cancelled."""

    row: ManagedTable
    cancelled_tasks: list[int]


def opt_out(session: Session, catalog: str, ref: TableRef, *, by: str) -> OptOut:
    """Opt the table out of auto-management: `opt_out` set, retired as `OPTED_OUT` (its
    history kept, its open tasks cancelled) if it was managed. A table lakewarden does not
    know yet (not adopted, perhaps not even created) gets a retired row that records the
    opt-out, so no rule adopts it later (in a path catalog's format: its tables are all of
    it). Idempotent; safe against a concurrent adoption (the row is locked, or the insert
    conflicts and the existing row is updated)."""
    kind = session.scalar(select(Catalog.type).where(Catalog.name == catalog))
    fmt = PATH_CATALOGS.get(CatalogType(kind)) if kind else None
    inserted = session.execute(
        insert(ManagedTable)
        .values(
            catalog=catalog,
            namespace=ref.namespace,
            name=ref.name,
            policy={},
            opt_out=True,
            retired_at=func.now(),
            retired_reason=OPTED_OUT,
            format=(fmt or TableFormatName.ICEBERG).value,
        )
        .on_conflict_do_nothing(
            index_elements=[ManagedTable.catalog, ManagedTable.namespace, ManagedTable.name]
        )
        .returning(ManagedTable.id)
    ).scalar_one_or_none()
    cancelled: list[int] = []
    if inserted is not None:
        session.add(PolicyVersion(table_id=inserted, version=1, policy={}, author=by))
        table_id = inserted
    else:
        table_id, was_live = session.execute(
            select(ManagedTable.id, ManagedTable.retired_at.is_(None))
            .where(
                ManagedTable.catalog == catalog,
                ManagedTable.namespace == ref.namespace,
                ManagedTable.name == ref.name,
            )
            .with_for_update()
        ).one()
        session.execute(
            update(ManagedTable)
            .where(ManagedTable.id == table_id)
            .values(
                opt_out=True,
                retired_reason=OPTED_OUT,
                retired_at=func.coalesce(ManagedTable.retired_at, func.now()),
                updated_at=func.now(),
            )
            .execution_options(synchronize_session=False)
        )
        if was_live:
            cancelled = cancel_open_tasks(
                session, [table_id], by=by, reason=f"table retired: {OPTED_OUT}"
            )
    session.flush()
    row = session.get(ManagedTable, table_id, populate_existing=True)
    assert row is not None
    return OptOut(row, cancelled)


def clear_opt_out(session: Session, catalog: str, ref: TableRef) -> ManagedTable | None:
    """Clear the table's opt-out: a rule that covers it adopts it again at the next
    adoption (its retirement reason becomes `OPT_OUT_CLEARED`); registering it explicitly
    also manages it again. Idempotent: a table not opted out is left as it is. None if
    lakewarden has no row for the table."""
    key = (
        ManagedTable.catalog == catalog,
        ManagedTable.namespace == ref.namespace,
        ManagedTable.name == ref.name,
    )
    table_id = session.execute(
        update(ManagedTable)
        .where(*key, ManagedTable.opt_out)
        .values(
            opt_out=False,
            retired_reason=case(
                (ManagedTable.retired_reason == OPTED_OUT, OPT_OUT_CLEARED),
                else_=ManagedTable.retired_reason,
            ),
            updated_at=func.now(),
        )
        .returning(ManagedTable.id)
        .execution_options(synchronize_session=False)
    ).scalar_one_or_none()
    if table_id is None:
        return session.scalars(select(ManagedTable).where(*key)).one_or_none()
    return session.get(ManagedTable, table_id, populate_existing=True)


def retire_rule_tables(session: Session, catalog: str, rule_id: int, *, by: str) -> list[int]:
    """Retire the live tables the rule adopted (`RULE_REMOVED`, history kept, open tasks
    cancelled); the ids retired."""
    ids = session.scalars(
        select(ManagedTable.id).where(
            ManagedTable.catalog == catalog,
            ManagedTable.managed_by == rule_actor(rule_id),
            ManagedTable.retired_at.is_(None),
        )
    ).all()
    return retire_tables(session, ids, reason=RULE_REMOVED, by=by)[0]


def rule_table_counts(session: Session, catalog: str) -> dict[int, int]:
    """Rule id -> how many live tables of the catalog it adopted."""
    found = session.execute(
        select(ManagedTable.managed_by, func.count())
        .where(
            ManagedTable.catalog == catalog,
            ManagedTable.retired_at.is_(None),
            ManagedTable.managed_by.like("rule:%"),
        )
        .group_by(ManagedTable.managed_by)
    )
    counts = {}
    for managed_by, n in found:
        rule_id = managed_by.removeprefix("rule:")
        if rule_id.isdigit():
            counts[int(rule_id)] = n
    return counts
