"""Write real Hudi and Delta tables with Spark, in a format family's session of its own
process (`python -m spark_writer <family>`): a test's Iceberg session holds this process's
only SparkContext, and a family is a JVM of its own (lakewarden.spark.session). One process
per family serves the whole test session (`SparkWriters`, conftest's `spark_writers`): its
JVM starts once, not once per fixture or test.

The process reads one JSON list of steps per line on stdin and answers one line on stdout:
`RESULT <json>`, each step's result, or `ERROR <traceback>`.

Hudi steps: {"path", "type": "MERGE_ON_READ"|"COPY_ON_WRITE", "op": "insert"|"upsert"|
"delete", "ids": [from, to], "value": n, "partitioned": bool} writes rows `id` in [from,
to) with `v = id * 10 + value` (region `r<id % 3>` when partitioned); {"path", "call":
"<procedure args>"} runs `CALL <procedure>` (run_compaction, ...) and gives its rows;
{"path", "compact": true} runs lakewarden's compaction (lakewarden.formats.hudi.jobs.compact)
and gives what it did; {"read": path} gives Spark's read of its `id` and `v`, sorted. The
answer holds each step's result but a Hudi write's (none).

Soak steps, a live writer beside lakewarden's services (one answer at the end;
tests/soak.py) until the `stop` file exists, `seconds` at most: {"soak": "hudi", "path",
"stop", "seconds", "keys", "batch", "log", "options"?} upserts into a merge-on-read
table in a loop, with Hudi's concurrency control as lakewarden's jobs set it (`options` add
to or replace the write's: another lock), a write that fails (a conflict) tried again until it
commits, and each committed round appended to the JSON-lines `log`; {"soak": "delta",
"path", "stop", "seconds", "rows_per_second", "checkpoint"} appends a rate source's rows
to a Delta table with Structured Streaming. Each answers its counts. (The Hudi soak of
tests/integration/test_live_writer.py is Flink's: tests/flink_writer.py.)

SQL steps (any family; Delta's): {"sql": "<statement>", "user_metadata": "<text>"?,
"conf": {...}?} gives the statement's rows; a step with user_metadata or conf runs in a new
session of its own with those session confs (user_metadata:
`spark.databricks.delta.commitInfo.userMetadata`, as a lakewarden job marks its commits).

Job steps: {"job": {"task_id", "attempt", "env"}} runs a dispatched attempt as its
application would (`application_entry.run_application`: load, heartbeat, recover, run,
record), in this process's warm session (a JVM of the family, started once) instead of a
JVM of its own; `env` is the `LAKEWARDEN_*` environment the leader gives an application.
It answers the application's exit code. (`warm_applications` in the Delta kinds' tests.)
{"staged": {"path", "plan", "task_id", "corrupt"?, "meanwhile"?}} runs lakewarden's Delta
compaction checked before its commit (`staged`) and answers its metrics or what it raised.

Any step may hold `hadoop`: settings for the session's Hadoop configuration, set before the
step runs (the writer's own S3A settings, for a table on S3).
"""

from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from lakewarden.formats.hudi.jobs import CONCURRENCY, compact
from lakewarden.settings import Settings
from lakewarden.spark.session import build_session

# Small and quick: two shuffle partitions, no metadata table (hudi-rs lists the files),
# no embedded timeline server; services only when a step calls them.
HUDI_OPTIONS = {
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.metadata.enable": "false",
    "hoodie.embed.timeline.server": "false",
    "hoodie.insert.shuffle.parallelism": "2",
    "hoodie.upsert.shuffle.parallelism": "2",
    "hoodie.delete.shuffle.parallelism": "2",
    "hoodie.bulkinsert.shuffle.parallelism": "2",
    "hoodie.compact.inline": "false",
    "hoodie.clean.automatic": "false",
}
RESULT, ERROR = "RESULT ", "ERROR "
# A writer no test has asked anything for this long exits (IDLE_EXIT), its JVM's memory
# freed for the rest of the run; the next request starts it again.
IDLE_S, IDLE_EXIT = 180.0, 3


