"""Secrets never appear in logs, API answers, /metrics, stored errors and job-run log tails,
or on any process's command line: a JDBC catalog password, the control-plane database's
password, a Slack URL (its token is its path), a webhook URL with a token in its query, an
s3a secret key in `spark_conf`. Each is seeded recognizably, then everything is searched.

The Spark part (`spark`, slow) launches its own JVM in a child process with the secrets in
its settings (a process has one SparkContext: the shared session's settings are fixed);
the rest needs no processes (this module imports no subprocess, so it stays in the fast
loop; `tests/conftest.py`)."""

from __future__ import annotations

import json
import logging
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from helpers import Receiver, admin_headers
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

from benchmarks import processes
from lakewarden.alerts import store
from lakewarden.alerts.rules import evaluate_task_rules
from lakewarden.alerts.sinks import deliver_pending
from lakewarden.db.locks import DBLocks
from lakewarden.db.models import Alert, JobRun, ManagedTable, Task, TaskTransition
from lakewarden.db.paging import PageRequest
from lakewarden.db.session import transaction
from lakewarden.leader import acquire_or_renew
from lakewarden.runtime import Runtime
from lakewarden.tasks import repo
from lakewarden.tasks.runs import finish_run
from services.api.app import create_app
from services.api.schemas import AlertOut

CATALOG_PASSWORD = "JDBC-SEEKRIT-catalog-pw"
SLACK_PATH = "/services/T000/B000/SEEKRIT-xyz"
WEBHOOK_PATH = "/hook/HOOK-SEEKRIT-path"
WEBHOOK_QUERY = "token=HOOK-SEEKRIT-query"
S3_SECRET = "S3A-SEEKRIT-secret-key"
S3_ACCESS = "S3A-SEEKRIT-access-key"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _secrets(rt: Runtime) -> list[str]:
    """What must never be seen: every seeded secret, and the database's real password."""
    found = [
        CATALOG_PASSWORD,
        "SEEKRIT-xyz",
        "HOOK-SEEKRIT-path",
        "HOOK-SEEKRIT-query",
        S3_SECRET,
        S3_ACCESS,
    ]
    password = make_url(rt.db_url).password
    return found + ([password] if password else [])


def _seed(rt: Runtime, receiver: Receiver) -> None:
    """The secrets, in the settings every process reads. The Slack sink is a closed port
    (connection refused); the webhook answers 503, whose httpx error text quotes the URL."""
    s = rt.settings
    s.alert_slack_url = f"http://127.0.0.1:{_closed_port()}{SLACK_PATH}"
    s.alert_webhook_url = f"{receiver.url}{WEBHOOK_PATH}?{WEBHOOK_QUERY}"
    s.catalog_database_url = str(
        make_url(rt.db_url).set(password=CATALOG_PASSWORD).render_as_string(hide_password=False)
    )
    s.spark_conf = {
        "spark.hadoop.fs.s3a.secret.key": S3_SECRET,
        "spark.hadoop.fs.s3a.access.key": S3_ACCESS,
    }


def _assert_clean(where: str, text_: str, secrets: list[str]) -> None:
    for secret in secrets:
        assert secret not in text_, f"{secret!r} leaked into {where}: {text_[:2000]}"


def _failed_task(rt: Runtime) -> int:
    """A task that ran (attempt 1 on Spark, under the scheduler's lease) and now fails with
    an error quoting every secret, as a JDBC or Hadoop message may: stored as it finishes."""
    with transaction(rt.engine) as s:
        row = ManagedTable(catalog="lake", namespace="ns", name="t", policy={})
        s.add(row)
        s.flush()
        task_id = repo.create_task(s, table_id=row.id, kind="compaction", trigger={}, actor="t")
    assert task_id is not None
    with rt.engine.begin() as conn:
        fence = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, rt.process_id, 60)
        assert fence is not None
        conn.execute(
            text("UPDATE tasks SET state = 'running', attempt = 1 WHERE id = :i"), {"i": task_id}
        )
    with transaction(rt.engine) as s:
        s.add(
            JobRun(
                task_id=task_id,
                attempt=1,
                state="running",
                scheduler_id=rt.process_id,
                leader_epoch=fence.epoch,
            )
        )
    s_ = rt.settings
    error = RuntimeError(
        f"java.sql.SQLException: cannot connect to {s_.catalog_database_url} "
        f"(password={CATALOG_PASSWORD})\n"
        f"  at org.apache.hadoop.fs.s3a.S3AFileSystem: fs.s3a.secret.key={S3_SECRET}, "
        f"fs.s3a.access.key={S3_ACCESS}\n"
        f"  while posting to {s_.alert_slack_url} and {s_.alert_webhook_url}\n"
        f"  control plane {rt.db_url}"
    )
    state = finish_run(rt, fence, task_id, 1, error=error, retryable=False)
    assert state == "failed"
    return task_id


