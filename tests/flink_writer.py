"""A real Flink writer of Hudi merge-on-read tables (issue 28, as Bilibili writes them): Flink
SQL `INSERT INTO` a `hudi` connector table, on PyFlink 1.17 (`<venv>/flink`, installed apart
by scripts/setup.sh from scripts/flink.txt) with Hudi's Flink bundle (jars.lock's
`server-flink`: hudi-flink1.17-bundle 0.14.0, table version 6). A process of its own
(`python -m flink_writer`, started by `SparkWriters` as the `flink` family and serving the
whole test session: one JVM, PyFlink's gateway with a local MiniCluster), on the same line
protocol as `spark_writer`.

Only Flink SQL is used, no Python UDF: PyFlink's Python layer then runs on Python 3.11 (its
wheels are for 3.7-3.10: the compiled parts are Beam's UDF runners, never loaded here), with
the loopback UDF server it would start (Beam, gRPC) off (`_python_worker_execution_mode`).
The JVM's options and classpath: `lakewarden.spark.local_flink`.

Steps: {"soak": "hudi", "path", "stop", "seconds", "keys", "batch", "log", "options"?}
upserts rounds into a merge-on-read table until the `stop` file exists (`seconds` at most):
round r writes `batch` keys from (r * batch) mod `keys` on with v = ts = r (round 0: every
key), each round one streaming `INSERT INTO` job whose checkpoints commit its delta commits
(its last at the end of its input); a round whose job fails (a conflict) runs again (the
same rows: an attempt that did commit changes nothing) until it commits, then its line goes
to the JSON-lines `log`, the writer's own record of every key's value. {"path", "rounds":
n, "keys", "batch", "options"?} writes n rounds the same way (no log). `options`: the hudi
table's options over `HUDI_OPTIONS` (e.g. the writer's own async compaction on).
"""

from __future__ import annotations

import json
import select
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from spark_writer import ERROR, IDLE_EXIT, IDLE_S, RESULT, SOAK_TRIES, _stopped

from lakewarden.formats.hudi.jobs import CONCURRENCY
from lakewarden.settings import Settings
from lakewarden.spark import local_flink

# The writer as lakewarden wants one beside its services: merge-on-read upserts, one task,
# no metadata table (hudi-rs lists the files), a bucket index (each round's job finds the
# keys' file groups by hash, with no state carried between jobs), Hudi's concurrency control
# as lakewarden's jobs set it, and its own compaction and clean off: lakewarden runs them.
HUDI_OPTIONS = {
    "table.type": "MERGE_ON_READ",
    "write.operation": "upsert",
    "precombine.field": "ts",
    "index.type": "BUCKET",
    "hoodie.bucket.index.num.buckets": "2",
    "write.tasks": "1",
    "metadata.enabled": "false",
    "compaction.async.enabled": "false",
    "compaction.schedule.enabled": "false",
    "clean.async.enabled": "false",
    **CONCURRENCY,
}


def environment(logs: Path) -> dict[str, str]:
    """The writer process's environment (`local_flink.pyflink_environment`), this
    repository's code and the tests' on its path."""
    tests = Path(__file__).parent
    return local_flink.pyflink_environment(logs, [str(tests.parent), str(tests)])


def _table_ddl(name: str, path: str, options: dict[str, str]) -> str:
    with_ = ", ".join(
        f"'{k}' = '{v}'" for k, v in {"connector": "hudi", "path": path, **options}.items()
    )
    return (
        f"CREATE TABLE {name} (id BIGINT, region STRING, v BIGINT, ts BIGINT, "
        f"PRIMARY KEY (id) NOT ENFORCED) PARTITIONED BY (region) WITH ({with_})"
    )


