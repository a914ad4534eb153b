"""Spark's own WARN/ERROR log lines of one job, for the run's log tail.

`install` adds a log4j2 appender to the driver's JVM (the scheduler's warm session, or a
submitted application's driver): every WARN and ERROR line, in a file per Spark
application, each record tagged with the lakewarden job group of the thread that logged
it. `capture` tags a job's threads: its driver thread (log4j's thread context, set on the
JVM thread PySpark pins to the calling Python thread) and its tasks (a `mdc.*` local
property, which Spark's executors copy into the task thread's context), and notes where
the file ended when the job started. `JobLog.lines()` reads what was written since.

Concurrent jobs in one session: a record tagged with another job's group is left out.
An untagged one (logged by a thread of Spark's or Iceberg's own) that names a stage (the
task-result thread's "Lost task 0.0 in stage 7.0 ...") goes to the job whose stage it is:
Spark's status tracker lists the stages of the job group when the job ends. One that names
no stage cannot be told apart: it goes to every job running at that moment.

On a cluster, executors log on their own hosts: the driver's file has the driver's lines,
among them that "Lost task ..." line, which quotes the executor's exception.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

APPENDER = "lakewarden-job-log"
# The task's context key: Spark copies local properties named mdc.* into its executors'
# log context under the same name.
GROUP_KEY = "mdc.lakewarden.group"
_PATTERN = "%d{ISO8601} %p %c{1} [%t] {%X{" + GROUP_KEY + "}} %m%n%ex"
_HEADER = re.compile(r"^\d{4}-\d\d-\d\dT\S+ (?:WARN|ERROR|FATAL) \S+ \[.*?\] \{(?P<group>[^}]*)\} ")
_STAGE = re.compile(r"\bstage (\d+)\.\d+\b")
_ROLL_SIZE = "16MB"  # then one older file kept: a long-lived session's file stays small


def install(spark: SparkSession, directory: Path) -> Path | None:
    """Log the driver JVM's WARN and ERROR lines to `<directory>/<application id>.log`
    (besides wherever they already go). Idempotent: a session already logging keeps its file.
    Never fails the session: without it, log tails hold the Python exception alone."""
    try:
        return _install(spark, directory)
    except Exception as exc:
        log.warning("Spark's log lines will be missing from job runs' log tails: %s", exc)
        return None


def _install(spark: SparkSession, directory: Path) -> Path:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    core = jvm.org.apache.logging.log4j.core
    ctx = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    config = ctx.getConfiguration()
    existing = config.getAppender(APPENDER)
    if existing is not None:
        return Path(existing.getFileName())
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{spark.sparkContext.applicationId}.log"
    result = core.Filter.Result
    appender = (
        core.appender.RollingFileAppender.newBuilder()
        .setName(APPENDER)
        .withFileName(str(path))
        .withFilePattern(f"{path}.%i")
        .withPolicy(core.appender.rolling.SizeBasedTriggeringPolicy.createPolicy(_ROLL_SIZE))
        .withStrategy(
            core.appender.rolling.DefaultRolloverStrategy.newBuilder()
            .withMax("1")
            .withConfig(config)
            .build()
        )
        .setLayout(
            core.layout.PatternLayout.newBuilder()
            .withPattern(_PATTERN)
            .withConfiguration(config)
            .build()
        )
        .setFilter(
            core.filter.ThresholdFilter.createFilter(
                jvm.org.apache.logging.log4j.Level.WARN, result.ACCEPT, result.DENY
            )
        )
        .setConfiguration(config)
        .build()
    )
    appender.start()
    config.addAppender(appender)
    config.getRootLogger().addAppender(appender, None, None)
    ctx.updateLoggers()
    return path


def log_file(spark: SparkSession) -> Path | None:
    """The file `install` set up in this session's JVM, if any."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    config = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration()
    appender = config.getAppender(APPENDER)
    return None if appender is None else Path(appender.getFileName())


@dataclass
class JobLog:
    """Where a job's lines start in the session's log file, and whose they are."""

    path: Path | None
    offset: int
    group: str
    # Of the job group, once it ended (Spark's status tracker); None: unknown.
    stages: set[str] | None = None

    def lines(self) -> str:
        """The job's WARN/ERROR records written since it started."""
        if self.path is None or not self.path.exists():
            return ""
        with open(self.path, "rb") as f:
            # Smaller than at the start: the file rolled over meanwhile; its start is ours.
            f.seek(self.offset if f.seek(0, 2) >= self.offset else 0)
            text = f.read().decode(errors="replace")
        return job_lines(text, self.group, self.stages)


@contextmanager
def capture(spark: SparkSession, group: str) -> Iterator[JobLog]:
    """Tag this thread's Spark work with `group` while the block runs (see the module)."""
    job_log = JobLog(None, 0, group)
    # Seeing Spark's lines is a help, never a reason for the job to fail: the job itself
    # will say what is wrong with its JVM.
    with suppress(Exception):
        path = log_file(spark)
        job_log.offset = path.stat().st_size if path and path.exists() else 0
        job_log.path = path
        spark.sparkContext.setLocalProperty(GROUP_KEY, group)
        _thread_context(spark).put(GROUP_KEY, group)
    try:
        yield job_log
    finally:
        with suppress(Exception):
            job_log.stages = stages_of(spark, group)
        with suppress(Exception):
            _thread_context(spark).remove(GROUP_KEY)
            spark.sparkContext.setLocalProperty(GROUP_KEY, None)  # type: ignore[arg-type]


def stages_of(spark: SparkSession, group: str) -> set[str]:
    """The stage ids of the Spark jobs of a job group (the status tracker keeps the last
    spark.ui.retainedJobs jobs' info, the UI on or not)."""
    tracker = spark.sparkContext.statusTracker()
    stages: set[str] = set()
    for job_id in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job_id)
        if info is not None:
            stages.update(str(s) for s in info.stageIds)
    return stages


def _thread_context(spark: SparkSession) -> Any:
    """log4j's context of the JVM thread PySpark pins to this Python thread."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return jvm.org.apache.logging.log4j.ThreadContext


def job_lines(text: str, group: str, own_stages: set[str] | None = None) -> str:
    """Of a log written by `install`'s layout, the records of `group` (see the module for
    untagged ones), each with its continuation lines (message, stack trace). `own_stages`:
    the group's stages, when known; else a stage is the group's whose tagged records name
    it first."""
    records: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            records.append((header["group"], [line]))
        elif records:
            records[-1][1].append(line)
    stages: dict[str, str] = {}
    for tag, lines in records:
        if tag:
            for stage in _STAGE.findall(lines[0]):
                stages.setdefault(stage, tag)
    mine = {s for s, tag in stages.items() if tag == group} | (own_stages or set())
    kept = []
    for tag, lines in records:
        named = set(_STAGE.findall(lines[0]))
        if tag:
            ours = tag == group
        elif not named or named & mine:
            ours = True
        else:  # a stage of no job we know of: ours only if our own stages are unknown
            ours = own_stages is None and not named & set(stages)
        if ours:
            kept.extend(lines)
    return "\n".join(kept)
