"""Make every maintenance commit identifiable, so a job is never committed twice.

The scheduler sets the commit properties (task id and attempt) for the job's thread;
runners that commit through Iceberg's Java actions put them into the snapshot summary.
Before re-running a task, the scheduler looks for a snapshot carrying its task id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from pyiceberg.table import Table

from lakewarden.formats.base import JobMarker
from lakewarden.formats.iceberg import markers

# The mark's keys are spelled in formats.iceberg.markers; re-exported for the callers here.
from lakewarden.formats.iceberg.markers import ATTEMPT_KEY as ATTEMPT_KEY
from lakewarden.formats.iceberg.markers import REVERT_KEY as REVERT_KEY
from lakewarden.formats.iceberg.markers import TASK_KEY as TASK_KEY
from lakewarden.formats.iceberg.table import open_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

R = TypeVar("R")


_PROPERTIES: ContextVar[dict[str, str] | None] = ContextVar(
    "lakewarden_commit_properties", default=None
)


@contextmanager
def committing_as(task_id: int, attempt: int) -> Iterator[None]:
    token = _PROPERTIES.set(markers.properties(JobMarker(task_id, attempt)))
    try:
        yield
    finally:
        _PROPERTIES.reset(token)


def commit_properties() -> dict[str, str]:
    return dict(_PROPERTIES.get() or {})


def with_commit_tags(spark: SparkSession, tags: dict[str, str], action: Callable[[], R]) -> R:
    """Run `action` (Spark SQL that commits: DELETE, MERGE, INSERT) so that its commit carries
    `tags` in the snapshot summary, as a DataFrame write's `snapshot-property.<key>` options do.

    SQL statements take no write options, and a session-wide conf would tag the commits of
    every job sharing the session. Iceberg's `CommitMetadata.withCommitProperties` holds the
    properties in a Java thread-local around a callable; with PySpark's pinned threads
    (PYSPARK_PIN_THREAD, set by lakewarden.spark.session) py4j runs the callable's Python
    body in this thread and its Spark calls on the same JVM thread, so concurrent jobs in one
    session tag only their own commits (Iceberg 1.10.2 reads it for metadata-only deletes,
    copy-on-write and merge-on-read writes)."""
    from pyspark.java_gateway import ensure_callback_server_started

    ensure_callback_server_started(spark.sparkContext._gateway)
    jvm: Any = spark._jvm
    properties = jvm.java.util.HashMap()
    for key, value in tags.items():
        properties.put(key, value)
    outcome: dict[str, Any] = {}

    class Body:
        def call(self) -> None:
            # Keep the Python exception as it is (py4j would wrap it in a Java one).
            try:
                outcome["result"] = action()
            except BaseException as exc:  # re-raised below, unchanged
                outcome["error"] = exc

        class Java:
            implements = ["java.util.concurrent.Callable"]

    jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
        properties, Body(), jvm.java.lang.Class.forName("java.lang.RuntimeException")
    )
    if "error" in outcome:
        raise outcome["error"]
    result: R = outcome["result"]
    return result


def task_id() -> int | None:
    """The task the running job belongs to (None outside a scheduled job)."""
    value = (_PROPERTIES.get() or {}).get(TASK_KEY)
    return int(value) if value is not None else None


# The check a job makes right before each statement that commits (or deletes files): the
# scheduler installs one that asks the current policy (lakewarden.policy.gate) and raises
# lakewarden.outcomes.PolicyChanged when it no longer allows the task.
_GUARD: ContextVar[Callable[[], None] | None] = ContextVar("lakewarden_commit_guard", default=None)


@contextmanager
def guarded_by(check: Callable[[], None]) -> Iterator[None]:
    token = _GUARD.set(check)
    try:
        yield
    finally:
        _GUARD.reset(token)


def before_commit() -> None:
    """Runners call this right before committing; it raises if the policy says stop."""
    check = _GUARD.get()
    if check is not None:
        check()


def find_commit(table: Table, task_id: int) -> tuple[int, str | None] | None:
    """The (snapshot id, attempt) of the newest commit task `task_id` made that still
    stands, if any (a job with partial progress commits once per file-group batch). It
    stands when it is in a branch's history (main's, or the branch the job wrote to) and no
    later commit of that history reverts the task's rewrite (`REVERT_KEY`): a commit rolled
    away or reverted after a failed validation is not a success to recover. The rule is the
    one finder's (lakewarden.formats.iceberg.finder); this stays its public entry."""
    found = open_table(table).timeline().find_job_commits(task_id)
    return None if found is None else (int(found.id), found.summary.get(ATTEMPT_KEY))
