"""Write real Hudi tables with Spark's Hudi datasource, in a Hudi-family session of its own
process (`python -m hudi_writer <steps.json>`): a test's Iceberg session holds this
process's only SparkContext, and a Hudi session is a JVM of its own (lakewarden.spark.session).

Each step: {"path", "type": "MERGE_ON_READ"|"COPY_ON_WRITE", "op": "insert"|"upsert"|
"delete", "ids": [from, to], "value": n, "partitioned": bool} writes rows `id` in [from,
to) with `v = id * 10 + value` (region `r<id % 3>` when partitioned); or
{"path", "call": "<procedure args>"} runs `CALL <procedure>` (run_compaction, ...) and
records its rows; {"path", "compact": true} runs lakewarden's compaction
(lakewarden.formats.hudi.jobs.compact) and records what it did. Prints one JSON line: the
calls' results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from lakewarden.formats.hudi.jobs import compact
from lakewarden.settings import Settings
from lakewarden.spark.session import build_session

# Small and quick: two shuffle partitions, no metadata table (hudi-rs lists the files),
# no embedded timeline server; services only when a step calls them.
BASE_OPTIONS = {
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


def write(spark: Any, step: dict[str, Any]) -> None:
    start, end = step["ids"]
    df = spark.range(start, end, 1, 2).selectExpr(
        "id",
        "CONCAT('r', CAST(id % 3 AS STRING)) AS region",
        f"id * 10 + {int(step.get('value', 0))} AS v",
        f"CAST({int(step.get('value', 0))} AS BIGINT) AS ts",
    )
    options = {
        **BASE_OPTIONS,
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


def main(steps_file: str) -> None:
    steps = json.loads(Path(steps_file).read_text())
    with tempfile.TemporaryDirectory() as data_dir:
        spark = build_session(
            Settings(data_dir=Path(data_dir)),
            "postgresql://hudi@127.0.0.1:1/none",
            "hudi-writer",
            family="hudi",
        )
        results: list[Any] = []
        for step in steps:
            if "call" in step:
                rows = spark.sql(f"CALL {step['call']}").collect()
                results.append([r.asDict() for r in rows])
            elif step.get("compact"):
                results.append(vars(compact(spark, step["path"])))
            else:
                write(spark, step)
        spark.stop()
    print(json.dumps(results, default=str))


def run(steps: list[dict[str, Any]], where: Path) -> list[Any]:
    """Run `steps` in a process of its own (this module as a script); the calls' results.
    A failure's message leads with the exceptions' lines, not the stack's tail."""
    spec = where / "steps.json"
    spec.write_text(json.dumps(steps))
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    done = subprocess.run(
        [sys.executable, "-m", "hudi_writer", str(spec)],
        cwd=tests,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        lines = done.stderr.splitlines()
        causes = [ln for ln in lines if ("Exception" in ln or "Error" in ln) and "\tat " not in ln]
        raise AssertionError("\n".join([*causes[:12], "...", *lines[-15:]]))
    results: list[Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


if __name__ == "__main__":
    main(sys.argv[1])
