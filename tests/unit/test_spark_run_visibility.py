"""What an operator sees of a Spark run, pure: the UI and event-log settings reach the
session and submitted applications, the link a run records, which of Spark's log lines
belong to a job, and the bounded log tail."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakewarden.settings import Settings
from lakewarden.spark.joblog import job_lines
from lakewarden.spark.session import spark_conf
from lakewarden.spark.submit import submit_argv
from lakewarden.tasks.runs import LOG_TAIL_CHARS, LOG_TAIL_LINES, log_tail_of, run_ui_url

URL = "postgresql+psycopg://lw@127.0.0.1:5432/lw"


def _settings(tmp_path: Path, **values: object) -> Settings:
    jar = tmp_path / "x.jar"
    jar.write_text("")
    return Settings.model_validate({"data_dir": tmp_path, "spark_jars": str(jar), **values})


def test_the_ui_is_off_and_event_logs_are_off_by_default(tmp_path: Path) -> None:
    conf = spark_conf(_settings(tmp_path), URL)
    assert conf["spark.ui.enabled"] == "false"
    assert "spark.ui.port" not in conf and "spark.eventLog.enabled" not in conf


def test_ui_and_event_logs_reach_the_session_and_every_submitted_application(
    tmp_path: Path,
) -> None:
    settings = _settings(
        tmp_path,
        spark_ui_enabled=True,
        spark_ui_port=4141,
        spark_event_log_dir="s3a://logs/spark-events",
    )
    conf = spark_conf(settings, URL)
    assert conf["spark.ui.enabled"] == "true" and conf["spark.ui.port"] == "4141"
    assert conf["spark.eventLog.enabled"] == "true"
    assert conf["spark.eventLog.dir"] == "s3a://logs/spark-events"
    assert conf["spark.eventLog.rolling.enabled"] == "true"  # the warm session lives long
    argv = submit_argv(
        settings,
        URL,
        spark_submit="spark-submit",
        entry="/app.py",
        python="python",
        task_id=1,
        attempt=1,
        group="g",
    ).argv
    for setting in (
        "spark.ui.enabled=true",
        "spark.ui.port=4141",
        "spark.eventLog.enabled=true",
        "spark.eventLog.dir=s3a://logs/spark-events",
    ):
        assert argv[argv.index(setting) - 1] == "--conf"


def test_a_run_links_its_live_ui_while_it_runs_and_the_history_server_once_it_ended(
    tmp_path: Path,
) -> None:
    live = "http://127.0.0.1:4040"
    plain = _settings(tmp_path)
    assert run_ui_url(plain, "local-1", None, False) is None
    assert run_ui_url(plain, "local-1", live, False) == live
    assert run_ui_url(plain, "local-1", live, True) == live  # no history server: nothing better
    history = _settings(tmp_path, spark_history_url="http://history:18080/")
    assert run_ui_url(history, "local-1", live, False) == live
    assert run_ui_url(history, "local-1", live, True) == "http://history:18080/history/local-1"
    assert run_ui_url(history, "app-2", None, False) == "http://history:18080/history/app-2"


def _record(group: str, level: str, logger: str, message: str, frames: int = 2) -> str:
    lines = [f"2026-11-24T00:27:59,857 {level} {logger} [some thread] {{{group}}} {message}"]
    lines += [f"\tat org.apache.Frame{i}.run(Frame.java:{i})" for i in range(frames)]
    return "\n".join(lines)


def test_a_job_keeps_its_own_records_and_unattributed_ones_not_another_job_s() -> None:
    log = "\n".join(
        [
            _record("g1", "ERROR", "Executor", "Exception in task 0.0 in stage 3.0 (TID 7)"),
            "java.io.FileNotFoundException: /warehouse/a.parquet",
            _record("g2", "ERROR", "Executor", "Exception in task 0.0 in stage 4.0 (TID 8)"),
            _record("", "WARN", "TaskSetManager", "Lost task 0.0 in stage 3.0 (TID 7)"),
            _record("", "ERROR", "TaskSetManager", "Task 0 in stage 4.0 failed 1 times"),
            _record("", "WARN", "SomePool", "no stage named: anyone's"),
        ]
    )
    mine = job_lines(log, "g1")
    assert "stage 3.0 (TID 7)" in mine and "FileNotFoundException" in mine
    assert "stage 4.0" not in mine  # g2's, by its tag or by its stage
    assert "anyone's" in mine
    theirs = job_lines(log, "g2")
    assert "stage 4.0 (TID 8)" in theirs and "Task 0 in stage 4.0 failed" in theirs
    assert "stage 3.0" not in theirs and "anyone's" in theirs
    assert job_lines(log, "g3") == _record("", "WARN", "SomePool", "no stage named: anyone's")


def test_spark_s_own_stage_list_attributes_untagged_records() -> None:
    five = _record("", "WARN", "TaskSetManager", "Lost task 0.0 in stage 5.0 (TID 9)")
    six = _record("", "WARN", "TaskSetManager", "Lost task 0.0 in stage 6.0 (TID 10)")
    log = f"{five}\n{six}"
    assert job_lines(log, "g1", {"5"}) == five  # the other is another job's, by Spark's word
    assert job_lines(log, "g2", {"6"}) == six
    assert job_lines(log, "g3", None) == log  # unknown stages, unknown owners: shown


def test_a_line_said_before_is_not_repeated() -> None:
    cause = "Caused by: java.io.FileNotFoundException: a.parquet"
    spark = "\n".join(
        [
            _record("g", "ERROR", "Executor", "Exception in task 0.0"),
            cause,
            _record("g", "WARN", "TaskSetManager", "Lost task 0.0"),
            cause,
        ]
    )
    tail = log_tail_of(f"Py4JJavaError: failed\n{cause}", spark)
    assert tail.count(cause) == 1
    assert "Exception in task 0.0" in tail and "Lost task 0.0" in tail


def test_the_log_tail_is_the_error_then_spark_s_last_lines_without_frames_and_bounded() -> None:
    error = "Py4JJavaError: An error occurred\n: org.apache.SparkException: Job aborted"
    error += "\n\tat org.apache.Frame.run(Frame.java:1)\n\t... 12 more\nCaused by: java.io.Gone"
    spark = "\n".join(
        _record("g", "ERROR", "Executor", f"Exception number {i} " + "x" * 100) for i in range(400)
    )
    tail = log_tail_of(error, spark)
    lines = tail.splitlines()
    assert lines[:3] == [
        "Py4JJavaError: An error occurred",
        ": org.apache.SparkException: Job aborted",
        "Caused by: java.io.Gone",
    ]
    assert not any(line.strip().startswith(("at ", "...")) for line in lines)
    assert len(lines) <= LOG_TAIL_LINES and len(tail) <= LOG_TAIL_CHARS
    assert lines[-1].endswith("Exception number 399 " + "x" * 100)  # the last line Spark wrote
    spark_part = lines[lines.index("--- Spark's log, last lines ---") + 1 :]
    assert spark_part and all(line.startswith("2026-11-24T") for line in spark_part)  # whole
    assert log_tail_of(error, "") == "\n".join(lines[:3])


@pytest.mark.parametrize("error_lines", [1, 200])
def test_a_long_error_leaves_room_for_spark_s_lines(error_lines: int) -> None:
    error = "\n".join(f"message line {i} " + "y" * 300 for i in range(error_lines))
    tail = log_tail_of(error, _record("g", "ERROR", "Executor", "the JVM's own line"))
    assert tail.endswith("the JVM's own line") and len(tail) <= LOG_TAIL_CHARS