class FlinkWriter:
    """One PyFlink streaming TableEnvironment (its gateway JVM and local MiniCluster) for
    every step of the session."""

    def __init__(self) -> None:
        from pyflink.table import EnvironmentSettings, TableEnvironment

        bundle = local_flink.hudi_bundle(Settings())
        self.env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
        config = self.env.get_config()
        config.set("pipeline.jars", bundle.as_uri())
        config.set("parallelism.default", "1")
        config.set("execution.checkpointing.interval", "2 s")
        self.tables: dict[tuple[str, str], str] = {}
        self.jobs = 0

    def table(self, path: str, options: dict[str, str]) -> str:
        """The catalog name of the hudi table at `path` with `options`."""
        key = (path, json.dumps(options, sort_keys=True))
        if key not in self.tables:
            name = f"hudi_{len(self.tables)}"
            table = path.removeprefix("file://")
            self.env.execute_sql(_table_ddl(name, table, {**HUDI_OPTIONS, **options}))
            self.tables[key] = name
        return self.tables[key]

    def upsert(self, table: str, start: int, size: int, keys: int, round_: int) -> None:
        """One round: `size` keys from `start` on (mod `keys`), v = ts = `round_`, one
        streaming job run to its end (its last checkpoint commits)."""
        self.jobs += 1
        source = f"src_{self.jobs}"
        self.env.execute_sql(
            f"CREATE TEMPORARY TABLE {source} (n BIGINT) WITH ('connector' = 'datagen', "
            f"'fields.n.kind' = 'sequence', 'fields.n.start' = '{start}', "
            f"'fields.n.end' = '{start + size - 1}')"
        )
        try:
            self.env.execute_sql(
                f"INSERT INTO {table} SELECT MOD(n, {keys}), "
                f"CONCAT('r', CAST(MOD(MOD(n, {keys}), 3) AS STRING)), "
                f"CAST({round_} AS BIGINT), CAST({round_} AS BIGINT) FROM {source}"
            ).wait()
        finally:
            self.env.execute_sql(f"DROP TEMPORARY TABLE {source}")

    def rounds(self, step: dict[str, Any]) -> dict[str, Any]:
        """Write rounds (a soak until stopped, else `rounds` of them), each retried until
        it commits; the counts."""
        keys, batch = int(step["keys"]), int(step["batch"])
        table = self.table(step["path"], dict(step.get("options") or {}))
        counts: dict[str, Any] = {"rounds": 0, "failed_writes": 0, "conflicts": 0, "errors": []}
        log = Path(step["log"]) if step.get("log") else None
        round_ = 0
        while not self._done(step, round_):
            start, size = (0, keys) if round_ == 0 else ((round_ * batch) % keys, batch)
            for tries in range(1, SOAK_TRIES + 1):
                try:
                    self.upsert(table, start, size, keys, round_)
                    break
                except Exception as exc:  # a conflict, or a lock not had in time: again
                    text = str(exc)
                    counts["failed_writes"] += 1
                    counts["conflicts"] += "onflict" in text
                    if len(counts["errors"]) < 5:
                        causes = [ln for ln in text.splitlines() if "Exception" in ln]
                        counts["errors"].append((causes[-1] if causes else text)[:300])
                    if tries == SOAK_TRIES:
                        raise
                    time.sleep(0.5)
            if log is not None:
                with log.open("a") as f:
                    f.write(json.dumps({"round": round_, "start": start, "size": size}) + "\n")
            counts["rounds"] += 1
            round_ += 1
        counts["keys"] = keys
        return counts

    @staticmethod
    def _done(step: dict[str, Any], round_: int) -> bool:
        if "rounds" in step:
            return round_ >= int(step["rounds"])
        return round_ > 0 and _stopped(step)


def main() -> None:
    writer = FlinkWriter()
    # One request at a time (the parent waits for each answer), as spark_writer's.
    while select.select([sys.stdin], [], [], IDLE_S)[0]:
        line = sys.stdin.readline()
        if not line:
            break
        try:
            answer = RESULT + json.dumps([writer.rounds(s) for s in json.loads(line)])
        except Exception:
            answer = ERROR + json.dumps(traceback.format_exc())
        print(answer, flush=True)
    else:
        sys.exit(IDLE_EXIT)


if __name__ == "__main__":
    main()
