"""Catalogs are first-class: registered through the API (secrets only as references), each
table of each catalog addressed, polled and heard on its own; namespaces of several levels."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import psycopg
import pytest
from fastapi.testclient import TestClient
from helpers import SCHEMA, append_batches, make_table, wait_for
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

from lakewarden.catalogs.catalog import CatalogEntry
from lakewarden.catalogs.regions import lease_name
from lakewarden.db.models import ManagedTable, ManagementRule, TimelineEvent
from lakewarden.db.session import engine_for, transaction
from lakewarden.events.listener import RESCAN_S, CommitListener
from lakewarden.events.poller import PollResult, poll_due, poll_once
from lakewarden.leader import acquire_or_renew
from lakewarden.runtime import Runtime

ENV = "LW_SECRET_TEST_SECOND_CATALOG_URL"


@dataclass
class Second:
    url: str  # SQLAlchemy URL of its database (not lakewarden's)
    catalog: SqlCatalog  # a writer's client of it
    body: dict[str, object]  # what registers it


def _admin(server_url: str) -> psycopg.Connection:
    url = make_url(server_url).set(drivername="postgresql", database="postgres")
    return psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)


@pytest.fixture
def second(server_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Second]:
    """A JDBC catalog called `second` in a database of its own, with its URL (password and
    all) given to lakewarden as an environment variable reference."""
    name = f"lw_test_second_{uuid.uuid4().hex[:10]}"
    with _admin(server_url) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    warehouse = (tmp_path / "second-warehouse").as_uri()
    writer = SqlCatalog("second", uri=url, warehouse=warehouse)
    monkeypatch.setenv(ENV, url)
    body = {
        "name": "second",
        "type": "jdbc",
        "properties": {"uri": {"env": ENV}, "warehouse": warehouse},
        "poll_interval_s": 5,
    }
    yield Second(url, writer, body)
    writer.engine.dispose()
    engine_for(url).dispose()
    with _admin(server_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _table(catalog: Catalog, namespace: str = "sales", name: str = "orders") -> Table:
    catalog.create_namespace_if_not_exists(namespace)
    return catalog.create_table(f"{namespace}.{name}", schema=SCHEMA)


def test_register_list_change_and_remove_a_catalog(
    client: TestClient, rt: Runtime, second: Second
) -> None:
    r = client.post("/api/v1/catalogs", json=second.body)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["properties"]["uri"] == {"env": ENV}  # the reference, never the URL
    assert out["default"] is False and out["version"] == 1 and out["managed_tables"] == 0
    listed = client.get("/api/v1/catalogs").json()
    assert [c["name"] for c in listed] == ["lake", "second"]
    default = listed[0]
    assert default["default"] is True
    password = make_url(rt.db_url).password
    assert password and password not in client.get("/api/v1/catalogs").text
    assert client.post("/api/v1/catalogs", json=second.body).status_code == 409
    assert client.post("/api/v1/catalogs", json=second.body | {"name": "lake"}).status_code == 409

    r = client.patch("/api/v1/catalogs/second", json={"poll_interval_s": 60})
    assert r.status_code == 200 and r.json()["version"] == 2
    assert r.json()["poll_interval_s"] == 60
    assert client.patch("/api/v1/catalogs/lake", json={"poll_interval_s": 60}).status_code == 409
    assert client.patch("/api/v1/catalogs/nope", json={}).status_code == 404

    _table(second.catalog)
    body = {"namespace": "sales", "name": "orders"}
    assert client.post("/api/v1/catalogs/second/tables", json=body).status_code == 201
    r = client.delete("/api/v1/catalogs/second")
    assert r.status_code == 409 and "still has 1 managed table" in r.json()["detail"]
    assert client.delete("/api/v1/catalogs/second/tables/sales/orders").status_code == 204
    assert client.delete("/api/v1/catalogs/second").status_code == 204
    assert client.get("/api/v1/catalogs/second").status_code == 404
    assert client.delete("/api/v1/catalogs/lake").status_code == 409


def test_a_catalog_carries_a_region(client: TestClient, rt: Runtime, second: Second) -> None:
    """Registered in one of the deployment's regions (an unknown or malformed one: a 422
    that says what to fix, nothing written), shown with whether that region leads, and
    moved to another; the settings-configured catalog is in the default region."""
    rt.settings.regions = ["default", "eu"]
    r = client.post("/api/v1/catalogs", json=second.body | {"region": "mars"})
    assert r.status_code == 422
    assert "unknown region 'mars': this deployment's regions are default, eu" in r.text
    r = client.post("/api/v1/catalogs", json=second.body | {"region": "EU West"})
    assert r.status_code == 422 and "lowercase letters, digits or dashes" in r.text
    assert client.get("/api/v1/catalogs/second").status_code == 404  # nothing half-written

    r = client.post("/api/v1/catalogs", json=second.body | {"region": "eu"})
    assert r.status_code == 201, r.text
    assert (r.json()["region"], r.json()["region_leader"]) == ("eu", False)
    assert client.patch("/api/v1/catalogs/second", json={"region": "mars"}).status_code == 422
    assert client.get("/api/v1/catalogs/second").json()["region"] == "eu"
    with rt.engine.begin() as conn:  # the default region leads
        acquire_or_renew(conn, lease_name("default"), "leader-default", 60)
    r = client.patch("/api/v1/catalogs/second", json={"region": "default"})
    assert r.status_code == 200 and (r.json()["region"], r.json()["region_leader"]) == (
        "default",
        True,
    )
    lake = client.get("/api/v1/catalogs/lake").json()
    assert (lake["region"], lake["region_leader"]) == ("default", True)
    regions = {x["region"]: x for x in client.get("/api/v1/scheduler/regions").json()}
    assert regions["default"]["holder"] == "leader-default" and regions["default"]["live"]
    assert regions["eu"]["holder"] is None and not regions["eu"]["live"]
    assert client.get("/readyz").json() == {"status": "ready", "stale_regions": ["eu"]}


@pytest.mark.parametrize(
    ("properties", "says"),
    [
        ({"uri": "postgresql://u:hunter2hunter2@127.0.0.1:1/x"}, "URL with a password"),
        ({"uri": {"env": "LW_SECRET_NOT_SET_ANYWHERE"}}, "LW_SECRET_NOT_SET_ANYWHERE"),
        ({"uri": {"env": ENV}, "token": "s3cr3t-t0ken"}, "give it as a reference"),
        ({"warehouse": "file:///tmp"}, "needs the property 'uri'"),
        ({"uri": "postgresql://127.0.0.1:1/nothing-listens"}, "does not answer"),
        ({"uri": {"env": ENV, "file": "/etc/x"}}, "exactly one"),
    ],
)
def test_bad_catalogs_get_a_422_that_says_what_to_fix(
    client: TestClient, second: Second, properties: dict[str, object], says: str
) -> None:
    r = client.post("/api/v1/catalogs", json=second.body | {"properties": properties})
    assert r.status_code == 422, r.text
    assert says in r.text
    assert "hunter2" not in r.text and "s3cr3t" not in r.text
    assert client.get("/api/v1/catalogs/second").status_code == 404  # nothing half-written


def test_two_catalogs_same_names_kept_apart_and_polled_each(
    client: TestClient, rt: Runtime, second: Second
) -> None:
    assert client.post("/api/v1/catalogs", json=second.body).status_code == 201
    ours = append_batches(_table(rt.catalog), 1)
    theirs = append_batches(_table(second.catalog), 1)
    body = {"namespace": "sales", "name": "orders"}
    assert client.post("/api/v1/tables", json=body).status_code == 201  # the default's alias
    r = client.post("/api/v1/catalogs/second/tables", json=body)
    assert r.status_code == 201 and r.json()["catalog"] == "second"
    assert r.json()["current_snapshot_id"] == theirs.current_snapshot().snapshot_id  # type: ignore[union-attr]
    one = client.get("/api/v1/catalogs/second/tables/sales/orders").json()
    other = client.get("/api/v1/tables/sales/orders").json()
    assert (one["catalog"], other["catalog"]) == ("second", "lake") and one["id"] != other["id"]
    listed = client.get("/api/v1/tables", params={"catalog": "second"}).json()
    assert [t["id"] for t in listed["items"]] == [one["id"]]
    assert client.get("/api/v1/catalogs/nope/tables/sales/orders").status_code == 404

    append_batches(theirs, 2)
    assert poll_once(rt) == 1
    with transaction(rt.engine) as s:
        per_table = dict(
            s.execute(select(ManagedTable.catalog, ManagedTable.current_snapshot_id)).all()
        )
    assert per_table["second"] == theirs.refresh().current_snapshot().snapshot_id  # type: ignore[union-attr]
    assert per_table["lake"] == ours.current_snapshot().snapshot_id  # type: ignore[union-attr]


def test_each_catalog_is_polled_once_per_interval_however_many_replicas(
    client: TestClient, rt: Runtime, second: Second
) -> None:
    assert client.post("/api/v1/catalogs", json=second.body).status_code == 201
    polls: list[tuple[str, str]] = []

    def record(name: str) -> Callable[[Runtime, CatalogEntry], PollResult]:
        def poll(_: Runtime, entry: CatalogEntry) -> PollResult:
            polls.append((name, entry.name))
            return PollResult(entry.name)

        return poll

    threads = [threading.Thread(target=poll_due, args=(rt, record(f"r{i}"))) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(c for _, c in polls) == ["lake", "second"]  # each once, by one replica
    polls.clear()
    poll_due(rt, record("again"))
    assert polls == []  # not due again before its interval
    r = client.get("/api/v1/catalogs/second").json()
    assert r["last_poll"]["polled_by"] == rt.process_id


def test_a_catalog_database_that_is_not_ours_is_heard_through_its_trigger(
    client: TestClient, rt: Runtime, second: Second
) -> None:
    assert client.post("/api/v1/catalogs", json=second.body).status_code == 201
    table = append_batches(_table(second.catalog), 1)
    assert (
        client.post(
            "/api/v1/catalogs/second/tables", json={"namespace": "sales", "name": "orders"}
        ).status_code
        == 201
    )
    stop = threading.Event()
    listener = CommitListener(rt, stop)
    listener.start()
    try:
        assert listener.connected.wait(20)
        append_batches(table, 2)

        def heard() -> list[str] | None:
            with transaction(rt.engine) as s:
                sources = list(s.scalars(select(TimelineEvent.source).order_by(TimelineEvent.id)))
            return sources if sources.count("notify") == 2 else None

        assert wait_for(heard, 15, "two notified commits") == ["register", "notify", "notify"]

        # Removed, the catalog's database is no longer listened to (it may be dropped next).
        (database_listener,) = [d for d in listener.databases.values() if "second" in d.catalogs]
        assert client.delete("/api/v1/catalogs/second/tables/sales/orders").status_code == 204
        assert client.delete("/api/v1/catalogs/second").status_code == 204
        rt.catalogs.forget()
        database_listener.join(RESCAN_S + 10)
        assert not database_listener.is_alive()
    finally:
        stop.set()
        listener.join(5)


def test_without_rights_on_the_catalog_database_it_is_polled(
    client: TestClient,
    rt: Runtime,
    second: Second,
    server_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A role that may read the catalog table but not create functions: no trigger (the
    poll says so), and polling still finds every commit."""
    table = append_batches(_table(second.catalog), 1)
    role = f"lw_reader_{uuid.uuid4().hex[:8]}"
    with _admin(server_url) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'reader-pass-1'")
    with psycopg.connect(
        make_url(second.url).set(drivername="postgresql").render_as_string(False)
    ) as conn:
        conn.execute(f"GRANT SELECT ON iceberg_tables, iceberg_namespace_properties TO {role}")
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    try:
        reader = make_url(second.url).set(username=role, password="reader-pass-1")
        monkeypatch.setenv(ENV, reader.render_as_string(hide_password=False))
        assert client.post("/api/v1/catalogs", json=second.body).status_code == 201
        body = {"namespace": "sales", "name": "orders"}
        assert client.post("/api/v1/catalogs/second/tables", json=body).status_code == 201
        append_batches(table, 1)
        assert poll_once(rt) == 1
        poll = client.get("/api/v1/catalogs/second").json()["last_poll"]
        assert poll["commit_trigger"] is False and poll["tables_seen"] == 1
    finally:
        engine_for(
            make_url(second.url)
            .set(username=role, password="reader-pass-1")
            .render_as_string(hide_password=False)
        ).dispose()
        with _admin(server_url) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                [role],
            )
        with psycopg.connect(
            make_url(second.url).set(drivername="postgresql").render_as_string(False)
        ) as conn:
            conn.execute(f"DROP OWNED BY {role}")
        with _admin(server_url) as conn:
            conn.execute(f"DROP ROLE {role}")


