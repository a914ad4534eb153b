"""Delta's own commands on a Delta-family session (`lakewarden.spark.session`,
`family="delta"`): `OPTIMIZE` (bin-pack, or `ZORDER BY`), `REORG … APPLY (PURGE)`,
`VACUUM`, a TTL's `DELETE` (and its count right before), `RESTORE` (undo), and statistics
recomputed by Delta's `StatisticsCollection.recompute` (no SQL for it in Delta 3.3.3).

Every command runs in a new session of the job's own (`spark.newSession()`) whose
`spark.databricks.delta.commitInfo.userMetadata` is the job's mark as a JSON object (the
one free-form field Spark writes into a commit's commitInfo; `formats.delta.timeline` reads
it back), so a retry finds the commit and never runs again. Session confs set there are
that session's only: the sizes an OPTIMIZE packs to, and, when the policy consents to a
retention below Delta's own check, `retentionDurationCheck.enabled=false` for that VACUUM.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from lakewarden.formats.base import ATTEMPT_KEY, TASK_KEY
from lakewarden.spark.sql import column, partition_predicate, path_literal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
# OPTIMIZE's bin-packing: files under minFileSize are rewritten into files of maxFileSize.
MIN_FILE_SIZE = "spark.databricks.delta.optimize.minFileSize"
MAX_FILE_SIZE = "spark.databricks.delta.optimize.maxFileSize"
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
# VACUUM writes its START and END commits (with the job's mark) to the log.
VACUUM_LOGGING = "spark.databricks.delta.vacuum.logging.enabled"


# An undo's RESTORE carries this key (the task it undoes), not the task's mark: a commit of
# the task found in the log means the task committed (`find_job_commits`), and a RESTORE is
# not the job's commit.
UNDO_KEY = "lakewarden.undo-of-task"


# Delta's optimistic concurrency: a command whose commit conflicts with a version another
# writer committed since it read the table fails with one of io.delta.exceptions'
# Concurrent*Exception (ConcurrentDeleteReadException: a file it read was removed, by a
# DELETE, UPDATE or MERGE; ...), or a DELTA_CONCURRENT_* error class; nothing of it commits.
_CONFLICT = re.compile(r"\b(Concurrent\w*Exception|DELTA_CONCURRENT_\w+)")


def conflict_of(exc: BaseException) -> str | None:
    """The Delta conflict `exc` is (its exception's name), or None: another writer's
    commit made this one fail; nothing was committed, and the attempt is retried."""
    found = _CONFLICT.search(str(exc))
    return found.group(1) if found else None


def marked_session(
    spark: SparkSession, task_id: int, attempt: int, conf: dict[str, str] | None = None
) -> SparkSession:
    """A session of the job's own whose commits carry its mark (and `conf`)."""
    session = spark.newSession()
    mark = {TASK_KEY: str(task_id), ATTEMPT_KEY: str(attempt)}
    session.conf.set(USER_METADATA, json.dumps(mark, sort_keys=True))
    for key, value in (conf or {}).items():
        session.conf.set(key, value)
    return session


def optimize_sql(
    path: str, partitions: list[dict[str, Any]] | None, zorder: list[str] | None = None
) -> str:
    """`OPTIMIZE delta.`path` [WHERE <those partitions>] [ZORDER BY (cols)]`."""
    sql = f"OPTIMIZE delta.`{_path(path)}`"
    if partitions:
        sql += f" WHERE {partition_predicate(partitions)}"
    if zorder:
        sql += f" ZORDER BY ({', '.join(column(c) for c in zorder)})"
    return sql


def optimize(
    session: SparkSession,
    path: str,
    partitions: list[dict[str, Any]] | None,
    *,
    zorder: list[str] | None = None,
) -> dict[str, Any]:
    """Run OPTIMIZE in `session` (a `marked_session`); its metrics row as plain data."""
    rows = session.sql(optimize_sql(path, partitions, zorder)).collect()
    return rows[0].asDict(recursive=True)["metrics"] if rows else {}


def purge_sql(path: str, partitions: list[dict[str, Any]]) -> str:
    """`REORG TABLE delta.`path` [WHERE <those partitions>] APPLY (PURGE)`: rewrite the
    files whose deletion vectors hide rows, without those rows."""
    where = f" WHERE {partition_predicate(partitions)}" if partitions else ""
    return f"REORG TABLE delta.`{_path(path)}`{where} APPLY (PURGE)"


def purge(session: SparkSession, path: str, partitions: list[dict[str, Any]]) -> dict[str, Any]:
    """Run REORG … APPLY (PURGE) in `session` (a `marked_session`); its metrics row."""
    rows = session.sql(purge_sql(path, partitions)).collect()
    return rows[0].asDict(recursive=True).get("metrics") or {} if rows else {}


def vacuum(session: SparkSession, path: str, retain_hours: float) -> None:
    """VACUUM the files the table stopped referencing more than `retain_hours` ago."""
    hours = f"{float(retain_hours):.6f}"  # a plain decimal: Spark's grammar has no 1e-05
    session.sql(f"VACUUM delta.`{_path(path)}` RETAIN {hours} HOURS").collect()


def count_older(spark: SparkSession, path: str, predicate: str, version: int) -> tuple[int, int]:
    """(rows `predicate` matches, all rows) of the table at `version` (a TTL's exact count
    right before its DELETE, deletion vectors applied)."""
    row = spark.sql(
        f"SELECT count_if({predicate}) AS expired, count(*) AS total "
        f"FROM delta.`{_path(path)}` VERSION AS OF {int(version)}"
    ).collect()[0]
    return int(row["expired"]), int(row["total"])


def rows_at(spark: SparkSession, path: str, version: int) -> int:
    """The table's live rows at `version`."""
    sql = f"SELECT count(*) AS n FROM delta.`{_path(path)}` VERSION AS OF {int(version)}"
    return int(spark.sql(sql).collect()[0]["n"])


def delete(session: SparkSession, path: str, predicate: str) -> None:
    """`DELETE FROM delta.`path` WHERE predicate` in `session` (a `marked_session`)."""
    session.sql(f"DELETE FROM delta.`{_path(path)}` WHERE {predicate}").collect()


def restore_sql(path: str, version: int) -> str:
    """The statement that sets the table back to `version` (an operator may run it too)."""
    return f"RESTORE TABLE delta.`{_path(path)}` TO VERSION AS OF {int(version)}"


def restore(spark: SparkSession, path: str, version: int, task_id: int) -> dict[str, Any]:
    """Set the table back to `version` in a session of its own whose commit says which
    task it undoes (`UNDO_KEY`); RESTORE's metrics row as plain data."""
    session = spark.newSession()
    session.conf.set(USER_METADATA, json.dumps({UNDO_KEY: str(task_id)}))
    rows = session.sql(restore_sql(path, version)).collect()
    return rows[0].asDict(recursive=True) if rows else {}


def recompute_stats(
    session: SparkSession, path: str, partitions: list[dict[str, Any]] | None
) -> int:
    """Delta's own `StatisticsCollection.recompute(spark, deltaLog, catalogTable,
    predicates, fileFilter)` in `session` (a `marked_session`): the files of `partitions`
    (None: the whole table) that have no statistics are read and committed again with
    theirs, one `COMPUTE STATS` commit (dataChange false). Delta 3.3.3's SQL has no
    statement for it (`ANALYZE TABLE … COMPUTE DELTA STATISTICS` is a parse error), so it is
    called through py4j. The predicates name partition columns only (`partition_predicate`);
    the file filter is the set of the snapshot's add actions without `stats` (a Scala Set is
    a function AddFile => Boolean; the transaction's files carry no stats either, so those
    files match and no file with statistics is read again; one added since is left to the
    next task). Its commit's userMetadata (the job's mark) is read from the active session:
    the marked one is made active for the call. The files it chose to recompute."""
    jvm: Any = session._jvm
    jsession: Any = session._jsparkSession
    none = jvm.scala.Option.apply(None)
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(jsession, _path(path))
    lacking = delta_log.update(False, none, none).allFiles().where("stats IS NULL")
    only = jvm.org.apache.spark.api.python.PythonUtils.toSeq(lacking.collectAsList()).toSet()
    recompute = jvm.org.apache.spark.sql.delta.stats.StatisticsCollection
    if partitions:
        where = jvm.org.apache.spark.sql.functions.expr(partition_predicate(partitions)).expr()
        predicates = jvm.org.apache.spark.api.python.PythonUtils.toSeq([where])
    else:
        predicates = getattr(recompute, "recompute$default$4")()  # Seq(true): every file
    active = jvm.org.apache.spark.sql.SparkSession.getActiveSession()
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)
    try:
        recompute.recompute(jsession, delta_log, none, predicates, only)
    finally:
        if active.isDefined():
            jvm.org.apache.spark.sql.SparkSession.setActiveSession(active.get())
        else:
            jvm.org.apache.spark.sql.SparkSession.clearActiveSession()
    return int(only.size())


def _path(path: str) -> str:
    """The path for `delta.`…``: `path_literal`'s checks (no quotes, backticks, control
    characters), without its quotes."""
    return path_literal(path)[1:-1]
