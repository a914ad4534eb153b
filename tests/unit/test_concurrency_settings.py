"""How many jobs a scheduler runs at once by default, and the FAIR pools Spark is given."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from lakewarden.settings import JOBS_PER_CORE, Settings, jobs_for_master
from lakewarden.spark.session import fair_pools_xml, spark_conf


def test_the_default_jobs_at_once_follows_the_cores_of_the_master() -> None:
    assert jobs_for_master("local[2]") == 2 * JOBS_PER_CORE
    assert jobs_for_master("local[3, 2]") == 3 * JOBS_PER_CORE
    assert jobs_for_master("local[*]") == (os.cpu_count() or 1) * JOBS_PER_CORE
    assert jobs_for_master("spark://master:7077") == 2 * JOBS_PER_CORE
    assert Settings(spark_master="local[3]").max_concurrent_jobs == 3 * JOBS_PER_CORE
    assert Settings(spark_master="local[3]", max_concurrent_jobs=1).max_concurrent_jobs == 1


def test_spark_shares_the_session_fairly_by_pool() -> None:
    conf = spark_conf(Settings(), "postgresql+psycopg://lw:pw@127.0.0.1:5432/lw")
    assert conf["spark.scheduler.mode"] == "FAIR"
    pools = ET.fromstring(fair_pools_xml(["default", 'od"d<pool>']))
    assert [(p.get("name"), p.findtext("schedulingMode")) for p in pools] == [
        ("default", "FAIR"),
        ('od"d<pool>', "FAIR"),
    ]