def write_hudi(spark: Any, step: dict[str, Any]) -> None:
    start, end = step["ids"]
    df = spark.range(start, end, 1, 2).selectExpr(
        "id",
        "CONCAT('r', CAST(id % 3 AS STRING)) AS region",
        f"id * 10 + {int(step.get('value', 0))} AS v",
        f"CAST({int(step.get('value', 0))} AS BIGINT) AS ts",
    )
    options = {
        **HUDI_OPTIONS,
        "hoodie.table.name": step["path"].rstrip("/").rsplit("/", 1)[-1],
        "hoodie.datasource.write.table.type": step["type"],
        "hoodie.datasource.write.operation": step["op"],
        "hoodie.datasource.write.partitionpath.field": (
            "region" if step.get("partitioned") else ""
        ),
        **step.get("options", {}),
    }
    if not step.get("partitioned"):
        options["hoodie.datasource.write.keygenerator.class"] = (
            "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
        )
    df.write.format("hudi").options(**options).mode("append").save(step["path"])


def _stopped(step: dict[str, Any]) -> bool:
    """A soak writes until its `stop` file exists (the test says when), `seconds` at most."""
    started = step.setdefault("_started", time.monotonic())
    return Path(step["stop"]).exists() or time.monotonic() - started > float(step["seconds"])


# A soak's writer gives up after this many failed writes in a row (else it tries again;
# Flink's Hudi writer, tests/flink_writer.py, too).
SOAK_TRIES = 20


def soak_hudi(spark: Any, step: dict[str, Any]) -> dict[str, Any]:
    """Upsert rounds into a merge-on-read table until stopped, as a streaming writer does:
    round r writes `batch` keys from (r * batch) mod `keys` on with v = ts = r (round 0
    inserts every key). A round whose write fails is written again (the same rows, so an
    attempt that did commit changes nothing) until it commits; then its line goes to the
    log: the writer's own record of what every key must hold."""
    keys, batch, path = int(step["keys"]), int(step["batch"]), step["path"]
    options = {
        **HUDI_OPTIONS,
        **CONCURRENCY,
        "hoodie.table.name": path.rstrip("/").rsplit("/", 1)[-1],
        "hoodie.datasource.write.table.type": "MERGE_ON_READ",
        "hoodie.datasource.write.operation": "upsert",
        "hoodie.datasource.write.partitionpath.field": "region",
        **step.get("options", {}),  # another lock (ZooKeeper's), say
    }
    counts: dict[str, Any] = {"rounds": 0, "failed_writes": 0, "conflicts": 0, "errors": []}
    log = Path(step["log"])
    round_ = 0
    while round_ == 0 or not _stopped(step):
        start, size = (0, keys) if round_ == 0 else ((round_ * batch) % keys, batch)
        df = spark.range(start, start + size, 1, 2).selectExpr(
            f"id % {keys} AS id",
            f"CONCAT('r', CAST(id % {keys} % 3 AS STRING)) AS region",
            f"CAST({round_} AS BIGINT) AS v",
            f"CAST({round_} AS BIGINT) AS ts",
        )
        for tries in range(1, SOAK_TRIES + 1):
            try:
                df.write.format("hudi").options(**options).mode("append").save(path)
                break
            except Exception as exc:  # a conflict, or a lock not had in time: again
                text = str(exc)
                counts["failed_writes"] += 1
                counts["conflicts"] += "Conflict" in text or "conflict" in text
                if len(counts["errors"]) < 5:
                    counts["errors"].append(text.splitlines()[0][:300])
                if tries == SOAK_TRIES:
                    raise
                time.sleep(0.5)
        with log.open("a") as f:
            f.write(json.dumps({"round": round_, "start": start, "size": size}) + "\n")
        counts["rounds"] += 1
        round_ += 1
    counts["keys"] = keys
    return counts


