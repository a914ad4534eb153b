"""The scheduler's warm-up runs a real Iceberg job in a scratch catalog of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from lakewarden.runtime import Runtime
from lakewarden.spark.warmup import CATALOG, open_catalog, run_warmup_job, warmup_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def test_warmup_runs_a_real_compaction_and_leaves_nothing_behind(
    spark_rt: Runtime, spark: SparkSession
) -> None:
    user_catalog = spark_rt.settings.catalog_name
    before = set(spark_rt.catalog.list_namespaces())

    done = run_warmup_job(spark, spark_rt.settings)

    # Two appends of two files per partition, compacted to one file per partition.
    assert done["rows"] == 200
    assert done["rewritten_data_files"] >= 4 and done["added_data_files"] == 2
    assert not warmup_dir(spark_rt.settings).exists()
    assert user_catalog != CATALOG
    # The user's catalog saw nothing of it.
    assert set(spark_rt.catalog.list_namespaces()) == before
    # Again: a second warm-up (a restart) finds a clean place.
    assert run_warmup_job(spark, spark_rt.settings)["rows"] == 200
    # The user's catalog is only opened and listed, as the scheduler's warm-up ends.
    assert open_catalog(spark, spark_rt.catalogs.default) == len(before)
    assert set(spark_rt.catalog.list_namespaces()) == before
