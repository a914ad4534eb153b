"""How many jobs a scheduler runs at once by default, and the FAIR pools Spark is given."""

from __future__ import annotations

import multiprocessing
import os
import xml.etree.ElementTree as ET
from pathlib import Path

from lakewarden.settings import JOBS_PER_CORE, Settings, jobs_for_master
from lakewarden.spark.session import fair_pools_xml, spark_conf, write_fair_pools


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


def _rewrite_pools(data_dir: str, pool: str, times: int) -> None:
    for _ in range(times):
        write_fair_pools(Settings(data_dir=Path(data_dir), pool_limits={pool: 1}))


def test_applications_starting_at_once_never_read_a_half_written_pools_file(
    tmp_path: Path,
) -> None:
    # Five applications at a failover each write the file while Spark parses it: a reader
    # must always find a whole file (an empty one failed a SparkContext in CI).
    path = write_fair_pools(Settings(data_dir=tmp_path))
    ctx = multiprocessing.get_context("fork")
    writers = [
        ctx.Process(target=_rewrite_pools, args=(str(tmp_path), f"p{i % 2}", 300)) for i in range(4)
    ]
    for w in writers:
        w.start()
    reads = 0
    while any(w.is_alive() for w in writers):
        ET.fromstring(path.read_text())  # raises on an empty or cut file
        reads += 1
    for w in writers:
        w.join()
        assert w.exitcode == 0
    assert reads > 0
    assert not list(path.parent.glob(".*.tmp")), "no temp file left behind"
