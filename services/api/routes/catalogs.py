"""Catalogs: the settings-configured default entry and those registered here.

Registering, changing or removing a catalog brings credentials (as references) into the
deployment or takes a fleet out of it: admin on everything. Reading needs a role anywhere.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from fastapi import APIRouter, HTTPException, Response
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from lakewarden.auth.grants import Role
from lakewarden.catalogs.catalog import (
    IDENTIFIER,
    CatalogConfigError,
    CatalogEntry,
    PropertyValue,
    build_catalog,
)
from lakewarden.catalogs.regions import region_leaders
from lakewarden.catalogs.registry import check_properties, entry_of, shown
from lakewarden.db.models import Catalog, CatalogPoll, ManagedTable, ManagementRule
from lakewarden.errors import headline
from lakewarden.formats.hudi import lock as hudi_lock
from lakewarden.formats.warehouse import check_warehouse as check_path_warehouse
from lakewarden.hdfs import check_namenode
from lakewarden.isolation import error_line
from lakewarden.object_store import WarehouseUnreachable, check_warehouse
from lakewarden.redact import redact, url_secrets
from lakewarden.secret_refs import RefRules
from lakewarden.settings import DEFAULT_REGION, check_region_name
from lakewarden.states import PATH_CATALOGS
from lakewarden.tables import LIVE
from services.api import errors
from services.api.access import AccessDep
from services.api.deps import Identifier, RuntimeDep, SessionDep
from services.api.schemas import CatalogIn, CatalogOut, CatalogPatch, CatalogPollOut, SecretRef

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1/catalogs", tags=["catalogs"])
CatalogName = Identifier  # a catalog's name in a path

NOT_FOUND = {404: "no such catalog"}
CHECK_TIMEOUT_S = 10.0
CONFIGURED = (
    "is the settings-configured default (LAKEWARDEN_CATALOG_*): change it there and restart"
)


def _stored(properties: dict[str, str | SecretRef | None]) -> dict[str, PropertyValue]:
    return {
        k: v if isinstance(v, str) else v.model_dump(exclude_none=True)
        for k, v in properties.items()
        if v is not None
    }


def _answers(entry: CatalogEntry) -> None:
    """List the catalog's namespaces with a client of its own, closed after (its pool of
    connections would otherwise stay open for the life of the process). A warehouse on HDFS:
    its NameNode must answer (asked once, before the listing, which would retry for
    minutes). A JDBC catalog's S3 warehouse must answer too (its bucket listed with the
    catalog's credentials); a REST catalog's storage is its server's to configure (its
    config overrides, vended credentials), so the properties registered here may not reach
    it alone."""
    if entry.type in PATH_CATALOGS:  # no catalog server: its warehouse must be there
        check_path_warehouse(entry)
        return
    check_namenode(entry.resolved)
    with build_catalog(entry) as client:
        client.list_namespaces()
    if entry.type == "jdbc":
        plain = {k for k, v in entry.properties.items() if isinstance(v, str)}
        check_warehouse(entry.resolved, plain)


def _check(entry: CatalogEntry) -> None:
    """422 unless the entry is storable and the catalog answers (its namespaces listed)
    within CHECK_TIMEOUT_S (a host that drops packets must not hold the request). The
    error's message is withheld when it quotes a value read from a reference."""
    try:
        check_properties(entry.type, entry.properties, entry.refs)
        hudi_lock.check(entry.type, entry.properties)
        pool = ThreadPoolExecutor(1, "catalog-check")
        try:
            pool.submit(_answers, entry).result(CHECK_TIMEOUT_S)
        finally:
            pool.shutdown(wait=False)
    except CatalogConfigError as exc:
        raise HTTPException(422, str(exc)) from exc
    except WarehouseUnreachable as exc:  # quotes only what was given as a value
        raise HTTPException(422, f"catalog {entry.name!r}: {exc}") from None
    except FutureTimeout as exc:
        raise HTTPException(
            422, f"catalog {entry.name!r} did not answer within {CHECK_TIMEOUT_S:.0f} s"
        ) from exc
    except Exception as exc:  # unreachable, refused, wrong credentials: say so, no secrets
        log.warning(
            "catalog %r does not answer: %s",
            entry.name,
            redact(f"{type(exc).__name__}: {exc}", entry.secret_values),
        )
        raise HTTPException(
            422,
            f"catalog {entry.name!r} does not answer with these properties: "
            f"{entry.without_secrets(error_line(exc), type(exc).__name__, headline(exc))}",
        ) from None


