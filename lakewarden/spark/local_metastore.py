"""A standalone Hive Metastore for tests and benchmarks: Hive 2.3.9's metastore server
from PySpark's own jars (`org.apache.hadoop.hive.metastore.HiveMetaStore`), on loopback and
a free port, backed by a Postgres database of its own, with its notification log written
by DbNotificationListener (the one extra jar: the `server-hive` group of
`lakewarden/spark/jars.lock`, fetched through `lakewarden.spark.jars`).

DataNucleus creates the metastore's own tables at the first start
(`datanucleus.schema.autoCreateAll`); the transaction tables that its lock API (which
Iceberg's HiveCatalog takes for every commit, in pyiceberg and in Spark) needs are not
DataNucleus's, and Hive 2.3's jars carry only their Derby DDL (`TxnDbUtil`), so the
Postgres form of that DDL is here (`TXN_DDL`). The database's password goes into a 0600
hive-site.xml, never onto the JVM's command line.

    with hive_metastore(pg_url, "file:///tmp/wh", work_dir, "lw_hms") as ms:
        HiveCatalog("hive", uri=ms.uri, warehouse=...)
        ms.restart()  # the same port and database: the notification log survives
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

import psycopg
from sqlalchemy.engine import make_url

from lakewarden.settings import Settings
from lakewarden.spark.jars import fetch_pinned, read_lock, server_jars
from lakewarden.spark.local_cluster import (
    end_daemon,
    free_port,
    java_home,
    launch_daemon,
    spark_home,
)

MAIN_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"
START_TIMEOUT_S = 120.0

# Hive 2.3's TxnDbUtil.prepDb in Postgres's words (its `varchar for bit data` is bytea).
# Unquoted, as TxnHandler's own SQL names them.
TXN_DDL = """
CREATE TABLE TXNS (TXN_ID bigint PRIMARY KEY, TXN_STATE char(1) NOT NULL,
  TXN_STARTED bigint NOT NULL, TXN_LAST_HEARTBEAT bigint NOT NULL,
  TXN_USER varchar(128) NOT NULL, TXN_HOST varchar(128) NOT NULL);
CREATE TABLE TXN_COMPONENTS (TC_TXNID bigint REFERENCES TXNS (TXN_ID),
  TC_DATABASE varchar(128) NOT NULL, TC_TABLE varchar(128), TC_PARTITION varchar(767),
  TC_OPERATION_TYPE char(1) NOT NULL);
CREATE TABLE COMPLETED_TXN_COMPONENTS (CTC_TXNID bigint, CTC_DATABASE varchar(128) NOT NULL,
  CTC_TABLE varchar(128), CTC_PARTITION varchar(767));
CREATE TABLE NEXT_TXN_ID (NTXN_NEXT bigint NOT NULL);
INSERT INTO NEXT_TXN_ID VALUES (1);
CREATE TABLE HIVE_LOCKS (HL_LOCK_EXT_ID bigint NOT NULL, HL_LOCK_INT_ID bigint NOT NULL,
  HL_TXNID bigint, HL_DB varchar(128) NOT NULL, HL_TABLE varchar(128),
  HL_PARTITION varchar(767), HL_LOCK_STATE char(1) NOT NULL, HL_LOCK_TYPE char(1) NOT NULL,
  HL_LAST_HEARTBEAT bigint NOT NULL, HL_ACQUIRED_AT bigint, HL_USER varchar(128) NOT NULL,
  HL_HOST varchar(128) NOT NULL, HL_HEARTBEAT_COUNT integer, HL_AGENT_INFO varchar(128),
  HL_BLOCKEDBY_EXT_ID bigint, HL_BLOCKEDBY_INT_ID bigint,
  PRIMARY KEY (HL_LOCK_EXT_ID, HL_LOCK_INT_ID));
CREATE INDEX HL_TXNID_INDEX ON HIVE_LOCKS (HL_TXNID);
CREATE TABLE NEXT_LOCK_ID (NL_NEXT bigint NOT NULL);
INSERT INTO NEXT_LOCK_ID VALUES (1);
CREATE TABLE COMPACTION_QUEUE (CQ_ID bigint PRIMARY KEY, CQ_DATABASE varchar(128) NOT NULL,
  CQ_TABLE varchar(128) NOT NULL, CQ_PARTITION varchar(767), CQ_STATE char(1) NOT NULL,
  CQ_TYPE char(1) NOT NULL, CQ_TBLPROPERTIES varchar(2048), CQ_WORKER_ID varchar(128),
  CQ_START bigint, CQ_RUN_AS varchar(128), CQ_HIGHEST_TXN_ID bigint, CQ_META_INFO bytea,
  CQ_HADOOP_JOB_ID varchar(32));
CREATE TABLE NEXT_COMPACTION_QUEUE_ID (NCQ_NEXT bigint NOT NULL);
INSERT INTO NEXT_COMPACTION_QUEUE_ID VALUES (1);
CREATE TABLE COMPLETED_COMPACTIONS (CC_ID bigint PRIMARY KEY,
  CC_DATABASE varchar(128) NOT NULL, CC_TABLE varchar(128) NOT NULL,
  CC_PARTITION varchar(767), CC_STATE char(1) NOT NULL, CC_TYPE char(1) NOT NULL,
  CC_TBLPROPERTIES varchar(2048), CC_WORKER_ID varchar(128), CC_START bigint, CC_END bigint,
  CC_RUN_AS varchar(128), CC_HIGHEST_TXN_ID bigint, CC_META_INFO bytea,
  CC_HADOOP_JOB_ID varchar(32));
