"""Shared fixtures: a real Postgres (embedded, or TEST_DATABASE_URL), one fresh database per
test (a copy of a migrated template, or an earlier test's database emptied when its schema is
still the template's), a Runtime on it, and pyiceberg-written tables."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from lakewarden.db.migrate import migrate
from lakewarden.runtime import Runtime
from lakewarden.settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from pyspark.sql import SparkSession
    from spark_writer import SparkWriters

    from benchmarks.s3_server import S3Server
    from lakewarden.spark.local_cluster import LocalCluster
    from lakewarden.spark.local_hdfs import LocalHdfs
    from lakewarden.spark.local_metastore import Metastore
    from lakewarden.spark.local_trino import Trino
    from lakewarden.spark.local_yarn import LocalYarn
    from lakewarden.spark.local_zookeeper import ZooKeeper
    from services.scheduler.main import Scheduler

# Per pytest session, so that several sessions can share one server.
TEMPLATE = f"lw_test_template_{os.getpid()}"
TEST_PG_DIR = Path(tempfile.gettempdir()) / "lakewarden-test-pg"
TEST_PG_PORT = int(os.environ.get("TEST_PG_PORT", "54331"))
# Session fixtures that start a server process (a JVM): their tests are slow.
SERVER_FIXTURES = {
    "hive_metastore",
    "trino",
    "hudi_tables",
    "spark_writers",
    "yarn",
    "zookeeper",
}


def _admin(url: str) -> psycopg.Connection:
    u = make_url(url).set(drivername="postgresql", database="postgres")
    return psycopg.connect(u.render_as_string(hide_password=False), autocommit=True)


def _with_db(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark slow what starts a JVM or other processes: every `spark` test, every test of a
    module that imports subprocess or multiprocessing (so a new one is marked too), and
    every test that uses a server fixture (`SERVER_FIXTURES`). Skip a soak unless asked."""
    for item in items:
        module = getattr(item, "module", None)
        starts = module is not None and any(
            isinstance(vars(module).get(name), ModuleType)
            for name in ("subprocess", "multiprocessing")
        )
        serves = bool(SERVER_FIXTURES & set(getattr(item, "fixturenames", ())))
        if starts or serves or item.get_closest_marker("spark"):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("soak") and not os.environ.get("LAKEWARDEN_SOAK_SECONDS"):
            # 6-7 minutes each at the default 45 s (the writer runs until every service
            # has run beside it, each job a JVM of its own): `make soak` runs them.
            item.add_marker(pytest.mark.skip(reason="a soak: `make soak` runs it"))


