"""A real Spark standalone cluster (master + worker from PySpark's spark-class, on
loopback): its JSON state, killing an application, and lakewarden's maintenance kinds
run through it by the real scheduler process (`LAKEWARDEN_SPARK_MASTER=spark://...`),
their results checked with pyiceberg."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_for

from lakewarden.spark.local_cluster import LocalCluster, app_state, kill_app, start_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with start_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


# A driver of its own (one SparkContext per Python process), idle until its context stops.
_IDLE_APP = """
import sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).appName("idle")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
         .getOrCreate())
print(spark.sparkContext.applicationId, flush=True)
while not spark.sparkContext._jsc.sc().isStopped():
    time.sleep(0.2)
print("stopped", flush=True)
"""


def test_app_state_and_kill_app(spark_cluster: LocalCluster, tmp_path: Path) -> None:
    assert spark_cluster.state()["aliveworkers"] == 1
    assert app_state(spark_cluster.web_url, "app-that-never-was") is None
    driver = subprocess.Popen(
        [sys.executable, "-c", _IDLE_APP, spark_cluster.master_url],
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "driver.log", "wb"),  # noqa: SIM115
        text=True,
    )
    try:
        assert driver.stdout is not None
        app_id = driver.stdout.readline().strip()
        assert app_id.startswith("app-"), (tmp_path / "driver.log").read_text()[-3000:]
        wait_for(lambda: app_state(spark_cluster.web_url, app_id) == "RUNNING", 60, "RUNNING")
        kill_app(spark_cluster.web_url, app_id)
        wait_for(lambda: app_state(spark_cluster.web_url, app_id) == "KILLED", 60, "KILLED")
        # The master tells the client-mode driver, whose context stops.
        assert driver.stdout.readline().strip() == "stopped"
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
