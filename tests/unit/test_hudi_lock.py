"""The lock lakewarden's Hudi jobs take (`lakewarden.formats.hudi.lock`): chosen by a
catalog's `hudi.lock.*` properties, checked, turned into Hudi's options and explained."""

from __future__ import annotations

import pytest

from lakewarden.catalogs.catalog import CatalogConfigError
from lakewarden.formats.hudi import lock
from lakewarden.formats.hudi.jobs import CONCURRENCY, IN_PROCESS_LOCK, concurrency

ZK = {
    "hudi.lock.provider": "zookeeper",
    "hudi.lock.zookeeper.url": "zk1:2181,zk2:2182",
    "hudi.lock.zookeeper.base-path": "/hudi/locks",
}
HMS = {"uri": "thrift://hms1:9083,thrift://hms2:9083", "hudi.lock.provider": "hive-metastore"}


def test_the_default_lock_is_the_file_systems_where_it_works_else_the_jobs_own() -> None:
    assert concurrency("/data/wh/t", {}) == concurrency("hdfs://nn/wh/t", {}) == CONCURRENCY
    on_s3 = concurrency("s3a://lake/wh/t", {})
    assert on_s3["hoodie.write.lock.provider"] == IN_PROCESS_LOCK
    assert on_s3["hoodie.write.concurrency.mode"] == "optimistic_concurrency_control"
    assert "hoodie.write.lock.filesystem.expire" not in on_s3
    shown = lock.describe("s3a://lake/wh/t", {})
    assert shown["provider"] == "in-process" and not shown["shared_with_other_writers"]
    assert "hudi.lock.provider to zookeeper" in shown["why"]


def test_a_catalogs_zookeeper_lock_is_hudis_with_the_tables_name_as_its_key() -> None:
    names: list[str] = []

    def name() -> str:
        names.append("orders")
        return "orders"

    got = lock.options("s3a://lake/wh/orders", ZK, name)
    assert got == {
        "hoodie.write.lock.provider": lock.CLASSES["zookeeper"],
        "hoodie.write.lock.zookeeper.url": "zk1:2181,zk2:2182",
        "hoodie.write.lock.zookeeper.port": "2181",
        "hoodie.write.lock.zookeeper.base_path": "/hudi/locks",
        "hoodie.write.lock.zookeeper.lock_key": "orders",
    }
    assert lock.options("/data/t", {}, name)["hoodie.write.lock.provider"].endswith(
        "FileSystemBasedLockProvider"
    )
    assert names == ["orders"]  # the table's name is read only for ZooKeeper's key
    shown = lock.describe("s3a://lake/wh/orders", ZK)
    assert shown["shared_with_other_writers"] and shown["zookeeper"]["base_path"] == "/hudi/locks"


def test_a_hive_catalogs_metastore_lock_is_on_the_tables_own_entry() -> None:
    props = lock.for_table(HMS, "sales", "orders")
    got = lock.options("hdfs://nn/wh/sales/orders", props, lambda: "hoodie_orders")
    assert got == {
        "hoodie.write.lock.provider": (
            "org.apache.hudi.hive.transaction.lock.HiveMetastoreBasedLockProvider"
        ),
        "hoodie.write.lock.hivemetastore.uris": "thrift://hms1:9083,thrift://hms2:9083",
        "hoodie.write.lock.hivemetastore.database": "sales",
        "hoodie.write.lock.hivemetastore.table": "orders",
    }
    assert (
        concurrency("hdfs://nn/wh/sales/orders", props)["hoodie.write.lock.provider"]
        == (lock.CLASSES["hive-metastore"])
    )
    shown = lock.describe("hdfs://nn/wh/sales/orders", props)
    assert shown["shared_with_other_writers"]
    assert shown["hive_metastore"] == {"database": "sales", "table": "orders"}
    assert "thrift" not in str(shown)  # the uri may be a reference's value: never shown
    with pytest.raises(CatalogConfigError, match="none was given"):
        lock.options("hdfs://nn/wh/sales/orders", HMS, lambda: "orders")  # no table


@pytest.mark.parametrize(
    ("kind", "props", "says"),
    [
        ("rest", ZK, "for a hudi or hive catalog"),
        ("hudi", {"hudi.lock.provider": "dynamodb"}, "must be one of"),
        ("hudi", {"hudi.lock.zookeeper.url": "zk:2181"}, "without 'hudi.lock.provider'"),
        ("hudi", {**ZK, "hudi.lock.zookeeper.url": ""}, "needs 'hudi.lock.zookeeper.url'"),
        ("hudi", {**ZK, "hudi.lock.zookeeper.url": "zk:port"}, "is not host:port"),
        ("hudi", {**ZK, "hudi.lock.zookeeper.url": "zk:0"}, "is not host:port"),
        ("hive", {**ZK, "hudi.lock.zookeeper.base-path": "/a/"}, "a ZooKeeper path"),
        ("hudi", {**ZK, "hudi.lock.zookeeper.lock-key": "k"}, "unknown property"),
        ("hudi", {**ZK, "hudi.lock.provider": "in-process"}, "but hudi.lock.provider is"),
        ("hudi", {"hudi.lock.provider": {"env": "X"}}, "give it as a value"),
        ("hudi", {"warehouse": "/wh", "hudi.lock.provider": "hive-metastore"}, "has none"),
        ("hive", {"hudi.lock.provider": "hive-metastore"}, "needs a Hive Metastore"),
        ("hive", {**HMS, lock.TABLE: "a.b"}, "lakewarden sets it per table"),
        ("hive", {**HMS, "hudi.lock.zookeeper.url": "zk:2181"}, "but hudi.lock.provider is"),
        (
            "hudi",
            {"warehouse": "s3a://b/wh", "hudi.lock.provider": "filesystem"},
            "cannot serve the warehouse",
        ),
    ],
)
def test_a_lock_a_job_cannot_take_is_refused_saying_what_to_fix(
    kind: str, props: dict[str, object], says: str
) -> None:
    with pytest.raises(CatalogConfigError, match=says.replace("(", r"\(")):
        lock.check(kind, props)


def test_a_lock_a_job_can_take_passes() -> None:
    lock.check("hudi", {"warehouse": "s3a://b/wh", **ZK})
    lock.check("hive", {"uri": "thrift://h:9083", "hudi.lock.provider": "in-process"})
    lock.check("hudi", {"warehouse": "/data/wh", "hudi.lock.provider": "filesystem"})
    lock.check("hive", HMS)
    lock.check("hive", {**HMS, "uri": {"env": "LW_SECRET_HMS_URI"}})  # a reference: its value
    lock.check("rest", {"uri": "http://x"})  # no hudi.lock.*: nothing to check
