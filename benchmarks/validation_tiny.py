"""B24's arms on tiny tables, warm and repeated (B24's smoke run is one cold repeat):

    python -m benchmarks.validation_tiny [repeats]    # default 5

B12's tiny table (one append of 4 files, 400 rows) and B16's smoke table (1,200 rows, 4 day
partitions): a warm-up job of each arm, then `repeats` rounds of the arms rotated: validated
(inputs observed, small outputs summed in the driver), unvalidated, and validated with the
outputs read by a Spark job (before the driver's sums). Wall and Spark JVM CPU seconds per
job; what validation adds (validated - unvalidated, per round). Prints JSON.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from typing import Any

from benchmarks import data
from benchmarks.__main__ import _context
from benchmarks.dispatch import TINY
from benchmarks.harness import Stat, jvm_cpu_seconds
from benchmarks.rewrite import rollback
from benchmarks.validation import _compaction
from lakewarden.catalogs.catalog import TableRef

TABLES: dict[str, tuple[TableRef, data.Shape, dict[str, Any]]] = {
    "b12_tiny": (TableRef("bench", "tiny_b12"), TINY, {}),
    "b16_smoke": (
        TableRef("bench", "tiny_b16"),
        data.Shape(2, 1, 600),
        {"spec": data.BY_DAY, "days": 2},
    ),
}
ARMS = ("driver", "off", "spark")


def main(repeats: int) -> dict[str, object]:
    ctx = _context(True)
    out: dict[str, object] = {"load_before": os.getloadavg()}
    try:
        for name, (ref, shape, extra) in TABLES.items():
            data.create(ctx.rt.catalog, ref.dotted, shape, **extra)
            snap = ctx.rt.catalog.load_table(ref.dotted).current_snapshot()
            assert snap is not None
            wall: dict[str, list[float]] = {a: [] for a in ARMS}
            cpu: dict[str, list[float]] = {a: [] for a in ARMS}
            summed: list[str] = []
            for i in range(repeats + 1):
                for arm in ARMS[i % 3 :] + ARMS[: i % 3]:
                    used = jvm_cpu_seconds(ctx.spark)
                    seconds, metrics = _compaction(ctx, ref, arm != "off", driver=arm != "spark")
                    used = jvm_cpu_seconds(ctx.spark) - used
                    rollback(ctx, ref, snap.snapshot_id)
                    if i == 0:
                        continue  # warm-up
                    wall[arm].append(seconds)
                    cpu[arm].append(used)
                    if arm == "driver":
                        summed.append(metrics["validation"]["outputs"])
            out[name] = {
                "rows": shape.rows,
                "wall_s": {a: asdict(Stat.of(v)) for a, v in wall.items()},
                "cpu_s": {a: asdict(Stat.of(v)) for a, v in cpu.items()},
                "added_driver_s": asdict(
                    Stat.of([a - b for a, b in zip(wall["driver"], wall["off"], strict=True)])
                ),
                "added_spark_s": asdict(
                    Stat.of([a - b for a, b in zip(wall["spark"], wall["off"], strict=True)])
                ),
                "driver_over_spark": asdict(
                    Stat.of([a / b for a, b in zip(wall["driver"], wall["spark"], strict=True)])
                ),
                "outputs_summed_by": summed,
            }
            ctx.rt.catalog.purge_table(ref.dotted)
    finally:
        ctx.stop()
    out["load_after"] = os.getloadavg()
    return out


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5), indent=1, default=str))
