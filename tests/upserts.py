"""Test data producers for primary-key (upsert) tables, on the real Spark session:

- `create_keyed_table`: an Iceberg v2 merge-on-read table bucketed by its key
  (bucket(N, id)), with `id` as its identifier field;
- `merge_upserts`: Spark's MERGE INTO, which on such a table writes position deletes;
- `write_equality_upserts`: upserts as Flink writes them - per bucket, a data file of the new
  rows and an equality-delete file of their keys, in one row-delta commit - made with
  Iceberg's Java data writers over py4j (GenericAppenderFactory, GenericRecord and the
  Parquet writers of iceberg-data are in the Spark runtime jar). Spark itself never writes
  equality deletes.

The schema is (id int, v string, round int): py4j hands a Python int to Java as an Integer,
which GenericRecord keeps as is, so the columns are `int`, not `bigint`."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from lakewarden.catalogs.catalog import TableRef
from lakewarden.spark.actions import load_java_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Row = tuple[str, int]  # (v, round)


def create_keyed_table(spark: SparkSession, catalog: str, ref: TableRef, buckets: int) -> None:
    name = ref.spark_name(catalog)
    spark.sql(
        f"CREATE TABLE {name} (id int NOT NULL, v string, round int) USING iceberg "
        f"PARTITIONED BY (bucket({buckets}, id)) TBLPROPERTIES ('format-version'='2', "
        "'write.merge.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
        "'write.delete.mode'='merge-on-read')"
    )
    spark.sql(f"ALTER TABLE {name} SET IDENTIFIER FIELDS id")


def merge_upserts(
    spark: SparkSession,
    catalog: str,
    ref: TableRef,
    rows: Mapping[int, Row],
    deleted: Iterable[int] = (),
) -> None:
    """MERGE INTO: `rows` (id -> (v, round)) updated or inserted, `deleted` keys deleted."""
    source = [(k, v, r, False) for k, (v, r) in rows.items()]
    source += [(k, "", 0, True) for k in deleted]
    spark.createDataFrame(
        source, "id int, v string, round int, gone boolean"
    ).createOrReplaceTempView("lw_upserts")
    spark.sql(
        f"MERGE INTO {ref.spark_name(catalog)} t USING lw_upserts s ON t.id = s.id "
        "WHEN MATCHED AND s.gone THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET t.v = s.v, t.round = s.round "
        "WHEN NOT MATCHED AND NOT s.gone THEN INSERT (id, v, round) VALUES (s.id, s.v, s.round)"
    )


def write_equality_upserts(
    spark: SparkSession,
    catalog: str,
    ref: TableRef,
    rows: Mapping[int, Row],
    deleted: Iterable[int] = (),
) -> None:
    """One commit as a Flink upsert sink makes it: per bucket, the new rows in a data file
    and every touched key (upserted or `deleted`) in an equality-delete file on `id`. The
    delete applies only to older data files (a lower sequence number), so the new rows stay."""
    jvm: Any = spark._jvm
    gateway: Any = spark.sparkContext._gateway
    iceberg = jvm.org.apache.iceberg
    table = load_java_table(spark, catalog, ref)
    schema, spec = table.schema(), table.spec()
    key_ids = gateway.new_array(jvm.int, 1)
    key_ids[0] = schema.findField("id").fieldId()
    key_schema = schema.select(["id"])
    # Iceberg's generic writers (GenericAppenderFactory until 1.11); its builderFor is
    # package-private, the Builder's constructor public.
    writers = (
        getattr(iceberg.data, "GenericFileWriterFactory$Builder")(table)
        .dataFileFormat(iceberg.FileFormat.PARQUET)
        .deleteFileFormat(iceberg.FileFormat.PARQUET)
        .equalityFieldIds(key_ids)
        .equalityDeleteRowSchema(key_schema)
        .build()
    )
    files = (
        iceberg.io.OutputFileFactory.builderFor(table, 1, int(time.time() * 1000))
        .format(iceberg.FileFormat.PARQUET)
        .build()
    )
    partition_key = iceberg.PartitionKey(spec, schema)

    by_bucket: dict[str, tuple[Any, list[Any], list[Any]]] = {}  # bucket -> (key, rows, keys)
    for key, row in [(k, (v, r)) for k, (v, r) in rows.items()] + [(k, None) for k in deleted]:
        record = iceberg.data.GenericRecord.create(schema)
        record.setField("id", key)
        if row is not None:
            record.setField("v", row[0])
            record.setField("round", row[1])
        partition_key.partition(record)
        bucket = by_bucket.setdefault(str(partition_key), (partition_key.copy(), [], []))
        if row is not None:
            bucket[1].append(record)
        deletion = iceberg.data.GenericRecord.create(key_schema)
        deletion.setField("id", key)
        bucket[2].append(deletion)

    delta = table.newRowDelta()
    for partition, records, keys in by_bucket.values():
        if records:
            data = writers.newDataWriter(files.newOutputFile(spec, partition), spec, partition)
            for record in records:
                data.write(record)
            data.close()
            delta = delta.addRows(data.toDataFile())
        deletes = writers.newEqualityDeleteWriter(
            files.newOutputFile(spec, partition), spec, partition
        )
        for record in keys:
            deletes.write(record)
        deletes.close()
        delta = delta.addDeletes(deletes.toDeleteFile())
    delta.commit()
    spark.sql(f"REFRESH TABLE {ref.spark_name(catalog)}")
