"""What a Hudi-family Spark session costs beside the Iceberg one (issue 28, research note
§6): each family's session built in a fresh process, timed from `build_session` to the end
of a first trivial query, and its JVM's resident memory then. Families alternate, so load
drifts hit both. Not a B-number: a one-off measure of session start, reported in
docs/hudi.md.

    python -m benchmarks.session_families [repeats]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile

_CHILD = """
import json, sys, time, psutil
from lakewarden.settings import Settings
from lakewarden.spark.session import build_session
started = time.perf_counter()
spark = build_session(Settings(data_dir=sys.argv[2]), "postgresql://bench@127.0.0.1:1/x",
                      "session-families", family=sys.argv[1])
spark.range(0, 1000).selectExpr("sum(id)").collect()
seconds = time.perf_counter() - started
jvm = max(psutil.Process().children(recursive=True), key=lambda p: p.memory_info().rss)
print(json.dumps({"seconds": seconds, "rss_mb": jvm.memory_info().rss / 2**20}))
spark.stop()
"""


def measure(family: str, data_dir: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, family, data_dir],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main(repeats: int) -> dict[str, dict[str, object]]:
    runs: dict[str, list[dict[str, float]]] = {"iceberg": [], "hudi": []}
    with tempfile.TemporaryDirectory() as data_dir:
        for _ in range(repeats):
            for family in runs:
                runs[family].append(measure(family, data_dir))
    summary = {
        family: {
            "start_s_median": round(statistics.median(r["seconds"] for r in rs), 2),
            "rss_mb_median": round(statistics.median(r["rss_mb"] for r in rs)),
            "start_s": [round(r["seconds"], 2) for r in rs],
            "rss_mb": [round(r["rss_mb"]) for r in rs],
        }
        for family, rs in runs.items()
    }
    return summary


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3), indent=2))