def test_namespaces_of_several_levels(client: TestClient, rt: Runtime) -> None:
    rt.catalog.create_namespace_if_not_exists(("lake2", "sales"))
    table = rt.catalog.create_table(("lake2", "sales", "eu_orders"), schema=SCHEMA)
    append_batches(table, 1)
    body = {"namespace": "lake2.sales", "name": "eu_orders"}
    r = client.post("/api/v1/tables", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["namespace"] == "lake2.sales"
    assert client.get("/api/v1/tables/lake2.sales/eu_orders").status_code == 200
    assert (
        client.get("/api/v1/catalogs/lake/tables/lake2.sales/eu_orders/health").status_code == 200
    )
    r = client.put("/api/v1/namespaces/lake2.sales/policy", json={"slo": {"min_score": 45}})
    assert r.status_code == 200, r.text
    for bad in ("lake2..sales", "lake2.1sales", ".lake2"):
        assert client.get(f"/api/v1/tables/{bad}/eu_orders").status_code == 422, bad
    append_batches(table, 1)
    assert poll_once(rt) == 1
    assert (
        client.get("/api/v1/tables", params={"namespace": "lake2.*"}).json()["items"][0]["name"]
        == "eu_orders"
    )


def test_a_rest_catalog_is_polled_and_its_new_tables_adopted(
    client: TestClient, rt: Runtime, rest_catalog: str
) -> None:
    """A REST catalog has no trigger: one poll follows its table list (a rule adopts a new
    table, multi-level namespaces walked) and finds the commits of its managed tables."""
    body = {"name": "restcat", "type": "rest", "properties": {"uri": rest_catalog}}
    assert client.post("/api/v1/catalogs", json=body).status_code == 201, body
    writer = RestCatalog("restcat", uri=rest_catalog)
    writer.create_namespace(("lake", "sales"))
    table = append_batches(writer.create_table(("lake", "sales", "orders"), schema=SCHEMA), 1)
    with transaction(rt.engine) as s:
        s.add(ManagementRule(catalog="restcat", namespace="lake.*", include=["*"], exclude=[]))
    assert poll_once(rt) == 1  # adopted, then its baseline ingested
    got = client.get("/api/v1/catalogs/restcat/tables/lake.sales/orders")
    assert got.status_code == 200 and got.json()["managed_by"].startswith("rule:")
    append_batches(table, 2)
    assert poll_once(rt) == 1
    events = client.get("/api/v1/catalogs/restcat/tables/lake.sales/orders/events").json()
    assert [e["source"] for e in events["items"]] == ["poll", "poll", "poll"]
    poll = client.get("/api/v1/catalogs/restcat").json()["last_poll"]
    assert poll["commit_trigger"] is None and poll["tables_seen"] == 1
    assert poll["catalog_requests"] >= 3  # the namespace walk, the table list, one load


def test_a_steady_rest_poll_loads_no_unchanged_table(
    client: TestClient, rt: Runtime, rest_catalog: str
) -> None:
    """Each load sends back the ETag the catalog answered last (If-None-Match): an unchanged
    table costs a 304 and no metadata; a table that moved is loaded and ingested; a stale
    ETag costs one full load and is replaced."""
    import httpx

    def not_modified() -> int:
        return int(httpx.get(f"{rest_catalog}/test/requests").json()["not_modified"])

    body = {"name": "restcat", "type": "rest", "properties": {"uri": rest_catalog}}
    assert client.post("/api/v1/catalogs", json=body).status_code == 201, body
    writer = RestCatalog("restcat", uri=rest_catalog)
    writer.create_namespace("lake")
    tables = [
        append_batches(writer.create_table(("lake", name), schema=SCHEMA), 1) for name in ("a", "b")
    ]
    with transaction(rt.engine) as s:
        s.add(ManagementRule(catalog="restcat", namespace="lake", include=["*"], exclude=[]))
    assert poll_once(rt) == 2

    def etags() -> dict[str, str | None]:
        with transaction(rt.engine) as s:
            rows = s.execute(
                select(ManagedTable.name, ManagedTable.catalog_etag).where(
                    ManagedTable.catalog == "restcat"
                )
            ).all()
        return dict(rows)

    first = etags()
    assert all(first.values()), first
    before = not_modified()
    assert poll_once(rt) == 0
    assert not_modified() - before == 2  # both unchanged: no metadata sent

    append_batches(tables[0], 1)
    before = not_modified()
    assert poll_once(rt) == 1  # the moved one loaded in full and ingested
    assert not_modified() - before == 1
    assert etags()["a"] != first["a"] and etags()["b"] == first["b"]
    events = client.get("/api/v1/catalogs/restcat/tables/lake/a/events").json()["items"]
    assert len(events) == 2

    with transaction(rt.engine) as s:
        s.execute(text("UPDATE managed_tables SET catalog_etag = '\"stale\"' WHERE name = 'b'"))
    before = not_modified()
    assert poll_once(rt) == 0  # the same pointer: nothing ingested, the ETag repaired
    assert not_modified() - before == 1
    assert etags()["b"] == first["b"]


def test_a_rest_load_of_a_moved_table_is_a_view_not_a_full_parse(rest_catalog: str) -> None:
    """A table whose pointer moved is answered as a view of the response's metadata (what
    ingest reads), not parsed in full into a pyiceberg Table; a format 1 table still is."""
    from lakewarden.catalogs.catalog import TableRef
    from lakewarden.catalogs.metadata_view import MetadataView
    from lakewarden.catalogs.rest_loads import ConditionalLoads

    writer = RestCatalog("rest", uri=rest_catalog)
    writer.create_namespace("lake")
    v2 = append_batches(writer.create_table(("lake", "v2"), schema=SCHEMA), 2)
    v1 = writer.create_table(("lake", "v1"), schema=SCHEMA, properties={"format-version": "1"})
    v1 = append_batches(v1, 1)
    load = ConditionalLoads(RestCatalog("rest", uri=rest_catalog))

    moved = load(TableRef("lake", "v2"), None, None)
    assert isinstance(moved.table, MetadataView), type(moved.table)
    assert moved.location == v2.metadata_location and moved.etag
    head = v2.current_snapshot()
    assert head is not None and moved.table.current_snapshot_id == head.snapshot_id
    assert moved.table.parent_id(head.snapshot_id) == head.parent_snapshot_id
    old = load(TableRef("lake", "v1"), None, None)
    assert isinstance(old.table, Table) and old.location == v1.metadata_location
    assert load(TableRef("lake", "v2"), v2.metadata_location, None).table is None  # unmoved
    assert load(TableRef("lake", "v2"), None, moved.etag).table is None  # 304


def test_a_first_rest_poll_ingests_chunk_by_chunk_as_loads_come(
    client: TestClient, rt: Runtime, rest_catalog: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first poll after adoption ingests each chunk of loaded tables as it fills (here
    a chunk of 2 over 5 tables: two full chunks and a remainder), every table's baseline
    once, and keeps each table's ETag."""
    from lakewarden.events import poller

    monkeypatch.setattr(poller, "REST_REFRESH_CHUNK", 2)
    body = {"name": "restcat", "type": "rest", "properties": {"uri": rest_catalog}}
    assert client.post("/api/v1/catalogs", json=body).status_code == 201, body
    writer = RestCatalog("restcat", uri=rest_catalog)
    writer.create_namespace("lake")
    names = [f"t{i}" for i in range(5)]
    heads = {}
    for i, name in enumerate(names):
        table = append_batches(writer.create_table(("lake", name), schema=SCHEMA), 1 + i % 2)
        heads[name] = table.current_snapshot().snapshot_id  # type: ignore[union-attr]
    with transaction(rt.engine) as s:
        s.add(ManagementRule(catalog="restcat", namespace="lake", include=["*"], exclude=[]))
    assert poll_once(rt) == 5
    with transaction(rt.engine) as s:
        rows = s.execute(
            select(ManagedTable.name, ManagedTable.catalog_etag, TimelineEvent.snapshot_id)
            .join(TimelineEvent, TimelineEvent.table_id == ManagedTable.id)
            .where(ManagedTable.catalog == "restcat")
        ).all()
    assert all(r.catalog_etag for r in rows)
    assert sorted((r.name, r.snapshot_id) for r in rows) == sorted(heads.items())  # each once
    assert poll_once(rt) == 0


def test_a_rest_poll_keeps_a_connection_alive_for_each_concurrent_load(
    client: TestClient, rt: Runtime, rest_catalog: str
) -> None:
    """With `poll_concurrency` 16 (more than the 10 connections requests keeps alive per
    host by default), a poll's loads reuse at most 16 connections, not a new one for
    each load past 10."""
    import httpx

    def connections() -> int:
        return int(httpx.get(f"{rest_catalog}/test/requests").json()["connections"])

    body = {
        "name": "restcat",
        "type": "rest",
        "properties": {"uri": rest_catalog},
        "poll_concurrency": 16,
    }
    assert client.post("/api/v1/catalogs", json=body).status_code == 201, body
    writer = RestCatalog("restcat", uri=rest_catalog)
    writer.create_namespace("lake")
    for i in range(64):
        writer.create_table(("lake", f"t{i}"), schema=SCHEMA)
    with transaction(rt.engine) as s:
        s.add(ManagementRule(catalog="restcat", namespace="lake", include=["*"], exclude=[]))
    before = connections()
    for _ in range(4):
        poll_once(rt)
    # and the client's first (its config, the listing) before its pool was made 16 wide
    assert connections() - before <= 16 + 2


def test_namespace_defaults_read_only_the_tables_whose_columns_change(
    client: TestClient, rt: Runtime
) -> None:
    """A namespace policy change validates each table's policy in bulk: a table's schema is
    read only when its policy now names columns it did not before (at 10,000 tables, one
    read per table took 43 s). Here the table's metadata is unreadable: a change that
    names no column still succeeds; one that names a column reads it, and says so."""
    table = append_batches(make_table(rt, "sales", "orders"), 1)
    assert (
        client.post("/api/v1/tables", json={"namespace": "sales", "name": "orders"}).status_code
        == 201
    )
    path = Path(urlparse(table.metadata_location).path)
    good = path.read_bytes()
    path.write_text("{ this is not table metadata")
    try:
        r = client.put("/api/v1/namespaces/sales/policy", json={"slo": {"min_score": 45}})
        assert r.status_code == 200, r.text
        r = client.put(
            "/api/v1/namespaces/sales/policy",
            json={"zorder": {"enabled": True, "columns": ["id", "region"]}},
        )
        assert r.status_code >= 400 and r.status_code != 500, r.text
    finally:
        path.write_bytes(good)
    r = client.put(
        "/api/v1/namespaces/sales/policy",
        json={"zorder": {"enabled": True, "columns": ["id", "nope"]}},
    )
    assert r.status_code == 422 and "sales.orders has no column nope" in r.json()["detail"]


def test_commit_notifications_name_their_catalog(
    client: TestClient, rt: Runtime, second: Second
) -> None:
    assert client.post("/api/v1/catalogs", json=second.body).status_code == 201
    theirs = append_batches(_table(second.catalog), 1)
    ours = append_batches(_table(rt.catalog), 1)
    body = {"namespace": "sales", "name": "orders"}
    assert client.post("/api/v1/catalogs/second/tables", json=body).status_code == 201
    assert client.post("/api/v1/tables", json=body).status_code == 201
    theirs, ours = append_batches(theirs, 1), append_batches(ours, 1)
    r = client.post("/api/v1/events", json=body | {"catalog": "second"})
    assert r.status_code == 202 and r.json()["new_events"] == 1
    assert r.json()["current_snapshot_id"] == theirs.current_snapshot().snapshot_id  # type: ignore[union-attr]
    r = client.post("/api/v1/events", json=body | {"catalog": "nope"})
    assert r.status_code == 404 and "no catalog 'nope'" in r.json()["detail"]
    theirs = append_batches(theirs, 1)
    items = [body, body | {"catalog": "second"}, body | {"catalog": "nope"}]
    r = client.post("/api/v1/events/batch", json={"events": items})
    assert r.status_code == 202, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == [202, 202, 404]
    assert [x["current_snapshot_id"] for x in results[:2]] == [
        ours.current_snapshot().snapshot_id,  # type: ignore[union-attr]
        theirs.current_snapshot().snapshot_id,  # type: ignore[union-attr]
    ]


def test_a_poll_that_outlasts_its_interval_is_not_joined_by_another_replica(
    client: TestClient, rt: Runtime, second: Second
) -> None:
    """A REST poll of 10,000 tables took 159 s against a 30 s interval (B11), and other
    replicas started overlapping polls. The claim holds the catalog while its poll runs."""
    body = second.body | {"poll_interval_s": 1}
    assert client.post("/api/v1/catalogs", json=body).status_code == 201
    started: list[str] = []

    def slow(name: str) -> Callable[[Runtime, CatalogEntry], PollResult]:
        def poll(_: Runtime, entry: CatalogEntry) -> PollResult:
            if entry.name == "second":
                started.append(name)
                time.sleep(3)  # three intervals
            return PollResult(entry.name)

        return poll

    first = threading.Thread(target=poll_due, args=(rt, slow("first")))
    first.start()
    wait_for(lambda: started, 5, "the first poll started")
    time.sleep(1.5)  # its interval has passed since it started
    poll_due(rt, slow("second"))
    first.join()
    assert started == ["first"]
    with transaction(rt.engine) as s:
        due = s.execute(text("SELECT due_at - now() FROM catalog_polls WHERE catalog = 'second'"))
        left = due.scalar_one().total_seconds()
    assert 0 < left <= 1  # due an interval after the poll ended


def _connections(server_url: str, url: str) -> int:
    database = make_url(url).database
    with _admin(server_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_changed_or_removed_catalog_has_its_client_closed(
    client: TestClient, rt: Runtime, second: Second, server_url: str
) -> None:
    """The registry closes the client of an older catalog version and of a removed catalog:
    otherwise every API process keeps that database's pool open for its whole life."""
    assert client.post("/api/v1/catalogs", json=second.body).status_code == 201
    second.catalog.engine.dispose()  # count only lakewarden's own connections

    rt.catalogs.load("second").list_namespaces()
    assert _connections(server_url, second.url) >= 1
    assert client.patch("/api/v1/catalogs/second", json={"poll_interval_s": 60}).status_code == 200
    rt.catalogs.forget()
    rt.catalogs.load("second").list_namespaces()  # version 2: a new client, the old one closed
    assert _connections(server_url, second.url) == 1

    assert client.delete("/api/v1/catalogs/second").status_code == 204
    rt.catalogs.forget()
    rt.catalogs.entries()
    assert _connections(server_url, second.url) == 0
