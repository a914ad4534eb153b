"""Regions: a catalog is in one, and each region has its own scheduler leadership.

A region's leader holds that region's lease and runs only the tables of its catalogs, so
one data center's outage stops only its own maintenance. The settings-configured catalog
(no `catalogs` row) and every catalog registered without one are in the default region,
whose lease keeps its old name: a deployment that names no region runs as before.

Duties over the whole fleet (the metric fold, history retention, judging and sending
alerts) are no region's: they run under `DBLocks.FLEET_LEASE`, which one region leader
holds at a time. Were they the default region's, its outage would also silence the alert
about that outage.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, exists, func, or_, select, text, true
from sqlalchemy.orm import Session

from lakewarden.db.locks import DBLocks
from lakewarden.db.models import Catalog, ManagedTable, Task
from lakewarden.settings import DEFAULT_REGION

_PREFIX = DBLocks.SCHEDULER_LEASE.value + ":"


def lease_name(region: str) -> str:
    """The `leader_lease` row a region's schedulers compete for."""
    return DBLocks.SCHEDULER_LEASE.value if region == DEFAULT_REGION else _PREFIX + region


def region_of_lease(lease: str) -> str | None:
    """The region a lease leads (None: not a region's lease, e.g. the fleet's)."""
    if lease == DBLocks.SCHEDULER_LEASE.value:
        return DEFAULT_REGION
    return lease[len(_PREFIX) :] if lease.startswith(_PREFIX) else None


# No catalog is outside the default region (a deployment without regions): evaluated once
# per statement (an InitPlan), it spares the default region's rows the per-row lookup.
_ALL_DEFAULT = f"NOT EXISTS (SELECT 1 FROM catalogs ac WHERE ac.region <> '{DEFAULT_REGION}')"


def in_region_sql(table_id: str, param: str = "region") -> str:
    """SQL: the table `table_id` names is in the region bound as `:param`. Correlated (two
    primary-key lookups per row), never a list of a region's tables: a task's region
    costs the same at 100 tables or 100,000; nothing per row without regions."""
    return (
        f"((:{param} = '{DEFAULT_REGION}' AND {_ALL_DEFAULT}) OR "
        f"coalesce((SELECT c.region FROM managed_tables rm JOIN catalogs c ON c.name = "
        f"rm.catalog WHERE rm.id = {table_id}), '{DEFAULT_REGION}') = :{param})"
    )


def table_region() -> ColumnElement[str]:
    """`ManagedTable`'s region, as a column expression."""
    catalog_region = (
        select(Catalog.region).where(Catalog.name == ManagedTable.catalog).scalar_subquery()
    )
    return func.coalesce(catalog_region, DEFAULT_REGION)


def in_region(region: str | None) -> ColumnElement[bool]:
    """A condition on `ManagedTable`: the table is in `region` (None: any region)."""
    return true() if region is None else table_region() == region


def task_in_region(region: str) -> ColumnElement[bool]:
    """A condition on `Task`: its table is in `region` (as `in_region_sql`, correlated)."""
    catalog_region = (
        select(Catalog.region)
        .join(ManagedTable, ManagedTable.catalog == Catalog.name)
        .where(ManagedTable.id == Task.table_id)
        .scalar_subquery()
    )
    in_it = func.coalesce(catalog_region, DEFAULT_REGION) == region
    if region != DEFAULT_REGION:
        return in_it
    return or_(~exists().where(Catalog.region != DEFAULT_REGION), in_it)


def region_of_table(session: Session, table_id: int) -> str | None:
    """A table's region (None: no such table)."""
    return session.scalar(select(table_region()).where(ManagedTable.id == table_id))


def region_leaders(session: Session, regions: list[str]) -> dict[str, bool]:
    """Whether each region has a live leader (by the database clock)."""
    live: dict[str, bool] = dict(
        session.execute(
            text("SELECT name, expires_at > now() FROM leader_lease WHERE name = ANY(:names)"),
            {"names": [lease_name(r) for r in regions]},
        ).all()
    )
    return {r: bool(live.get(lease_name(r), False)) for r in regions}
