"""What a job cost, from Spark's own task metrics (issue 32 §3), not wall time: the executor
CPU and task time, bytes and records read and written, and shuffle, summed over the stages
of the job's Spark job group (`joblog.stages_of`). Read from the driver's status store,
which Spark keeps whether or not its UI is on (the last `spark.ui.retainedStages`). Work a
job did in the driver instead of Spark tasks (an Arrow-rewritten compaction:
lakewarden.spark.arrow_rewrite) is added to its CPU (`with_driver_cpu`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakewarden.spark.joblog import stages_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The fields of a run's `metrics.cost`: name -> (v1.StageData getter, scale to the unit).
FIELDS: dict[str, tuple[str, float]] = {
    "executor_cpu_s": ("executorCpuTime", 1e-9),  # nanoseconds
    "executor_run_s": ("executorRunTime", 1e-3),  # milliseconds: task time
    "input_bytes": ("inputBytes", 1),
    "input_records": ("inputRecords", 1),
    "output_bytes": ("outputBytes", 1),
    "output_records": ("outputRecords", 1),
    "shuffle_read_bytes": ("shuffleReadBytes", 1),
    "shuffle_write_bytes": ("shuffleWriteBytes", 1),
    "tasks": ("numCompleteTasks", 1),
}


def group_cost(spark: SparkSession, group: str) -> dict[str, Any]:
    """The summed metrics of every stage the group ran (a stage that never ran, or that
    the store no longer holds, counts nothing); `stages` says how many were read."""
    store: Any = spark.sparkContext._jsc.sc().statusStore()
    totals = dict.fromkeys(FIELDS, 0.0)
    read = 0
    for stage in stages_of(spark, group):
        try:
            data = store.lastStageAttempt(int(stage))
        except Exception:  # skipped (never ran) or evicted from the store
            continue
        read += 1
        for name, (getter, scale) in FIELDS.items():
            totals[name] += float(getattr(data, getter)()) * scale
    cost: dict[str, Any] = {
        name: round(value, 3) if scale != 1 else int(value)
        for (name, value), (_, scale) in zip(totals.items(), FIELDS.values(), strict=True)
    }
    cost["stages"] = read
    return cost


def with_driver_cpu(cost: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    """`cost` with the driver CPU the job's run spent in place of Spark tasks counted in its
    `executor_cpu_s` (what the costs API, page and metric sum), that part also said apart:
    `driver_cpu_s` (the Arrow path's reader, writer and DuckDB threads' own CPU time,
    `metrics["engine"]["driver_cpu_s"]`) and `spark_task_cpu_s` (Spark's tasks')."""
    engine = metrics.get("engine")
    driver = engine.get("driver_cpu_s") if isinstance(engine, dict) else None
    if not driver:
        return cost
    spark_cpu = float(cost.get("executor_cpu_s") or 0.0)
    return {
        **cost,
        "executor_cpu_s": round(spark_cpu + float(driver), 3),
        "spark_task_cpu_s": round(spark_cpu, 3),
        "driver_cpu_s": round(float(driver), 3),
    }