def soak_delta(spark: Any, step: dict[str, Any]) -> dict[str, Any]:
    """Append a rate source's rows (`id` = its value: 0, 1, 2, ... with no gap) to a
    Delta table with Structured Streaming until stopped; the batches it reported
    committed and their rows."""
    rows = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", int(step["rows_per_second"]))
        .option("numPartitions", 2)
        .load()
        .selectExpr("value AS id", "timestamp AS ts")
    )
    query = (
        rows.writeStream.format("delta")
        .option("checkpointLocation", step["checkpoint"])
        .trigger(processingTime="1 second")
        .start(step["path"])
    )
    batches: dict[int, int] = {}
    try:
        while not _stopped(step):
            for progress in query.recentProgress:
                batches[int(progress["batchId"])] = int(progress["numInputRows"])
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            time.sleep(0.5)
        for progress in query.recentProgress:
            batches[int(progress["batchId"])] = int(progress["numInputRows"])
    finally:
        query.stop()
    return {"batches": len(batches), "rows_reported": sum(batches.values())}


def run_job(spark: Any, job: dict[str, Any]) -> int:
    """A dispatched attempt run in `spark` (see the module's doc), settings from its env."""
    from lakewarden.jobs.application_entry import run_application
    from lakewarden.runtime import make_runtime

    saved = dict(os.environ)
    os.environ.update(job["env"])
    try:
        rt = make_runtime("application", Settings())
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        # A session of the job's own (the same JVM): the confs a job sets on its session
        # (Hudi's concurrency and table version) stay out of the writer's.
        session = spark.newSession()
        return run_application(rt, int(job["task_id"]), int(job["attempt"]), warm=session)
    finally:
        rt.engine.dispose()


def staged(spark: Any, step: dict[str, Any]) -> dict[str, Any]:
    """lakewarden's staged Delta compaction (`formats.delta.staged_rewrite.compact`) of
    `path` by `plan` in a session marked for `task_id`, `corrupt` as the failpoint asks;
    `meanwhile`: SQL another writer commits right before the compaction's commit. Its
    metrics, or {"raised": the exception's class, "error", "metrics"?}."""
    from lakewarden.formats.delta import jobs as delta_jobs
    from lakewarden.formats.delta import staged_rewrite

    session = delta_jobs.marked_session(spark, int(step["task_id"]), 1)

    def before_commit() -> None:
        if step.get("meanwhile"):
            spark.sql(step["meanwhile"]).collect()

    try:
        return staged_rewrite.compact(
            session, step["path"], step["plan"], before_commit, corrupt=bool(step.get("corrupt"))
        )
    except Exception as exc:
        metrics = getattr(exc, "metrics", None)
        return {"raised": type(exc).__name__, "error": str(exc), "metrics": metrics}


def run_step(spark: Any, step: dict[str, Any]) -> Any:
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in step.get("hadoop", {}).items():  # the writer's own S3A settings
        hadoop.set(key, value)
    if "job" in step:
        return run_job(spark, step["job"])
    if step.get("soak") == "hudi":
        return soak_hudi(spark, step)
    if step.get("soak") == "delta":
        return soak_delta(spark, step)
    if "sql" in step:
        session = spark
        conf = dict(step.get("conf") or {})
        if "user_metadata" in step:
            conf["spark.databricks.delta.commitInfo.userMetadata"] = step["user_metadata"]
        if conf:
            session = spark.newSession()
            for key, value in conf.items():
                session.conf.set(key, value)
        return [r.asDict(recursive=True) for r in session.sql(step["sql"]).collect()]
    if "call" in step:
        return [r.asDict() for r in spark.sql(f"CALL {step['call']}").collect()]
    if "read" in step:  # Spark's own read of the table (its metadata table's listing)
        rows = spark.read.format("hudi").load(step["read"]).select("id", "v").collect()
        return sorted([int(r["id"]), int(r["v"])] for r in rows)
    if "staged" in step:
        return staged(spark, step["staged"])
    if step.get("compact"):
        return vars(compact(spark, step["path"]))
    write_hudi(spark, step)
    return None


