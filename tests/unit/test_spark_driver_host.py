"""Where the driver listens, by master: executors of a cluster must reach it."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakewarden.settings import Settings
from lakewarden.spark.session import spark_conf

URL = "postgresql+psycopg://lw@127.0.0.1:5432/lw"


def _conf(tmp_path: Path, master: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    jar = tmp_path / "x.jar"
    jar.write_text("")
    return spark_conf(
        Settings(
            data_dir=tmp_path, spark_jars=str(jar), spark_master=master, spark_conf=extra or {}
        ),
        URL,
    )


@pytest.mark.parametrize(
    "master",
    [
        "local[2]",
        "spark://127.0.0.1:7077",
        "spark://localhost:7077",
        "spark://[::1]:7077",
        "spark://127.0.0.1:7077,localhost:7078",
    ],
)
def test_a_driver_of_a_loopback_master_stays_on_loopback(tmp_path: Path, master: str) -> None:
    conf = _conf(tmp_path, master)
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"


@pytest.mark.parametrize(
    "master",
    ["spark://spark-master:7077", "spark://127.0.0.1:7077,spark-b:7077", "k8s://https://k:6443"],
)
def test_a_remote_cluster_reaches_the_driver_at_its_address(tmp_path: Path, master: str) -> None:
    # Spark's default (the host name's address), or what the operator says.
    assert "spark.driver.host" not in _conf(tmp_path, master)
    conf = _conf(tmp_path, master, {"spark.driver.host": "10.0.0.7"})
    assert conf["spark.driver.host"] == "10.0.0.7"
    assert "spark.driver.bindAddress" not in conf