@pytest.fixture(scope="session", autouse=True)
def spark_scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Spark's scratch space (`SPARK_LOCAL_DIRS`: each driver's `spark-*/userFiles-*` copy of
    its jars, ~460 MB, and its block managers) under this session's temporary directory
    for every JVM the tests start, and removed after them: a JVM a test kills leaves its
    directories behind, and one suite run left 52 (~5.7 GB) in /tmp."""
    scratch = tmp_path_factory.mktemp("spark-local")
    before = os.environ.get("SPARK_LOCAL_DIRS")
    os.environ["SPARK_LOCAL_DIRS"] = str(scratch)
    yield scratch
    if before is None:
        os.environ.pop("SPARK_LOCAL_DIRS", None)
    else:
        os.environ["SPARK_LOCAL_DIRS"] = before
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        url = Settings(database_url=url).database_url or url
    else:
        from lakewarden.db.embedded import ensure_server

        # Without fsync, for speed: this server holds test data only. It still needs its
        # password (the URL carries it), as every embedded server does.
        url = ensure_server(TEST_PG_DIR, TEST_PG_PORT, durable=False)
    started = _postmaster_start(url)
    yield url
    # A test that restarts the shared server (ensure_server(durable=True) on its data dir
    # did once) cuts every session-wide connection, and a later test fails for it.
    assert _postmaster_start(url) == started, "a test restarted the session's Postgres"


@pytest.fixture
def own_pg_dir() -> Iterator[Path]:
    """A data dir for a test's own embedded server, stopped and removed after it. Short and
    outside pytest's tmp (which is 0700 to root, and the server runs as postgres): its Unix
    socket lives in <dir>/pg, and sun_path holds 107 bytes."""
    from lakewarden.db.embedded import stop_server

    path = Path(tempfile.mkdtemp(prefix="lwpg-"))
    yield path
    stop_server(path)
    shutil.rmtree(path, ignore_errors=True)


def _postmaster_start(url: str) -> object:
    with _admin(url) as conn:
        row = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
    return row[0] if row else None


@pytest.fixture(scope="session")
def template_url(server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database migrated to head, with the catalog tables and commit trigger in place."""
    with _admin(server_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
    url = _with_db(server_url, TEMPLATE)
    wh = tmp_path_factory.mktemp("template-warehouse")
    rt = make_test_runtime(url, wh)
    migrate(rt)
    rt.engine.dispose()
    catalog = rt.catalog
    if isinstance(catalog, SqlCatalog):
        catalog.engine.dispose()
    yield url
    with _admin(server_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')


def make_test_runtime(url: str, tmp: Path, role: str = "test", **overrides: Any) -> Runtime:
    settings = Settings(
        database_url=url,
        data_dir=tmp,
        warehouse=(tmp / "warehouse").as_uri(),
        **overrides,
    )
    engine = create_engine(settings.database_url or url, pool_size=5, max_overflow=10)
    return Runtime(settings=settings, db_url=settings.database_url or url, engine=engine, role=role)


# What a test may change besides rows: schema, constraints, indexes, triggers, functions,
# database settings, the migration version. Equal to the template's: emptying is enough.
_USER_SCHEMA = "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_'"
_FINGERPRINT = f"""
SELECT md5(coalesce(string_agg(x, E'\\n' ORDER BY x), '')) FROM (
    SELECT format('rel %s.%s %s', n.nspname, c.relname, c.relkind) AS x
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_USER_SCHEMA}
    UNION ALL
    SELECT format('col %s.%s %s %s %s %s', n.nspname, c.relname, a.attnum, a.attname,
                  format_type(a.atttypid, a.atttypmod), a.attnotnull)
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE {_USER_SCHEMA} AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT format('def %s.%s %s %s', n.nspname, c.relname, d.adnum, pg_get_expr(d.adbin, d.adrelid))
    FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_USER_SCHEMA}
    UNION ALL
    SELECT format('con %s %s', x.conname, pg_get_constraintdef(x.oid))
    FROM pg_constraint x JOIN pg_namespace n ON n.oid = x.connamespace WHERE {_USER_SCHEMA}
    UNION ALL
    SELECT 'idx ' || pg_get_indexdef(i.indexrelid) FROM pg_index i
    JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE {_USER_SCHEMA}
    UNION ALL
    SELECT 'trg ' || pg_get_triggerdef(t.oid) FROM pg_trigger t WHERE NOT t.tgisinternal
    UNION ALL
    SELECT format('fn %s %s', p.oid::regprocedure, md5(coalesce(p.prosrc, '')))
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE {_USER_SCHEMA}
    UNION ALL
    SELECT 'set ' || array_to_string(s.setconfig, ',') FROM pg_db_role_setting s
    WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
    UNION ALL
    SELECT 'ver ' || version_num FROM alembic_version
) fingerprint
"""


class _Databases:
    """A fresh database per test: a copy of the template, or an earlier test's database
    emptied. A copy costs the server half a second or more; a database whose fingerprint
    still equals the template's is emptied with one TRUNCATE instead (anything else is
    dropped). A reused database gets a new name, so no URL, and nothing cached under it,
    ever comes back."""

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.spare: list[str] = []
        with self._connect(TEMPLATE) as conn:
            self.fingerprint = conn.execute(_FINGERPRINT).fetchone()
            # Reuse only while the template holds no rows but its version: emptied is equal.
            self.reuse = not any(
                conn.execute(f"SELECT EXISTS (SELECT FROM {t})").fetchone() == (True,)
                for t in self._tables(conn)
            )

    def _connect(self, name: str) -> psycopg.Connection:
        url = make_url(_with_db(self.server_url, name)).set(drivername="postgresql")
        return psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)

    @staticmethod
    def _tables(conn: psycopg.Connection) -> list[str]:
        return [
            table
            for (table,) in conn.execute(
                "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables WHERE "
                "schemaname NOT IN ('pg_catalog', 'information_schema') "
                "AND tablename <> 'alembic_version'"
            )
        ]

    def take(self) -> str:
        name = f"lw_test_{uuid.uuid4().hex[:10]}"
        with _admin(self.server_url) as conn:
            while self.spare:
                old = self.spare.pop()
                try:
                    conn.execute(f'ALTER DATABASE "{old}" RENAME TO "{name}"')
                    return name
                except psycopg.Error:  # someone connected to it again: not ours to reuse
                    conn.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
        return name

    def give_back(self, name: str) -> None:
        with _admin(self.server_url) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                [name],
            )
            if self.reuse and self._emptied(name):
                self.spare.append(name)
            else:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _emptied(self, name: str) -> bool:
        try:
            with self._connect(name) as conn:
                conn.execute("SET lock_timeout = '2s'")
                # audit_log's append-only trigger refuses TRUNCATE; a test server's superuser
                # may switch user triggers off for this session.
                conn.execute("SET session_replication_role = replica")
                if conn.execute(_FINGERPRINT).fetchone() != self.fingerprint:
                    return False
                conn.execute(f"TRUNCATE {', '.join(self._tables(conn))} RESTART IDENTITY CASCADE")
                used = "SELECT count(*) FROM pg_sequences WHERE last_value IS NOT NULL"
                return bool(conn.execute(used).fetchone() == (0,))
        except psycopg.Error:
            return False

    def close(self) -> None:
        with _admin(self.server_url) as conn:
            for name in self.spare:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def _databases(server_url: str, template_url: str) -> Iterator[_Databases]:
    databases = _Databases(server_url)
    yield databases
    databases.close()


