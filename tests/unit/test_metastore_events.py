"""A Hive Metastore's notification events as `lakewarden.metastore` reads them (built here
the way DbNotificationListener writes them: the table objects in Thrift's JSON protocol,
plain for Hive 2 and 3, gzipped and base64'd for Hive 4), and a Hive default catalog's
Spark settings."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest
from hive_metastore.ttypes import NotificationEvent
from hive_metastore.ttypes import Table as HiveTable
from thrift.protocol.TJSONProtocol import TJSONProtocolFactory
from thrift.TSerialization import serialize

from lakewarden.catalogs.catalog import default_entry
from lakewarden.metastore import TableEvent, table_event
from lakewarden.settings import Settings
from lakewarden.spark.session import spark_conf


def _table(db: str, name: str, pointer: str | None, kind: str = "ICEBERG", **extra: str) -> str:
    params = {"table_type": kind, **extra}
    if pointer:
        params["metadata_location"] = pointer
    table = HiveTable(dbName=db, tableName=name, parameters=params)
    return serialize(table, TJSONProtocolFactory()).decode()


def _event(kind: str, body: dict[str, str], fmt: str = "json-0.2") -> NotificationEvent:
    message = json.dumps({"server": "", "db": "sales", **body})
    if fmt.startswith("gzip"):
        message = base64.b64encode(gzip.compress(message.encode())).decode()
    return NotificationEvent(
        eventId=7,
        eventTime=0,
        eventType=kind,
        dbName="sales",
        tableName="orders",
        message=message,
        messageFormat=fmt,
    )


def _alter(before: str, after: str, fmt: str = "json-0.2") -> TableEvent | None:
    return table_event(
        _event("ALTER_TABLE", {"tableObjBeforeJson": before, "tableObjAfterJson": after}, fmt)
    )


def test_a_moved_pointer_is_a_commit_and_nothing_else_is() -> None:
    assert _alter(_table("sales", "orders", "m/1.json"), _table("sales", "orders", "m/2.json")) == (
        TableEvent(7, "commit", "sales", "orders", "m/2.json")
    )
    # a property or statistics change: the same pointer
    same = _alter(
        _table("sales", "orders", "m/2.json"), _table("sales", "orders", "m/2.json", x="1")
    )
    assert same is None
    # a Hive table, not Iceberg
    assert (
        _alter(_table("sales", "t", None, "MANAGED"), _table("sales", "t", None, "MANAGED")) is None
    )


def test_a_rename_names_the_table_it_was() -> None:
    event = _alter(_table("sales", "orders", "m/2.json"), _table("eu", "orders_v2", "m/2.json"))
    assert event == TableEvent(7, "rename", "eu", "orders_v2", "m/2.json", ("sales", "orders"))


def test_creates_and_drops_and_hive4s_gzipped_messages() -> None:
    created = table_event(_event("CREATE_TABLE", {"tableObjJson": _table("sales", "o", "m/0")}))
    assert created == TableEvent(7, "create", "sales", "o", "m/0")
    dropped = table_event(_event("DROP_TABLE", {"table": "orders"}))
    assert dropped == TableEvent(7, "drop", "sales", "orders", None)
    gz = _alter(
        _table("sales", "orders", "m/1"), _table("sales", "orders", "m/2"), "gzip(json-2.0)"
    )
    assert gz is not None and gz.op == "commit" and gz.location == "m/2"
    assert table_event(_event("CREATE_DATABASE", {})) is None


def test_a_hive_default_catalog_is_wired_into_spark(tmp_path: Path) -> None:
    jar = tmp_path / "x.jar"
    jar.write_text("")
    s = Settings(
        data_dir=tmp_path,
        spark_jars=str(jar),
        catalog_type="hive",
        catalog_uri="thrift://metastore:9083",
    )
    conf = spark_conf(s, "postgresql+psycopg://lw@127.0.0.1/lw")
    assert conf["spark.sql.catalog.lake.type"] == "hive"
    assert conf["spark.sql.catalog.lake.uri"] == "thrift://metastore:9083"
    assert "spark.sql.catalog.lake.catalog-impl" not in conf
    with pytest.raises(ValueError, match="LAKEWARDEN_CATALOG_URI is required for a hive"):
        default_entry(Settings(data_dir=tmp_path, catalog_type="hive"), "postgresql://h/db")