CREATE TABLE AUX_TABLE (MT_KEY1 varchar(128) NOT NULL, MT_KEY2 bigint NOT NULL,
  MT_COMMENT varchar(255), PRIMARY KEY (MT_KEY1, MT_KEY2));
CREATE TABLE WRITE_SET (WS_DATABASE varchar(128) NOT NULL, WS_TABLE varchar(128) NOT NULL,
  WS_PARTITION varchar(767), WS_TXNID bigint NOT NULL, WS_COMMIT_ID bigint NOT NULL,
  WS_OPERATION_TYPE char(1) NOT NULL);
"""

LOG4J2 = """\
status = WARN
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = console
"""


def _hive_site(jdbc_url: str, user: str, password: str, warehouse: str) -> str:
    props = {
        "javax.jdo.option.ConnectionURL": jdbc_url,
        "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "javax.jdo.option.ConnectionUserName": user,
        "javax.jdo.option.ConnectionPassword": password,
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": warehouse,
        # In the same transaction as the change it reports: one event per change, none lost.
        "hive.metastore.transactional.event.listeners": (
            "org.apache.hive.hcatalog.listener.DbNotificationListener"
        ),
        # Hive's default async logging needs the LMAX disruptor, which PySpark lacks.
        "hive.async.log.enabled": "false",
    }
    body = "".join(
        f"<property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in props.items()
    )
    return f"<configuration>\n{body}</configuration>\n"


def create_database(pg_url: str, name: str) -> str:
    """A fresh database `name` on `pg_url`'s server with the transaction tables in it; its
    SQLAlchemy URL."""
    admin = make_url(pg_url).set(drivername="postgresql", database="postgres")
    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(pg_url).set(database=name)
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq) as conn:
        conn.execute(TXN_DDL)
    return url.render_as_string(hide_password=False)


def drop_database(pg_url: str, name: str) -> None:
    admin = make_url(pg_url).set(drivername="postgresql", database="postgres")
    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Metastore:
    """One metastore server process on 127.0.0.1:`port`; `restart` keeps port and database."""

    port: int
    conf_dir: Path
    classpath: str
    log_path: Path
    start_s: float = 0.0  # how long the last start took
    # Its own database (SQLAlchemy URL, with the password): a test reads the metastore's
    # lock tables there (HIVE_LOCKS, NEXT_LOCK_ID), a reader independent of its Thrift API.
    db_url: str = field(default="", repr=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    def start(self) -> None:
        started = time.monotonic()
        self._proc = launch_daemon(
            [
                str(Path(java_home() or "/usr") / "bin" / "java"),
                "-Xmx384m",
                "-XX:+UseSerialGC",
                f"-Dlog4j2.configurationFile=file:{self.conf_dir / 'log4j2.properties'}",
                "-cp",
                self.classpath,
                MAIN_CLASS,
                "-p",
                str(self.port),
            ],
            dict(os.environ),
            self.log_path,
        )
        deadline = started + START_TIMEOUT_S
        while not self._answers():
            if self._proc.poll() is not None:
                raise RuntimeError(f"the metastore exited; its log: {self.log_path}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the metastore did not answer; its log: {self.log_path}")
            time.sleep(0.25)
        self.start_s = time.monotonic() - started

    def _answers(self) -> bool:
        from lakewarden.metastore import metastore_client

        try:  # the port first: thrift logs an error for each refused connection
            socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
            with metastore_client(self.uri, timeout_s=2.0) as client:
                client.get_all_databases()
            return True
        except Exception:
            return False

    def stop(self) -> None:
        if self._proc is None:
            return
        end_daemon(self._proc)
        self._proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def hive_metastore(pg_url: str, warehouse: str, work: Path, database: str) -> Iterator[Metastore]:
    """A metastore on a new database `database` of `pg_url`'s server, started and stopped
    around the block (the database dropped after)."""
    settings = Settings()
    jars = [
        *server_jars(settings, "server-hive"),
        *fetch_pinned(
            settings.jars_cache_dir / "maven",
            settings.maven_repository,
            [p for p in read_lock() if p.group == "jdbc"],
        ),
    ]
    url = make_url(create_database(pg_url, database))
    conf = work / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    site = conf / "hive-site.xml"
    site.touch(mode=0o600)
    site.write_text(
        _hive_site(
            f"jdbc:postgresql://{url.host}:{url.port or 5432}/{database}",
            url.username or "",
            url.password or "",
            warehouse,
        )
    )
    (conf / "log4j2.properties").write_text(LOG4J2)
    pyspark_jars = spark_home() / "jars"
    classpath = ":".join([str(conf), f"{pyspark_jars}/*", *map(str, jars)])
    ms = Metastore(
        free_port(),
        conf,
        classpath,
        work / "metastore.log",
        db_url=url.render_as_string(hide_password=False),
    )
    try:
        ms.start()
        yield ms
    finally:
        ms.stop()
        drop_database(pg_url, database)
