"""A run whose work the driver did in place of Spark tasks (an Arrow-rewritten compaction)
counts that CPU in its cost's executor CPU, which the costs API, page and metric sum, and
says which part it was (lakewarden.spark.cost.with_driver_cpu)."""

from __future__ import annotations

from lakewarden.spark.cost import with_driver_cpu


def test_the_drivers_cpu_is_counted_and_said_apart() -> None:
    cost = {"executor_cpu_s": 0.25, "tasks": 1, "stages": 1}
    metrics = {"engine": {"engine": "arrow", "driver_cpu_s": 1.5}}
    assert with_driver_cpu(cost, metrics) == {
        "executor_cpu_s": 1.75,
        "spark_task_cpu_s": 0.25,
        "driver_cpu_s": 1.5,
        "tasks": 1,
        "stages": 1,
    }


def test_a_run_on_spark_alone_keeps_sparks_figures() -> None:
    cost = {"executor_cpu_s": 2.0}
    for metrics in ({}, {"engine": {"engine": "spark", "reason": "off"}}, {"engine": None}):
        assert with_driver_cpu(cost, metrics) == cost
