"""The test REST catalog (tests/rest_catalog.py) is a real Iceberg REST catalog: pyiceberg's
RestCatalog round-trips through it (namespaces, tables, appends, rename, drop, a conflicting
commit refused with 409), and Spark's Iceberg REST catalog compacts a table through it."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.types import LongType
from pyspark.sql import SparkSession

from lakewarden.runtime import Runtime

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string(), nullable=True)]
)


def _rows(n0: int, n: int) -> pa.Table:
    ids = list(range(n0, n0 + n))
    return pa.table({"id": ids, "v": [f"v{i}" for i in ids]}, schema=SCHEMA)


def _client(uri: str) -> RestCatalog:
    return RestCatalog("rest", uri=uri)


def test_pyiceberg_round_trip(rest_catalog: str) -> None:
    cat = _client(rest_catalog)
    cat.create_namespace("sales", {"owner": "ops"})
    cat.create_namespace(("sales", "eu"))
    with pytest.raises(NamespaceAlreadyExistsError):
        cat.create_namespace("sales")
    assert cat.list_namespaces() == [("sales",)]
    assert cat.list_namespaces("sales") == [("sales", "eu")]
    assert cat.load_namespace_properties("sales")["owner"] == "ops"
    assert cat.namespace_exists(("sales", "eu")) and not cat.namespace_exists("nope")

    t = cat.create_table(("sales", "eu", "orders"), schema=SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        cat.create_table(("sales", "eu", "orders"), schema=SCHEMA)
    for i in range(3):
        t.append(_rows(10 * i, 10))
    other = _client(rest_catalog).load_table(("sales", "eu", "orders"))
    assert other.scan().to_arrow().num_rows == 30
    assert len(other.inspect.snapshots()) == 3
    assert cat.list_tables(("sales", "eu")) == [("sales", "eu", "orders")]
    assert cat.table_exists(("sales", "eu", "orders"))

    cat.rename_table(("sales", "eu", "orders"), ("sales", "orders_v2"))
    assert not cat.table_exists(("sales", "eu", "orders"))
    renamed = cat.load_table(("sales", "orders_v2"))
    assert renamed.scan().to_arrow().num_rows == 30
    with pytest.raises(NamespaceNotEmptyError):
        cat.drop_namespace("sales")

    cat.drop_table(("sales", "orders_v2"))
    with pytest.raises(NoSuchTableError):
        cat.load_table(("sales", "orders_v2"))
    with pytest.raises(NoSuchNamespaceError):
        cat.list_tables("nope")
    cat.drop_namespace(("sales", "eu"))
    cat.drop_namespace("sales")
    assert cat.list_namespaces() == []


def test_the_catalogs_connections_send_without_nagle() -> None:
    """The socket the catalog serves on gives each connection TCP_NODELAY, as asyncio (and
    so uvicorn) sets it: without it a kept-alive client waited ~40 ms per response (B30)."""
    from rest_catalog import listening_socket

    async def accepted_nodelay() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def on_connect(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        sock = listening_socket()
        server = await asyncio.start_server(on_connect, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname())
            nodelay = await asyncio.wait_for(seen, 10)
            writer.close()
        return nodelay

    assert asyncio.run(accepted_nodelay()) != 0


def test_conflicting_commit_is_refused_with_409(
    rest_catalog: str, caplog: pytest.LogCaptureFixture
) -> None:
    cat = _client(rest_catalog)
    cat.create_namespace("ns")
    t = cat.create_table("ns.t", schema=SCHEMA)
    stale = cat.load_table("ns.t")
    t.append(_rows(0, 5))
    # The stale append is refused (its main branch moved since it was loaded); pyiceberg
    # retries an append on CommitFailedException, on a fresh load, and then it lands.
    stale.append(_rows(100, 5))
    assert "Commit failed due to a concurrent update" in caplog.text
    assert cat.load_table("ns.t").scan().to_arrow().num_rows == 10

    # A schema change against a schema that has changed since is not retried.
    stale = cat.load_table("ns.t")
    with cat.load_table("ns.t").update_schema() as update:
        update.add_column("x", LongType())
    with pytest.raises(CommitFailedException), stale.update_schema() as update:
        update.add_column("y", LongType())
    assert [f.name for f in cat.load_table("ns.t").schema().fields] == ["id", "v", "x"]

    # On the wire, as the spec says: 409 with an error body naming the exception.
    def commit(schema_id: int) -> httpx.Response:
        body = {
            "requirements": [{"type": "assert-current-schema-id", "current-schema-id": schema_id}],
            "updates": [{"action": "set-properties", "updates": {"k": "v"}}],
        }
        return httpx.post(f"{rest_catalog}/v1/namespaces/ns/tables/t", json=body)

    r = commit(99)
    assert r.status_code == 409
    assert r.json()["error"]["type"] == "CommitFailedException"
    r = commit(cat.load_table("ns.t").metadata.current_schema_id)
    assert r.status_code == 200, r.text
    assert cat.load_table("ns.t").properties["k"] == "v"

    r = httpx.get(f"{rest_catalog}/v1/namespaces/ns/tables/missing")
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "NoSuchTableException"
    r = httpx.get(f"{rest_catalog}/v1/namespaces/missing%1Fx/tables")
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "NoSuchNamespaceException"
    r = httpx.get(f"{rest_catalog}/v1/namespaces/ns/views")  # not served: still the shape
    assert r.status_code == 404 and r.json()["error"]["code"] == 404
    r = httpx.post(f"{rest_catalog}/v1/namespaces", json={"namespace": "ns"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestException"


def test_racing_commits_one_wins_the_rest_get_409(rest_catalog: str) -> None:
    """Writers that each add a column on top of the same schema, all at once: SqlCatalog's
    compare-and-swap on the metadata pointer lets exactly one through."""
    cat = _client(rest_catalog)
    cat.create_namespace("ns")
    cat.create_table("ns.t", schema=SCHEMA)
    base = json.loads(cat.load_table("ns.t").schema().model_dump_json())
    n = 8
    start = threading.Barrier(n)

    def add_column(i: int) -> int:
        column = {"id": 3, "name": f"c{i}", "required": False, "type": "long"}
        schema = {**base, "schema-id": 1, "fields": [*base["fields"], column]}
        body = {
            "requirements": [
                {"type": "assert-last-assigned-field-id", "last-assigned-field-id": 2}
            ],
            "updates": [
                {"action": "add-schema", "schema": schema},
                {"action": "set-current-schema", "schema-id": -1},
            ],
        }
        start.wait()
        r = httpx.post(f"{rest_catalog}/v1/namespaces/ns/tables/t", json=body, timeout=30)
        if r.status_code == 409:
            assert r.json()["error"]["type"] == "CommitFailedException"
        return r.status_code

    with ThreadPoolExecutor(n) as pool:
        codes = sorted(pool.map(add_column, range(n)))
    assert codes == [200] + [409] * (n - 1)
    fields = [f.name for f in cat.load_table("ns.t").schema().fields]
    assert fields[:2] == ["id", "v"] and len(fields) == 3


@pytest.mark.spark
def test_spark_compacts_a_table_through_the_rest_catalog(
    rest_catalog: str, spark: SparkSession, spark_rt: Runtime
) -> None:
    # A catalog per test server: Spark loads a catalog once, on first use, and keeps it.
    name = f"rest_{rest_catalog.rsplit(':', 1)[1]}"
    for key, value in {
        "": "org.apache.iceberg.spark.SparkCatalog",
        ".type": "rest",
        ".uri": rest_catalog,
        ".cache-enabled": "false",
    }.items():
        spark.conf.set(f"spark.sql.catalog.{name}{key}", value)

    cat = _client(rest_catalog)
    cat.create_namespace("ns")
    t = cat.create_table("ns.t", schema=SCHEMA)
    for i in range(8):
        t.append(_rows(100 * i, 100))
    before = cat.load_table("ns.t")
    files_before = len(before.inspect.files())
    rows_before = sorted(before.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert files_before == 8

    assert spark.sql(f"SELECT count(*) FROM {name}.ns.t").collect()[0][0] == 800
    result = spark.sql(
        f"CALL {name}.system.rewrite_data_files(table => 'ns.t', "
        "options => map('min-input-files', '2'))"
    ).collect()[0]
    assert result["rewritten_data_files_count"] == 8

    after = _client(rest_catalog).load_table("ns.t")
    assert len(after.inspect.files()) < files_before
    snapshot = after.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary.operation.value == "replace"
    assert sorted(after.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == rows_before

    # Spark creates (partitioned, sorted) and writes a table through it; pyiceberg reads it.
    spark.sql(
        f"CREATE TABLE {name}.ns.events (id bigint, day date, v string) USING iceberg "
        "PARTITIONED BY (day)"
    )
    spark.sql(f"ALTER TABLE {name}.ns.events WRITE ORDERED BY id")
    spark.sql(
        f"INSERT INTO {name}.ns.events VALUES (1, DATE'2026-01-01', 'a'), "
        "(2, DATE'2026-01-02', 'b')"
    )
    events = cat.load_table("ns.events")
    assert [f.name for f in events.spec().fields] == ["day"]
    assert events.sort_order().fields[0].source_id == events.schema().find_field("id").field_id
    assert sorted(events.scan().to_arrow()["id"].to_pylist()) == [1, 2]