def main(family: str) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        # A few tasks, not Delta's 50 to rebuild a tiny table's state, nor Spark's 10000
        # to list its files for VACUUM (as the Delta kinds' tests' applications).
        quick = {
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
        }
        spark = build_session(
            Settings(data_dir=Path(data_dir), spark_conf=quick),
            f"postgresql://{family}@127.0.0.1:1/none",
            f"{family}-writer",
            family=family,
        )
        # One request at a time (the parent waits for each answer): nothing is left in
        # stdin's buffer when select looks.
        while select.select([sys.stdin], [], [], IDLE_S)[0]:
            line = sys.stdin.readline()
            if not line:
                break
            try:
                results = [run_step(spark, step) for step in json.loads(line)]
                # a Hudi write answers nothing: the results are the other steps'
                answer = RESULT + json.dumps([r for r in results if r is not None], default=str)
            except Exception:
                answer = ERROR + json.dumps(traceback.format_exc())
            print(answer, flush=True)
        else:
            spark.stop()
            sys.exit(IDLE_EXIT)
        spark.stop()


# The one writer that is not Spark's: Flink's (tests/flink_writer.py), Hudi's upserts as a
# Flink job writes them.
FLINK = "flink"


class SparkWriters:
    """One writer process per family, started at its first use, stopped by `close`; and
    the Flink writer's as the `flink` family."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: dict[str, tuple[subprocess.Popen[str], queue.Queue[str]]] = {}

    def run(self, family: str, steps: list[dict[str, Any]], timeout: float = 600) -> list[Any]:
        """Each step's result, run by the family's process. A failure's message leads with
        the exceptions' lines, not the stack's tail."""
        line = self._ask(family, steps, timeout)
        if not line and self.procs[family][0].wait(60) == IDLE_EXIT:  # it left as we asked
            line = self._ask(family, steps, timeout)
        if line.startswith(RESULT):
            results: list[Any] = json.loads(line[len(RESULT) :])
            return results
        if line.startswith(ERROR):
            lines = json.loads(line[len(ERROR) :]).splitlines()
        else:  # it exited: its log says why
            self.procs.pop(family, None)
            lines = (self.logs / f"{family}-writer.log").read_text(errors="replace").splitlines()
        causes = [ln for ln in lines if ("Exception" in ln or "Error" in ln) and "\tat " not in ln]
        raise AssertionError("\n".join([*causes[:12], "...", *lines[-15:]]))

    def _ask(self, family: str, steps: list[dict[str, Any]], timeout: float) -> str:
        """Send `steps` to the family's process (started anew if it is not running); its
        answer, or "" if it exited."""
        proc, answers = self.procs.get(family) or self._start(family)
        if proc.poll() is not None:  # idle for IDLE_S, it exited
            proc, answers = self._start(family)
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(steps) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            return ""
        try:
            return answers.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the {family} writer did not answer in {timeout:.0f} s") from None

    def _start(self, family: str) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
        tests = Path(__file__).parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
        command = [sys.executable, "-m", "spark_writer", family]
        self.logs.mkdir(parents=True, exist_ok=True)
        if family == FLINK:  # not a Spark family: PyFlink's writer, on the same protocol
            import flink_writer

            env, command = (
                flink_writer.environment(self.logs),
                [sys.executable, "-m", "flink_writer"],
            )
        with open(self.logs / f"{family}-writer.log", "a") as log:  # Spark's and py4j's lines
            proc = subprocess.Popen(
                command,
                cwd=tests,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        answers: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_answers, args=(proc, answers), daemon=True).start()
        self.procs[family] = (proc, answers)
        return proc, answers

    def close(self) -> None:
        for proc, _ in self.procs.values():
            if proc.stdin is not None:
                proc.stdin.close()  # the process stops its session and exits
        for proc, _ in self.procs.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


def _answers(proc: subprocess.Popen[str], answers: queue.Queue[str]) -> None:
    """The process's answers, in order (its other lines on stdout are not), then "" when it
    exits."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith((RESULT, ERROR)):
            answers.put(line.rstrip("\n"))
    answers.put("")


if __name__ == "__main__":
    main(sys.argv[1])
