"""A metastore's Hudi and Delta tables as `lakewarden.metastore` reads them: the format of
each table object (Hudi's Hive sync writes the provider and Hoodie's input formats; Spark's
catalog the provider `delta`), a merge-on-read `_ro`/`_rt` pair listed as one table, and
their notification events relisting the catalog rather than noting a commit."""

from __future__ import annotations

import json

from hive_metastore.ttypes import NotificationEvent, SerDeInfo, StorageDescriptor
from hive_metastore.ttypes import Table as HiveTable
from thrift.protocol.TJSONProtocol import TJSONProtocolFactory
from thrift.TSerialization import serialize

from lakewarden.formats.locations import plain_path
from lakewarden.metastore import Listed, TableEvent, path_tables, table_event, table_format

HOODIE = "org.apache.hudi.hadoop.HoodieParquetInputFormat"
HOODIE_RT = "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat"


def _table(
    name: str, location: str, provider: str | None = None, input_format: str = ""
) -> HiveTable:
    params = {"spark.sql.sources.provider": provider} if provider else {}
    sd = StorageDescriptor(location=location, inputFormat=input_format)
    return HiveTable(dbName="sales", tableName=name, parameters=params, sd=sd)


def test_the_format_is_read_from_the_provider_or_hoodies_input_format() -> None:
    assert table_format(_table("a", "/l", "hudi", HOODIE)) == "hudi"
    assert table_format(_table("a", "/l", None, HOODIE_RT)) == "hudi"  # sync_as_datasource off
    assert table_format(_table("a", "/l", "DELTA")) == "delta"
    assert table_format(_table("a", "/l", "parquet")) is None
    iceberg = HiveTable(dbName="s", tableName="t", parameters={"table_type": "ICEBERG"})
    assert table_format(iceberg) == "iceberg"


def test_a_merge_on_read_pair_is_one_table_and_other_tables_keep_their_names() -> None:
    tables = [
        _table("orders_ro", "file:/w/orders", "hudi", HOODIE),
        _table("orders_rt", "file:/w/orders/", "hudi", HOODIE_RT),
        _table("users", "file:/w/users", "hudi", HOODIE),
        _table("stock_rt", "file:/w/stock", "hudi", HOODIE_RT),  # skip_ro_suffix: `stock`
        _table("stock", "file:/w/stock", "hudi", HOODIE),
        _table("audit_ro", "file:/w/audit_ro", "hudi", HOODIE),  # one table: its own name
        _table("clicks", "s3a://b/clicks", "delta"),
        _table("csv", "file:/w/csv", "csv"),
    ]
    # Spark's catalog: a placeholder location, the table's path in the storage properties
    spark = _table("views", "file:/w/db.db/views-__PLACEHOLDER__", "delta")
    spark.sd.serdeInfo = SerDeInfo(parameters={"path": "hdfs://nn/w/views"})
    tables.append(spark)
    assert path_tables(tables) == {
        "orders": Listed("hudi", None, "file:/w/orders"),
        "users": Listed("hudi", None, "file:/w/users"),
        "stock": Listed("hudi", None, "file:/w/stock"),
        "audit_ro": Listed("hudi", None, "file:/w/audit_ro"),
        "clicks": Listed("delta", None, "s3a://b/clicks"),
        "views": Listed("delta", None, "hdfs://nn/w/views"),
    }


def _event(kind: str, body: dict[str, str]) -> NotificationEvent:
    return NotificationEvent(
        eventId=9,
        eventTime=0,
        eventType=kind,
        dbName="sales",
        tableName="orders_rt",
        message=json.dumps({"server": "", "db": "sales", **body}),
        messageFormat="json-0.2",
    )


def _json(table: HiveTable) -> str:
    return serialize(table, TJSONProtocolFactory()).decode()


def test_a_hudi_table_created_or_renamed_relists_and_a_sync_stamp_is_no_event() -> None:
    rt = _table("orders_rt", "file:/w/orders", "hudi", HOODIE_RT)
    created = table_event(_event("CREATE_TABLE", {"tableObjJson": _json(rt)}))
    assert created == TableEvent(9, "relist", "sales", "orders_rt", None)
    stamped = _table("orders_rt", "file:/w/orders", "hudi", HOODIE_RT)
    stamped.parameters["last_commit_time_sync"] = "20261126"
    body = {"tableObjBeforeJson": _json(rt), "tableObjAfterJson": _json(stamped)}
    assert table_event(_event("ALTER_TABLE", body)) is None
    renamed = _table("orders2_rt", "file:/w/orders", "hudi", HOODIE_RT)
    body = {"tableObjBeforeJson": _json(rt), "tableObjAfterJson": _json(renamed)}
    assert table_event(_event("ALTER_TABLE", body)) == TableEvent(
        9, "relist", "sales", "orders2_rt", None
    )


def test_a_local_location_is_a_plain_path() -> None:
    assert plain_path("file:/w/orders/") == "/w/orders"
    assert plain_path("file:///w/orders") == "/w/orders"
    assert plain_path("hdfs://nn:8020/w/orders") == "hdfs://nn:8020/w/orders"
    assert plain_path("s3a://b/orders/") == "s3a://b/orders"
