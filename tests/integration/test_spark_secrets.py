"""The catalog's password reaches Spark's JDBC catalog, but no process's command line.

PySpark starts the JVM as `spark-submit --conf key=value ...` for every builder setting,
and /proc/<pid>/cmdline is world-readable: the password is set on the running session.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from sqlalchemy.engine import make_url

from lakewarden.runtime import Runtime

pytestmark = pytest.mark.spark


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # pid (comm) state ppid ...: comm may hold spaces and parentheses
            text = stat.read_text()
        except OSError:
            continue
        ppid = int(text.rpartition(")")[2].split()[1])
        tree.setdefault(ppid, []).append(int(stat.parent.name))
    return tree


def _process_tree(root: int) -> dict[int, bytes]:
    """Every live process under `root` (itself included), with its command line."""
    tree, todo, found = _children(), [root], {}
    while todo:
        pid = todo.pop()
        try:
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        todo.extend(tree.get(pid, []))
    return found


def test_the_catalog_password_is_on_no_command_line_and_spark_still_reads_the_catalog(
    spark: SparkSession, spark_rt: Runtime
) -> None:
    password = make_url(spark_rt.db_url).password
    if not password:
        pytest.skip("the test database has no password (TEST_DATABASE_URL without one)")
    cat = spark_rt.settings.catalog_name

    processes = _process_tree(os.getpid())
    jvms = [cmd for cmd in processes.values() if f"spark.sql.catalog.{cat}.uri=".encode() in cmd]
    assert jvms, "the session's JVM (launched with the catalog settings) is in this tree"
    for pid, cmdline in processes.items():
        assert password.encode() not in cmdline, f"the password is on the command line of {pid}"
        assert b"jdbc.password" not in cmdline, pid

    # The JDBC catalog still logs in (the server refuses a connection without the password).
    name = f"`{cat}`.`secrets_ns`.`t`"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{cat}`.`secrets_ns`")
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
    spark.sql(f"CREATE TABLE {name} (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {name} VALUES (1), (2), (3)")
    assert spark.sql(f"SELECT count(*) FROM {name}").collect()[0][0] == 3
    assert spark_rt.catalog.load_table(("secrets_ns", "t")).current_snapshot() is not None
    spark.sql(f"DROP TABLE {name} PURGE")