def _region(rt: RuntimeDep, name: str) -> str:
    """A region name as given, if it is one of this deployment's; else 422 saying why."""
    try:
        check_region_name(name)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    if name not in rt.settings.regions:
        raise HTTPException(
            422,
            f"unknown region {name!r}: this deployment's regions are "
            f"{', '.join(rt.settings.regions)} (LAKEWARDEN_REGIONS)",
        )
    return name


def _out(session: Session, entry: CatalogEntry) -> CatalogOut:
    row = None if entry.default else session.get(Catalog, entry.name)
    region = row.region if row is not None else DEFAULT_REGION
    count = session.scalar(select(func.count()).where(ManagedTable.catalog == entry.name, LIVE))
    poll = session.get(CatalogPoll, entry.name)
    properties: dict[str, Any] = dict(entry.properties)
    if entry.default:  # from settings, as values: their credentials are masked
        secrets = [s for v in properties.values() for s in url_secrets(str(v))]
        properties = {k: redact(str(v), secrets) for k, v in properties.items()}
    else:  # a secret stored as a value before such were refused: masked too
        properties = shown(entry.type, entry.properties)
    return CatalogOut(
        name=entry.name,
        type=entry.type,
        properties=properties,
        default=entry.default,
        poll_interval_s=entry.poll_interval_s,
        poll_concurrency=entry.poll_concurrency,
        version=entry.version,
        region=region,
        region_leader=region_leaders(session, [region])[region],
        managed_tables=count or 0,
        last_poll=CatalogPollOut.model_validate(poll) if poll and poll.polled_at else None,
    )


def _row(session: Session, rt: RuntimeDep, name: str, *, lock: bool = False) -> Catalog:
    if name == rt.settings.catalog_name:
        raise HTTPException(409, f"catalog {name!r} {CONFIGURED}")
    row = session.get(Catalog, name, with_for_update=lock)
    if row is None:
        raise _no_such(name)
    return row


def _no_such(name: str) -> HTTPException:
    return HTTPException(404, f"no catalog {name!r}: GET /api/v1/catalogs lists them")


@router.get("", response_model=list[CatalogOut])
def list_catalogs(rt: RuntimeDep, session: SessionDep, access: AccessDep) -> list[CatalogOut]:
    """The catalogs the caller's grants cover, the default first, with their managed tables
    and last poll; their properties (the warehouse among them) only to a caller who may see
    the whole catalog."""
    access.need_somewhere(Role.viewer)
    rt.catalogs.forget()  # this request reads the rows anyway: show them as they are now
    return [
        _out(session, e) if access.sees_catalog(e.name, whole=True) else _partial(session, e)
        for e in rt.catalogs.entries()
        if access.sees_catalog(e.name)
    ]


def _partial(session: Session, entry: CatalogEntry) -> CatalogOut:
    """A catalog as a caller who may see some of its namespaces sees it: no properties."""
    return _out(session, entry).model_copy(update={"properties": {}})