def test_no_secret_in_logs_stored_errors_api_or_metrics(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    receiver = Receiver(fail_first=1000)
    try:
        _seed(rt, receiver)
        secrets = _secrets(rt)
        caplog.set_level(logging.DEBUG)
        # As `lakewarden` runs: httpx's own request log is off (cli._setup_logging).
        caplog.set_level(logging.WARNING, logger="httpx")

        task_id = _failed_task(rt)
        with transaction(rt.engine) as s:
            evaluate_task_rules(s, rt.settings, datetime.now(UTC))
        with httpx.Client(timeout=5) as client:
            assert deliver_pending(rt.engine, rt.settings, client) == 0  # both sinks fail
        assert receiver.fail_first == 999, "the webhook was posted to (and answered 503)"
    finally:
        receiver.close()

    with transaction(rt.engine) as s:
        alerts = list(s.scalars(select(Alert)))
        assert [a.rule for a in alerts] == ["task_failed"]
        error = alerts[0].delivery_error or ""
        # Named by the sink, never by its URL.
        assert "webhook: HTTP 503" in error and "slack: ConnectError" in error, error
        _assert_clean("alerts.delivery_error", error, secrets)
        listed = store.list_alerts(s, PageRequest(limit=50, cursor=None))
        _assert_clean(
            "the alert store's list",
            json.dumps([AlertOut.model_validate(a).model_dump(mode="json") for a in listed.items]),
            secrets,
        )
        run = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).one()
        assert run.error and run.log_tail and "SQLException" in run.error
        _assert_clean("job_runs.error", run.error, secrets)
        _assert_clean("job_runs.log_tail", run.log_tail, secrets)
        task = s.get(Task, task_id)
        assert task is not None
        _assert_clean("tasks", json.dumps([task.reason, task.result], default=str), secrets)
        reasons = s.scalars(select(TaskTransition.reason).where(TaskTransition.task_id == task_id))
        _assert_clean("task_transitions.reason", json.dumps(list(reasons)), secrets)
        _assert_clean("alerts", json.dumps([a.summary for a in alerts]), secrets)
        _assert_clean("alerts.details", json.dumps([a.details for a in alerts]), secrets)

    with TestClient(create_app(rt, background=False)) as client:
        headers = admin_headers(rt)
        for path in ("/api/v1/alerts", f"/api/v1/tasks/{task_id}", "/metrics"):
            r = client.get(path, headers=headers)
            assert r.status_code == 200, (path, r.text)
            _assert_clean(f"GET {path}", r.text, secrets)

    logged = caplog.text + "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert "delivery failed" in logged
    _assert_clean("the log", logged, secrets)


def _all_cmdlines() -> dict[int, bytes]:
    found = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found[int(cmdline.parent.name)] = cmdline.read_bytes()
        except OSError:
            continue
    return found


# Run in a child process: builds the session from the environment's settings, says whether
# each secret reached the place Spark reads it from, then holds until told to stop.
_CHILD = """
import json, os, sys
from lakewarden.settings import Settings
from lakewarden.spark.session import build_session

s = Settings()
spark = build_session(s, s.database_url, "lakewarden-secrets-test")
hadoop = spark.sparkContext._jsc.hadoopConfiguration()
conf = s.spark_conf
seen = {
    "s3a_secret": hadoop.get("fs.s3a.secret.key") == conf["spark.hadoop.fs.s3a.secret.key"],
    "s3a_access": hadoop.get("fs.s3a.access.key") == conf["spark.hadoop.fs.s3a.access.key"],
    # The JDBC catalog logs in (the server refuses a connection without the password).
    "catalog": spark.sql(f"SHOW NAMESPACES IN `{s.catalog_name}`").collect() is not None,
}
print(json.dumps(seen), flush=True)
sys.stdin.readline()
spark.stop()
"""


@pytest.mark.spark
def test_no_secret_on_any_command_line_and_spark_still_gets_them(
    rt: Runtime, tmp_path: Path
) -> None:
    import subprocess  # here, not at the top: the rest of this module stays in the fast loop

    from test_spark_secrets import _process_tree

    password = make_url(rt.db_url).password
    if not password:
        pytest.skip("the test database has no password (TEST_DATABASE_URL without one)")
    env = processes.process_env(
        rt.db_url,
        tmp_path,
        warehouse=(tmp_path / "warehouse").as_uri(),
        spark_conf=json.dumps(
            {
                "spark.hadoop.fs.s3a.secret.key": S3_SECRET,
                "spark.hadoop.fs.s3a.access.key": S3_ACCESS,
                "spark.executor.cores": "1",
            }
        ),
    )
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        line = " "
        while line and not line.startswith("{"):  # the JVM may print to stdout too
            line = child.stdout.readline()
        assert line, f"the child failed to start Spark (exit {child.poll()})"
        assert json.loads(line) == {"s3a_secret": True, "s3a_access": True, "catalog": True}

        # The JVM, launched with the other settings (spark-submit's --conf), is a child.
        jvms = {p: c for p, c in _process_tree(child.pid).items() if b"spark.sql.catalog." in c}
        assert jvms and all(b"spark.executor.cores=1" in c for c in jvms.values())
        for pid, cmdline in jvms.items():
            for key in (b"secret.key", b"access.key", b"jdbc.password"):
                assert key not in cmdline, f"{key!r} on the JVM's command line ({pid})"
        secrets = [password, S3_SECRET, S3_ACCESS]
        for pid, cmdline in _all_cmdlines().items():
            for secret in secrets:
                assert secret.encode() not in cmdline, f"{secret!r} on the command line of {pid}"
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=120) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
