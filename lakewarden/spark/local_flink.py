"""Flink 1.17 with Hudi's Flink bundle, for tests and benchmarks only: the tests' Flink
writer of Hudi tables (`tests/flink_writer.py`, PyFlink) and Hudi's standalone Flink
compactor (`HoodieFlinkCompactor`, benchmark B23). Never a service of lakewarden's.

PyFlink 1.17.2 and Flink's jars (`apache-flink`, `apache-flink-libraries`) are installed by
scripts/setup.sh beside the venv, in `<venv>/flink` (`scripts/flink.txt`: PyFlink 1.17 has
wheels for CPython 3.7-3.10 only; its plain-Python SQL layer runs on 3.11). Hudi's bundle
(`hudi-flink1.17-bundle` 0.14.0, table version 6) is jars.lock's `server-flink` group.
Flink 1.17 targets Java 11: on Java 17 its JVM needs the JDK's modules opened (`OPENS`).
Hudi's bundle has no Hadoop: PySpark's own client (3.3.4) serves (`hadoop_jars`).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from lakewarden.settings import Settings
from lakewarden.spark.jars import server_jars

SIDECAR = Path(sys.prefix) / "flink"
GROUP = "server-flink"
# The reflection Flink (Kryo, its closure cleaner) and Hudi do on Java 17.
OPENS = [
    f"--add-opens=java.base/{p}=ALL-UNNAMED"
    for p in (
        "java.lang",
        "java.lang.invoke",
        "java.lang.reflect",
        "java.io",
        "java.net",
        "java.nio",
        "java.text",
        "java.time",
        "java.util",
        "java.util.concurrent",
        "java.util.concurrent.atomic",
        "sun.nio.ch",
    )
]
# Hadoop's client classes Hudi's Flink bundle leaves out: PySpark's own, and the logging
# API they call.
HADOOP_JARS = (
    "hadoop-client-api-3.3.4.jar",
    "hadoop-client-runtime-3.3.4.jar",
    "commons-logging-1.1.3.jar",
)
COMPACTOR = "org.apache.hudi.sink.compact.HoodieFlinkCompactor"


def flink_home() -> Path:
    """PyFlink's directory (its `lib/` holds Flink's jars), or a RuntimeError saying how to
    install it."""
    home = SIDECAR / "pyflink"
    if not (home / "lib").is_dir():
        raise RuntimeError(f"Flink is not installed at {SIDECAR}: run scripts/setup.sh")
    return home


def hadoop_jars() -> list[Path]:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return [jars / name for name in HADOOP_JARS]


def hudi_bundle(settings: Settings) -> Path:
    [bundle] = server_jars(settings, GROUP)
    return bundle


def pyflink_environment(logs: Path, python_path: list[str]) -> dict[str, str]:
    """The environment of a process that runs PyFlink's SQL (no Python UDFs): the sidecar
    first on the path, no loopback UDF server (Apache Beam, not installed), the JVM's
    options (the one way into PyFlink's gateway command), Hadoop's client, Flink's logs in
    `logs` (not in the venv)."""
    flink_home()
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SIDECAR), *python_path]),
        "_python_worker_execution_mode": "process",
        "JDK_JAVA_OPTIONS": " ".join(OPENS),
        "HADOOP_CLASSPATH": os.pathsep.join(str(j) for j in hadoop_jars()),
        "FLINK_LOG_DIR": str(logs),
    }


def java_command(settings: Settings, main_class: str, args: list[str]) -> list[str]:
    """A JVM running `main_class` of Flink's and Hudi's jars in a local Flink environment
    (the standalone compactor's `main`)."""
    classpath = [str(flink_home() / "lib" / "*"), str(hudi_bundle(settings))]
    classpath += [str(j) for j in hadoop_jars()]
    java = shutil.which("java") or "java"
    return [java, *OPENS, "-cp", os.pathsep.join(classpath), main_class, *args]