@router.get("/{name}", response_model=CatalogOut, responses=errors.documented(notes=NOT_FOUND))
def get_catalog(
    name: CatalogName, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> CatalogOut:
    """One catalog, as the list shows it: its properties only to a caller who may see the
    whole catalog; one outside the caller's grants is a 404 like one that does not exist."""
    access.need_somewhere(Role.viewer)
    if not access.sees_catalog(name):
        raise _no_such(name)  # the same 404 as for a catalog that does not exist
    if name == rt.settings.catalog_name:
        entry = rt.catalogs.default
    else:
        entry = entry_of(_row(session, rt, name), RefRules.of(rt.settings))
    return (
        _out(session, entry) if access.sees_catalog(name, whole=True) else _partial(session, entry)
    )


@router.post(
    "",
    status_code=201,
    response_model=CatalogOut,
    responses=errors.documented(
        409,
        body=True,
        notes={
            409: "a catalog of that name exists",
            422: "invalid properties (a secret given as a value), or the catalog does not "
            "answer with them",
        },
    ),
)
def register_catalog(
    body: CatalogIn, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> CatalogOut:
    """Watch another Iceberg catalog (admin). It is checked first: its namespaces must list."""
    access.need(Role.admin, None, None, target=f"catalog {body.name}")
    if not IDENTIFIER.match(body.name):
        raise HTTPException(422, f"invalid catalog name {body.name!r}")
    if body.name == rt.settings.catalog_name or session.get(Catalog, body.name) is not None:
        raise HTTPException(409, f"catalog {body.name!r} already exists")
    entry = CatalogEntry(
        name=body.name,
        type=body.type,
        properties=_stored(dict(body.properties)),
        poll_interval_s=body.poll_interval_s,
        poll_concurrency=body.poll_concurrency,
        refs=RefRules.of(rt.settings),
    )
    region = _region(rt, body.region)
    _check(entry)
    access.change = {
        "catalog": {"type": entry.type, "properties": entry.properties, "region": region}
    }
    session.add(
        Catalog(
            name=entry.name,
            type=entry.type,
            properties=entry.properties,
            poll_interval_s=entry.poll_interval_s,
            poll_concurrency=entry.poll_concurrency,
            region=region,
            version=1,
            created_by=access.actor,
        )
    )
    session.flush()
    rt.catalogs.forget()
    return _out(session, entry)


@router.patch(
    "/{name}",
    response_model=CatalogOut,
    responses=errors.documented(409, body=True, notes=NOT_FOUND),
)
def update_catalog(
    name: CatalogName, body: CatalogPatch, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> CatalogOut:
    """Change a registered catalog's properties (merged) or polling (admin); checked again.
    A Spark session that already used the catalog keeps its old settings until restarted."""
    access.need(Role.admin, None, None, target=f"catalog {name}")
    row = _row(session, rt, name, lock=True)
    region = row.region if body.region is None else _region(rt, body.region)
    properties = dict(row.properties)
    for key, value in (body.properties or {}).items():
        properties.pop(key, None)
        if value is not None:
            properties.update(_stored({key: value}))
    entry = CatalogEntry(
        name=row.name,
        type=row.type,
        properties=properties,
        poll_interval_s=body.poll_interval_s or row.poll_interval_s,
        poll_concurrency=body.poll_concurrency or row.poll_concurrency,
        version=row.version + 1,
        refs=RefRules.of(rt.settings),
    )
    _check(entry)
    access.change = {"catalog": {"properties": [row.properties, entry.properties]}}
    if region != row.region:
        access.change["catalog"]["region"] = [row.region, region]
    row.properties, row.version, row.region = entry.properties, entry.version, region
    row.poll_interval_s, row.poll_concurrency = entry.poll_interval_s, entry.poll_concurrency
    row.updated_at = func.now()
    session.flush()
    rt.catalogs.forget()
    return _out(session, entry)


@router.delete(
    "/{name}",
    status_code=204,
    responses=errors.documented(
        409, notes={**NOT_FOUND, 409: "the catalog still has managed tables"}
    ),
)
def remove_catalog(
    name: CatalogName, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> Response:
    """Stop watching a registered catalog (admin): refused while it has managed tables
    (unregister them, or delete its management rules and let them retire). Its rules go
    with it; the Iceberg catalog is untouched."""
    access.need(Role.admin, None, None, target=f"catalog {name}")
    row = _row(session, rt, name, lock=True)
    live = session.scalar(select(func.count()).where(ManagedTable.catalog == name, LIVE))
    if live:
        raise HTTPException(
            409,
            f"catalog {name!r} still has {live} managed table(s): unregister them first "
            f"(GET /api/v1/tables?catalog={name} lists them)",
        )
    session.execute(delete(ManagementRule).where(ManagementRule.catalog == name))
    session.execute(delete(CatalogPoll).where(CatalogPoll.catalog == name))
    session.delete(row)
    session.flush()
    rt.catalogs.forget()
    return Response(status_code=204)
