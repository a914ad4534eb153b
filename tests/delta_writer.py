"""Run Spark SQL on real Delta tables in a Delta-family session of its own process
(`python -m delta_writer <steps.json>`): a test's Iceberg session holds this process's only
SparkContext, and a Delta session is a JVM of its own (lakewarden.spark.session).

Each step: {"sql": "<statement>", "user_metadata": "<text>"?}; a step with user_metadata
runs in a new session of its own with `spark.databricks.delta.commitInfo.userMetadata`
set (as a lakewarden job marks its commits). Prints one JSON line: each step's rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from lakewarden.settings import Settings
from lakewarden.spark.session import build_session


def main(steps_file: str) -> None:
    steps = json.loads(Path(steps_file).read_text())
    with tempfile.TemporaryDirectory() as data_dir:
        spark = build_session(
            Settings(data_dir=Path(data_dir)),
            "postgresql://delta@127.0.0.1:1/none",
            "delta-writer",
            family="delta",
        )
        results: list[Any] = []
        for step in steps:
            session = spark
            if "user_metadata" in step:
                session = spark.newSession()
                session.conf.set(
                    "spark.databricks.delta.commitInfo.userMetadata", step["user_metadata"]
                )
            rows = session.sql(step["sql"]).collect()
            results.append([r.asDict(recursive=True) for r in rows])
        spark.stop()
    print(json.dumps(results, default=str))


def run(steps: list[dict[str, Any]], where: Path) -> list[Any]:
    """Run `steps` in a process of its own (this module as a script); each step's rows."""
    spec = where / "delta-steps.json"
    spec.write_text(json.dumps(steps))
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    done = subprocess.run(
        [sys.executable, "-m", "delta_writer", str(spec)],
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
