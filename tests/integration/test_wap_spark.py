"""Write-audit-publish and a partition repair with Spark as the writer and the reader
(issue 33 §1 and §2 on real Spark): Spark writes to the audit branch (its WAP session
setting); the leader's round audits the batch, its SQL assertion included, and
fast-forwards main or refuses; Spark's reads of main see only what was published. A
partition Spark overwrote is repaired back through the API, and Spark reads it as it was."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from conftest import serve

from lakewarden.runtime import Runtime
from services.scheduler.main import Scheduler
from services.scheduler.publish import publish_round

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _rows(spark: SparkSession, table: str) -> list[tuple[int, str]]:
    return sorted((r.id, r.day) for r in spark.sql(f"SELECT id, day FROM {table}").collect())


def test_spark_writes_to_the_audit_branch_and_reads_only_what_was_published(
    scheduler: Scheduler, spark_rt: Runtime, spark: SparkSession
) -> None:
    name = f"{spark_rt.settings.catalog_name}.sales.wap_spark"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS " + name.rsplit(".", 1)[0])
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, day STRING) USING iceberg PARTITIONED BY (day) "
        "TBLPROPERTIES ('write.wap.enabled' = 'true')"
    )
    spark.sql(f"INSERT INTO {name} VALUES (1, 'd1'), (2, 'd1')")
    spark.sql(f"ALTER TABLE {name} CREATE BRANCH audit")
    policy = {
        "publish": {
            "enabled": True,
            "min_rows": 1,
            "sql_assertions": {"no_negative_ids": "SELECT id FROM batch WHERE id < 0"},
        }
    }
    with serve(spark_rt) as client:
        r = client.post(
            "/api/v1/tables", json={"namespace": "sales", "name": "wap_spark", "policy": policy}
        )
        assert r.status_code == 201, r.text
        scheduler.renew()  # the leader's publish round runs under its fence
        fence = scheduler.fence
        assert fence is not None

        spark.conf.set("spark.wap.branch", "audit")
        try:
            spark.sql(f"INSERT INTO {name} VALUES (3, 'd2'), (-4, 'd2')")  # a bad batch
            assert publish_round(spark_rt, fence)
            spark.conf.unset("spark.wap.branch")
            assert _rows(spark, name) == [(1, "d1"), (2, "d1")]  # main untouched
            audit = client.get("/api/v1/tables/sales/wap_spark/publish").json()["audits"][0]
            assert not audit["published"]
            assert "returned 1 row(s)" in audit["checks"]["sql.no_negative_ids"]["detail"]

            # The writer mends the branch; the next round publishes it.
            spark.conf.set("spark.wap.branch", "audit")
            spark.sql(f"DELETE FROM {name} WHERE id < 0")
            spark.sql(f"INSERT INTO {name} VALUES (5, 'd2')")
            assert publish_round(spark_rt, fence)
        finally:
            spark.conf.unset("spark.wap.branch")
        spark.sql(f"REFRESH TABLE {name}")
        assert _rows(spark, name) == [(1, "d1"), (2, "d1"), (3, "d2"), (5, "d2")]

        # A partition Spark overwrote is repaired back to the published snapshot.
        published = client.get("/api/v1/tables/sales/wap_spark/publish").json()["audits"][0]
        assert published["published"]
        good = published["branch_snapshot_id"]
        spark.sql(f"INSERT OVERWRITE {name} PARTITION (day = 'd1') VALUES (99)")
        body = {"partition": {"day": "d1"}, "to_snapshot": good}
        dry = client.post("/api/v1/tables/sales/wap_spark/repair", json=body)
        assert dry.status_code == 200, dry.text
        assert dry.json()["rows_removed"] == 1 and dry.json()["rows_restored"] == 2
        done = client.post(
            "/api/v1/tables/sales/wap_spark/repair",
            json=body | {"dry_run": False, "main_snapshot_id": dry.json()["main_snapshot_id"]},
        )
        assert done.status_code == 200, done.text
    spark.sql(f"REFRESH TABLE {name}")
    assert _rows(spark, name) == [(1, "d1"), (2, "d1"), (3, "d2"), (5, "d2")]
