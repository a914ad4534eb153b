"""Compaction through Spark on tables of registered catalogs: a JDBC catalog in a database
that is not lakewarden's, an Iceberg REST catalog (a real REST server) and a Hive
Metastore (a real one), each checked with pyiceberg through that catalog's own client."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from helpers import SCHEMA, append_batches, register_catalog, run_one
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.hive import HiveCatalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.transforms import IdentityTransform
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import JobRun, ManagedTable, Task
from lakewarden.db.session import engine_for, transaction
from lakewarden.fingerprint import fingerprint
from lakewarden.runtime import Runtime
from lakewarden.spark.local_metastore import Metastore
from lakewarden.tasks import repo
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark


def _planned(rt: Runtime, catalog: str, client: Catalog, **policy: int) -> tuple[str, int]:
    """A partitioned table of 6 small files in `catalog` (a new namespace), managed, with a
    compaction task planned; its namespace and the task."""
    ns = f"ns_{uuid.uuid4().hex[:6]}"
    client.create_namespace_if_not_exists(ns)
    table = client.create_table(f"{ns}.orders", schema=SCHEMA)
    with table.update_spec() as spec:
        spec.add_field("region", IdentityTransform(), "region")
    table = append_batches(client.load_table(f"{ns}.orders"), 3)
    assert fingerprint(table).data_files == 6
    with transaction(rt.engine) as s:
        row = ManagedTable(
            catalog=catalog,
            namespace=ns,
            name="orders",
            policy={"compaction": {"min_small_files": 2, "min_input_files": 2, **policy}},
        )
        s.add(row)
        s.flush()
        task_id = repo.create_task(
            s, table_id=row.id, kind="compaction", trigger={"reason": "test"}, actor="test"
        )
    assert task_id is not None
    assert Worker(rt).run_once()  # planned through the catalog's own pyiceberg client
    return ns, task_id


def _compact(rt: Runtime, scheduler: Scheduler, catalog: str, client: Catalog) -> None:
    """A partitioned table of 6 small files in `catalog`, compacted by the scheduler's Spark
    job into one file per partition, every row kept (read back through `client`)."""
    ns, task_id = _planned(rt, catalog, client)
    before = fingerprint(client.load_table(TableRef(ns, "orders").identifier))
    assert run_one(scheduler) == "succeeded", task_id
    after = fingerprint(client.load_table(TableRef(ns, "orders").identifier))
    assert after.data_files == 2  # one per partition
    assert (after.rows, after.checksum) == (before.rows, before.checksum)


@pytest.fixture
def other_database(server_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"lw_test_other_{uuid.uuid4().hex[:10]}"
    admin = make_url(server_url).set(drivername="postgresql", database="postgres")
    import psycopg

    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    monkeypatch.setenv("LW_SECRET_TEST_OTHER_CATALOG_URL", url)
    yield url
    engine_for(url).dispose()
    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_compaction_on_a_jdbc_catalog_in_another_database(
    scheduler: Scheduler,
    spark_rt: Runtime,
    other_database: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    name = f"other_{uuid.uuid4().hex[:6]}"  # Spark keeps a catalog once used: one per test
    warehouse = tmp_path_factory.mktemp("other").as_uri()
    register_catalog(
        spark_rt,
        name,
        "jdbc",
        {"uri": {"env": "LW_SECRET_TEST_OTHER_CATALOG_URL"}, "warehouse": warehouse},
    )
    writer = SqlCatalog(name, uri=other_database, warehouse=warehouse)
    try:
        _compact(spark_rt, scheduler, name, writer)
    finally:
        writer.engine.dispose()


def test_compaction_on_a_rest_catalog(
    scheduler: Scheduler, spark_rt: Runtime, rest_catalog: str
) -> None:
    name = f"rest_{uuid.uuid4().hex[:6]}"
    register_catalog(spark_rt, name, "rest", {"uri": rest_catalog})
    _compact(spark_rt, scheduler, name, RestCatalog(name, uri=rest_catalog))
    with spark_rt.engine.begin() as conn:  # the shared database: leave no catalogs behind
        conn.execute(text("DELETE FROM catalogs"))


def test_compaction_on_a_hive_catalog(
    scheduler: Scheduler,
    spark_rt: Runtime,
    hive_metastore: Metastore,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Spark's Iceberg HiveCatalog (the Hive 2.3.9 client of Spark's own jars) against a
    real metastore: it takes the metastore's lock and alters the table's pointer."""
    name = f"hive_{uuid.uuid4().hex[:6]}"
    props = {"uri": hive_metastore.uri, "warehouse": tmp_path_factory.mktemp("hive").as_uri()}
    register_catalog(spark_rt, name, "hive", dict(props))
    try:
        _compact(spark_rt, scheduler, name, HiveCatalog(name, **props))
    finally:
        with spark_rt.engine.begin() as conn:
            conn.execute(text("DELETE FROM catalogs"))


def test_a_job_whose_metastore_is_down_fails_in_its_run_and_is_retried(
    scheduler: Scheduler,
    spark_rt: Runtime,
    hive_metastore: Metastore,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    name = f"hive_{uuid.uuid4().hex[:6]}"
    props = {"uri": hive_metastore.uri, "warehouse": tmp_path_factory.mktemp("hive").as_uri()}
    register_catalog(spark_rt, name, "hive", dict(props))
    client = HiveCatalog(name, **props)
    try:
        ns, task_id = _planned(spark_rt, name, client)
        hive_metastore.stop()
        try:
            assert run_one(scheduler) == "pending"  # failed, to be re-planned
        finally:
            hive_metastore.start()
        with transaction(spark_rt.engine) as s:
            task = s.get(Task, task_id)
            assert task is not None and "failed, re-planning" in (task.reason or "")
            (run,) = s.scalars(select(JobRun).where(JobRun.task_id == task_id))
            assert run.state == "failed" and run.error
        # The run's error line is the Java exception and its root cause, not Py4J's line
        # naming the JVM call ("An error occurred while calling o100.loadTable.").
        assert "An error occurred while calling" not in run.error, run.error
        assert "etastore" in run.error or "meta store" in run.error, run.error
        assert "Could not connect to meta store" in (run.log_tail or ""), run.log_tail
        # The metastore is back: the retry is planned and runs as any other.
        with spark_rt.engine.begin() as conn:
            conn.execute(text("UPDATE tasks SET not_before = now() WHERE id = :i"), {"i": task_id})
        assert Worker(spark_rt).run_once()
        assert run_one(scheduler) == "succeeded"
        after = fingerprint(client.load_table(TableRef(ns, "orders").identifier))
        assert after.data_files == 2
    finally:
        with spark_rt.engine.begin() as conn:
            conn.execute(text("DELETE FROM catalogs"))