@pytest.fixture
def db_url(server_url: str, _databases: _Databases) -> Iterator[str]:
    name = _databases.take()
    yield _with_db(server_url, name)
    _databases.give_back(name)


@pytest.fixture
def rt(db_url: str, tmp_path: Path) -> Iterator[Runtime]:
    runtime = make_test_runtime(db_url, tmp_path)
    yield runtime
    runtime.engine.dispose()


# --- The API in process, called as an admin -----------------------------------------------


@contextmanager
def serve(rt: Runtime, app: FastAPI | None = None) -> Iterator[TestClient]:
    """A client of the API (`app`, or a new one on `rt`) that calls as an admin of
    everything: every endpoint but /healthz and /readyz needs a credential. A server error
    is answered (500 with an error_id), not raised."""
    from fastapi.testclient import TestClient
    from helpers import admin_headers

    from services.api.app import create_app

    app = app or create_app(rt, background=False)
    with TestClient(app, headers=admin_headers(rt), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def app(rt: Runtime) -> FastAPI:
    from services.api.app import create_app

    return create_app(rt, background=False)


@pytest.fixture
def client(rt: Runtime, app: FastAPI) -> Iterator[TestClient]:
    """`app` served to an admin (see `serve`)."""
    with serve(rt, app) as c:
        yield c


# --- Spark: one database, one warm session and a leading scheduler for all Spark tests ---


@pytest.fixture(scope="session")
def spark_rt(
    server_url: str, template_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runtime]:
    """One database and one warm Spark session for the run (a JVM per test is too slow);
    tests use their own table names."""
    name = f"lw_test_spark_{os.getpid()}"
    with _admin(server_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
    rt = make_test_runtime(
        _with_db(server_url, name),
        tmp_path_factory.mktemp("spark"),
        role="scheduler",
        retry_base_s=0.1,
    )
    yield rt
    rt.engine.dispose()
    with _admin(server_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def spark(spark_rt: Runtime) -> Iterator[SparkSession]:
    from lakewarden.spark.session import build_session

    session = build_session(spark_rt.settings, spark_rt.db_url, "lakewarden-tests")
    yield session
    session.stop()


@pytest.fixture
def scheduler(spark_rt: Runtime, spark: SparkSession) -> Iterator[Scheduler]:
    """A leading scheduler on the shared Spark session, with nothing managed yet."""
    with leading_scheduler(spark_rt, spark) as sched:
        yield sched


@contextmanager
def leading_scheduler(spark_rt: Runtime, spark: SparkSession) -> Iterator[Scheduler]:
    """`scheduler`'s body, for a fixture of a wider scope (tests/browser: one per module)."""
    from lakewarden.process import Ticker
    from services.scheduler.main import Scheduler

    with spark_rt.engine.begin() as conn:
        conn.execute(text("DELETE FROM managed_tables"))
        conn.execute(text("DELETE FROM leader_lease"))
    sched = Scheduler(spark_rt)
    sched._spark = spark
    sched.renew()
    assert sched.leading() is not None
    # Renew in the background as the real process does: a cold first job can outlast the lease.
    stop = threading.Event()
    Ticker("lease", 1.0, sched.renew, stop).start()
    try:
        yield sched
    finally:
        stop.set()
        sched.pool.shutdown(wait=True)


# --- A real HDFS on loopback (lakewarden.spark.local_hdfs) --------------------------------


@pytest.fixture(scope="session")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalHdfs]:
    """A NameNode and a DataNode from Hadoop's own jars (jars.lock's `server-hadoop`), for
    the whole run: ~10-16 s to format and start both (two JVMs on 2 shared cores)."""
    from lakewarden.spark.local_hdfs import start_hdfs

    with start_hdfs(tmp_path_factory.mktemp("hdfs"), Settings()) as cluster:
        yield cluster


# --- A real Iceberg REST catalog (tests/rest_catalog.py) -----------------------------------


@pytest.fixture
def rest_catalog(server_url: str, tmp_path: Path) -> Iterator[str]:
    """The URI of an Iceberg REST catalog served for this test: the REST protocol over
    pyiceberg's SqlCatalog, in an empty database of its own (not lakewarden's: no commit
    trigger), with its warehouse under tmp_path. pyiceberg's RestCatalog and Spark's REST
    catalog (its HTTP client is in the offline jar assembly: lakewarden.spark.jars) both
    use it."""
    from rest_catalog import serve_rest_catalog

    name = f"lw_rest_{uuid.uuid4().hex[:10]}"
    with _admin(server_url) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        with serve_rest_catalog(_with_db(server_url, name), (tmp_path / "rest").as_uri()) as uri:
            yield uri
    finally:
        with _admin(server_url) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- A Spark standalone cluster on loopback (lakewarden.spark.local_cluster) --------------


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A master and one worker (2 cores, 2g) from PySpark's spark-class, for the whole run:
    starting one costs two JVMs (15-30 s on 2 shared cores). A test's driver must be a
    process of its own (one SparkContext per Python process: `spark` may hold this one's)."""
    from lakewarden.spark.local_cluster import start_cluster

    with start_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


# --- YARN on loopback (lakewarden.spark.local_yarn) --------------------------------------


@pytest.fixture(scope="session")
def yarn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalYarn]:
    """A ResourceManager and a NodeManager from Hadoop's own jars, for the whole run: two
    JVMs, ~12 s to start on 2 shared cores. Its `conf_dir` is a client's HADOOP_CONF_DIR."""
    from lakewarden.spark.local_yarn import start_yarn

    with start_yarn(tmp_path_factory.mktemp("yarn"), Settings()) as cluster:
        yield cluster


# --- A real S3 server (benchmarks/s3_server.py: S3Proxy) ---------------------------------


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """S3Proxy on 127.0.0.1 for the whole run (one JVM, ~3 s to start: `started_in_s`)."""
    from helpers import free_port

    from benchmarks.s3_server import serve_s3

    with serve_s3(tmp_path_factory.mktemp("s3"), free_port()) as server:
        yield server


# --- A standalone ZooKeeper (lakewarden.spark.local_zookeeper) ---------------------------


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    """One ZooKeeper server for the run, from PySpark's own jars (a JVM, ~5 s to start):
    the lock Hudi's writers and lakewarden's Hudi jobs share. Tests use lock paths of
    their own."""
    from lakewarden.spark.local_zookeeper import zookeeper as serve

    with serve(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


# --- A standalone Hive Metastore (lakewarden.spark.local_metastore) ------------------------------


@pytest.fixture(scope="session")
def hive_metastore(
    server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Metastore]:
    """One Hive Metastore server for the run (a JVM: 10-15 s to start on 2 shared cores),
    on a Postgres database of its own, its warehouse under the run's tmp. Tests use their
    own database (namespace) names; `restart()` keeps the port and the notification log."""
    from lakewarden.spark.local_metastore import hive_metastore as serve

    work = tmp_path_factory.mktemp("metastore")
    with serve(
        server_url, (work / "warehouse").as_uri(), work, f"lw_hms_{os.getpid()}"
    ) as metastore:
        yield metastore


# --- Trino, the seeds' reader (lakewarden.spark.local_trino) ------------------------------


@pytest.fixture(scope="session")
def trino(server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trino]:
    """One Trino server for the run (Java 24+, ~9 s to start; skipped where no such JDK is
    found), its catalogs added by the tests that read through them (`add_iceberg_catalog`)."""
    from helpers import TRINO_PG_PASSWORD

    from lakewarden.spark.local_trino import MIN_JAVA, local_trino, trino_java_home

    if trino_java_home() is None:
        pytest.skip(f"Trino needs Java {MIN_JAVA}+: set TRINO_JAVA_HOME to a JDK")
    password = make_url(server_url).password or ""
    with local_trino(
        tmp_path_factory.mktemp("trino"), secrets={TRINO_PG_PASSWORD: str(password)}
    ) as server:
        yield server


# --- Real Hudi and Delta tables, written by Spark (tests/spark_writer.py) ------------------


@pytest.fixture(scope="session")
def spark_writers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkWriters]:
    """A Spark writer process per format family (Hudi's, Delta's), each started at its first
    use and serving the whole run: a family's session is a JVM of its own (~30-60 s to start
    on 2 shared cores), started once, not once per fixture or test."""
    from spark_writer import SparkWriters

    writers = SparkWriters(tmp_path_factory.mktemp("spark-writers"))
    yield writers
    writers.close()


@dataclass(frozen=True)
class HudiTables:
    """A merge-on-read table (partitioned by `region`: an insert, two upserts with log
    files, a compaction scheduled and not run), a copy-on-write one (not partitioned:
    insert, upsert, delete), with each table's expected rows (id -> v); and a small
    merge-on-read table with log files and nothing planned (`mor_logs`: 60 rows, two log
    files per slice), for tests that compact a copy of it."""

    mor: str
    cow: str
    mor_logs: str
    mor_rows: dict[int, int]
    cow_rows: dict[int, int]
    calls: list[Any]


def _rows_after(steps: list[dict[str, Any]], path: str) -> dict[int, int]:
    rows: dict[int, int] = {}
    for step in steps:
        if step.get("path") != path or "op" not in step:
            continue
        for i in range(*step["ids"]):
            if step["op"] == "delete":
                rows.pop(i, None)
            else:
                rows[i] = i * 10 + step["value"]
    return rows


@pytest.fixture(scope="session")
def hudi_tables(
    tmp_path_factory: pytest.TempPathFactory, spark_writers: SparkWriters
) -> HudiTables:
    """The three tables, written once per run by the Hudi-family writer (`spark_writers`)."""
    where = tmp_path_factory.mktemp("hudi") / "lake"  # a hudi catalog's <warehouse>/<ns>
    where.mkdir()
    mor, cow = (where / "mor").as_uri(), (where / "cow").as_uri()
    logs = (where / "mor_logs").as_uri()
    part = {"type": "MERGE_ON_READ", "partitioned": True}
    steps: list[dict[str, Any]] = [
        {"path": logs, **part, "op": "insert", "ids": [0, 60], "value": 0},
        {"path": logs, **part, "op": "upsert", "ids": [0, 30], "value": 1},
        {"path": logs, **part, "op": "upsert", "ids": [15, 45], "value": 2},
        {"path": mor, **part, "op": "insert", "ids": [0, 300], "value": 0},
        {"path": mor, **part, "op": "upsert", "ids": [0, 30], "value": 1},
        {"path": mor, **part, "op": "upsert", "ids": [10, 40], "value": 2},
        {
            "path": mor,
            "call": f"run_compaction(op => 'schedule', path => '{where / 'mor'}', "
            "options => 'hoodie.compact.inline.max.delta.commits=1')",
        },
        {"path": cow, "type": "COPY_ON_WRITE", "op": "insert", "ids": [0, 100], "value": 0},
        {"path": cow, "type": "COPY_ON_WRITE", "op": "upsert", "ids": [0, 10], "value": 1},
        {"path": cow, "type": "COPY_ON_WRITE", "op": "delete", "ids": [90, 100], "value": 2},
    ]
    calls = spark_writers.run("hudi", steps)
    return HudiTables(
        mor=str(where / "mor"),
        cow=str(where / "cow"),
        mor_logs=str(where / "mor_logs"),
        mor_rows=_rows_after(steps, mor),
        cow_rows=_rows_after(steps, cow),
        calls=calls,
    )
