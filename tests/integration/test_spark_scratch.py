"""The tests' JVMs keep Spark's scratch space (each driver's copy of its jars) under the test
session's temporary directory (`conftest.spark_scratch`), which the session removes: a JVM a
test kills cannot leave it in /tmp."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def test_the_driver_keeps_its_files_in_the_sessions_scratch(
    spark: SparkSession, spark_scratch: Path
) -> None:
    from pyspark import SparkFiles

    files = Path(SparkFiles.getRootDirectory())
    assert files.is_dir()
    assert files.is_relative_to(spark_scratch), files
