"""Where a validated Arrow-path compaction's extra time goes (issue 30 goal 3): the
300-file task of `benchmarks.validation_arrow`, validated and unvalidated alternated in one
process, each from the small-file snapshot, after an unmeasured pair. The steps a
validated task adds or changes are wrapped: each call's wall time, this process's CPU
(every thread), the Spark JVM's CPU (/proc: 10 ms ticks) and the calling thread's CPU
(`time.thread_time()`: DuckDB runs on it with one thread). Steps that run beside others
(the sums on their threads) share the process and JVM columns with what runs meanwhile:
read their own thread's. Prints each task, then per step the medians on and off.

    LAKEWARDEN_BENCH_DATABASE_URL=... LAKEWARDEN_DATA_DIR=... HC_N=5 \\
        python -m benchmarks.validation_phases
"""

from __future__ import annotations

import functools
import itertools
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from benchmarks import rewrite
from benchmarks.__main__ import _context
from benchmarks.harness import jvm_cpu_seconds
from lakewarden.policy.model import ValidationPolicy
from lakewarden.spark import actions, arrow_rewrite, staging, validation
from lakewarden.spark.commits import committing_as
from lakewarden.spark.validation import validating

# (module, function): what a validated task adds (or does more of) besides the copy
STEPS = (
    (actions, "observed_columns"),  # the columns to checksum
    (staging, "open_stage"),  # the staging branch
    (arrow_rewrite, "sums"),  # DuckDB reading the inputs
    (arrow_rewrite, "hash_written"),  # DuckDB reading each output
    (arrow_rewrite, "rewrite"),  # the copy (both arms)
    (actions, "run_binpack"),  # plan, copy, commit (both arms)
    (actions, "validate_rewrite"),
    (validation, "span_files"),  # what the commits removed and added (manifests)
    (validation, "compare_spans"),
    (staging, "publish"),
)
COLUMNS = ("wall", "process_cpu", "jvm_cpu", "thread_cpu")


def _wrapped(
    fn: Callable[..., Any], into: dict[str, list[float]], cpu: Callable[[], float]
) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        before = (time.perf_counter(), time.process_time(), cpu(), time.thread_time())
        try:
            return fn(*args, **kwargs)
        finally:
            after = (time.perf_counter(), time.process_time(), cpu(), time.thread_time())
            for k, (a, b) in enumerate(zip(before, after, strict=True)):
                into[COLUMNS[k]][0] += b - a

    return timed


def main() -> None:
    n = int(os.environ.get("HC_N", "5"))
    ctx = _context(False)
    try:
        small, _, _ = rewrite._table_300(ctx)
        ref = rewrite.FILES_300
        jvm = functools.partial(jvm_cpu_seconds, ctx.spark)
        calls: dict[str, dict[str, list[float]]] = {}
        for module, name in STEPS:
            step = f"{module.__name__.rsplit('.', 1)[-1]}.{name}"
            calls[step] = {c: [0.0] for c in COLUMNS}
            setattr(module, name, _wrapped(getattr(module, name), calls[step], jvm))
        task_ids = itertools.count(60_000)
        got: dict[str, dict[str, list[float]]] = {"on": defaultdict(list), "off": defaultdict(list)}
        for i in range(n + 1):  # the first pair unmeasured: the JIT, DuckDB's first load
            for arm in ("on", "off") if i % 2 else ("off", "on"):
                for sums in calls.values():
                    for c in COLUMNS:
                        sums[c][0] = 0.0
                started = (time.perf_counter(), time.process_time(), jvm())
                with (
                    committing_as(next(task_ids), 1),
                    validating(ValidationPolicy(enabled=arm == "on")),
                ):
                    rewrite.compact(ctx, ref)
                ended = (time.perf_counter(), time.process_time(), jvm())
                rewrite.rollback(ctx, ref, small)
                if i == 0:
                    continue
                task = [b - a for a, b in zip(started, ended, strict=True)]
                for c, value in zip(COLUMNS, task, strict=False):
                    got[arm][f"task {c}"].append(value)
                for step, sums in calls.items():
                    for c in COLUMNS:
                        got[arm][f"{step} {c}"].append(sums[c][0])
                print(
                    f"{arm} wall {task[0]:.3f}s process cpu {task[1]:.2f}s jvm cpu "
                    f"{task[2]:.2f}s load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        print(f"{'step':42s} {'on':>7s} {'off':>7s} {'on-off':>7s}  (medians, n={n})")
        for key in got["on"]:
            on = statistics.median(got["on"][key])
            off = statistics.median(got["off"][key])
            if max(abs(on), abs(off)) >= 0.001:
                print(f"{key:42s} {on:7.3f} {off:7.3f} {on - off:7.3f}", flush=True)
    finally:
        ctx.stop()


if __name__ == "__main__":
    main()
