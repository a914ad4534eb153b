"""`lakewarden demo`: the whole path on a real table, nothing configured.

Embedded Postgres, local Spark, the api, worker and scheduler as real
processes. Spark writes many small commits; lakewarden hears them, creates,
plans and runs a compaction on its own; the demo reads the table back with
pyiceberg before and after and prints what changed.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from sqlalchemy.engine import make_url

from lakewarden.auth import tokens
from lakewarden.auth.grants import parse_grants
from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.migrate import migrate
from lakewarden.db.session import transaction
from lakewarden.fingerprint import fingerprint
from lakewarden.runtime import Runtime, make_runtime
from lakewarden.states import FINISHED_TASK_STATES, OPEN_TASK_STATES, TaskState

if TYPE_CHECKING:
    from rich.status import Status

DEMO = TableRef("demo", "clicks")
REGIONS = ("emea", "amer", "apac", "latam")
ROWS_PER_COMMIT = 2000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Services:
    """The three lakewarden processes, started as the user would start them."""

    def __init__(self, rt: Runtime, port: int) -> None:
        self.log_dir = rt.settings.data_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # The database URL (with its password) goes in the environment, which only the
        # user can read, never in the arguments (/proc/<pid>/cmdline is world-readable).
        self.env = {
            **os.environ,
            "LAKEWARDEN_DATABASE_URL": rt.db_url,
            "LAKEWARDEN_DATA_DIR": str(rt.settings.data_dir),
            "LAKEWARDEN_WAREHOUSE": rt.settings.warehouse_uri,
            "LAKEWARDEN_POLL_INTERVAL_S": "5",
        }
        self.port = port
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        for role, extra in (("api", ["--port", str(self.port)]), ("worker", []), ("scheduler", [])):
            log = open(self.log_dir / f"demo-{role}.log", "wb")  # noqa: SIM115
            self.procs[role] = subprocess.Popen(
                [sys.executable, "-m", "cli", role, *extra],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def check_alive(self) -> None:
        for role, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{role} exited with {proc.returncode}; see {self.log(role)}")

    def log(self, role: str) -> Path:
        return self.log_dir / f"demo-{role}.log"

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


class Progress:
    """What the demo says as it goes: its steps, and on a terminal a live status line of
    what it waits for now (rich). Nothing with --json: stdout holds the report alone."""

    def __init__(self, as_json: bool) -> None:
        self.quiet = as_json
        self._status: Status | None = None
        if not as_json and sys.stdout.isatty():
            from rich.console import Console

            # The terminal itself (a copy of stdout's descriptor): the line stays there
            # while the JVM starts with descriptor 1 pointed at its log file.
            self._terminal = os.fdopen(os.dup(sys.stdout.fileno()), "w")
            self._status = Console(file=self._terminal).status("starting...")
            self._status.start()

    def say(self, msg: str) -> None:
        if not self.quiet:
            print(msg, flush=True)  # above the status line: rich redirects stdout meanwhile

    def status(self, msg: str) -> None:
        if self._status is not None:
            self._status.update(msg)

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
            self._terminal.close()


@contextmanager
def _children_output_to(path: Path) -> Iterator[None]:
    """Processes started inside the block write their stdout and stderr to `path` for their
    whole life; this process's own are back at the block's end. For the demo writer's JVM:
    Spark's console log appender (its WARN lines) and the stack traces the JVM prints (an
    Iceberg commit retried after a conflict) go to the log file, not over the demo's
    terminal; the scheduler's JVM already logs to demo-scheduler.log."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as log:
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _wait(predicate, timeout_s: float, what: str, services: Services) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        services.check_alive()
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _query_ms(spark, name: str) -> float:
    sql = f"SELECT region, count(*), sum(amount) FROM {name} GROUP BY region"
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        spark.sql(sql).collect()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 1)


def run_demo(*, as_json: bool = False, target_files: int = 300, timeout_s: float = 600) -> int:
    progress = Progress(as_json)
    try:
        return _run_demo(progress, target_files, timeout_s)
    finally:
        progress.stop()


def _run_demo(progress: Progress, target_files: int, timeout_s: float) -> int:
    started = time.monotonic()
    rt = make_runtime("demo")
    migrate(rt)
    s = rt.settings
    where = make_url(rt.db_url).render_as_string(hide_password=True)  # never the password
    progress.say(f"lakewarden demo: control plane at {where}, warehouse {s.warehouse_uri}")
    services = Services(rt, _free_port())
    token_id, secret = _demo_token(rt)
    api = httpx.Client(
        base_url=f"http://127.0.0.1:{services.port}",
        timeout=30,
        headers={"Authorization": f"Bearer {secret}"},
    )
    from lakewarden.spark.session import build_session

    try:
        services.start()
        progress.say(
            "started api, worker and scheduler; starting the demo writer (Spark; its log: "
            f"{services.log('spark')})..."
        )
        progress.status("starting Spark...")
        with _children_output_to(services.log("spark")):
            spark = build_session(s, rt.db_url, "lakewarden-demo-writer")
        name = DEMO.spark_name(s.catalog_name)
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{s.catalog_name}`.`{DEMO.namespace}`")
        _wait(lambda: _ready(api), 120, "the API to be ready", services)
        api.delete(f"/api/v1/tables/{DEMO.namespace}/{DEMO.name}")  # a previous run's
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
        spark.sql(
            f"CREATE TABLE {name} (id BIGINT, region STRING, amount DOUBLE, ts TIMESTAMP) "
            "USING iceberg PARTITIONED BY (region) TBLPROPERTIES ("
            "'write.distribution-mode'='none', 'write.spark.fanout.enabled'='true')"
        )
        # Compaction fires when the table holds `target_files` files more than it needs.
        policy = {
            "compaction": {
                "min_small_files": target_files,
                "target_file_size_bytes": 128 * 1024 * 1024,
            }
        }
        # A table registered again continues its history: count only this run's tasks.
        first_task = _last_task_id(api) + 1
        r = api.post(
            "/api/v1/tables",
            json={"namespace": DEMO.namespace, "name": DEMO.name, "policy": policy},
        )
        r.raise_for_status()
        progress.say(
            f"registered {DEMO.dotted}; writing small commits until it holds "
            f"{target_files + 1} data files..."
        )
        commits, files, t_write = 0, 0, time.monotonic()
        while files <= target_files:
            first = commits * ROWS_PER_COMMIT
            (
                spark.range(first, first + ROWS_PER_COMMIT, numPartitions=4)
                .selectExpr(
                    "id",
                    f"element_at(array{REGIONS!r}, cast(id % 4 + 1 as int)) AS region",
                    "abs(hash(id)) % 10000 / 100.0 AS amount",
                    "timestamp_seconds(1700000000 + id) AS ts",
                )
                .writeTo(name)
                .append()
            )
            commits += 1
            snap = spark.sql(
                f"SELECT summary FROM {name}.snapshots ORDER BY committed_at DESC LIMIT 1"
            ).collect()[0]["summary"]
            files = int(snap["total-data-files"])
            progress.status(f"writing: {commits} commits, {files}/{target_files + 1} data files")
        write_s = time.monotonic() - t_write
        table = rt.catalog.load_table((DEMO.namespace, DEMO.name))
        before = fingerprint(table)
        query_before = _query_ms(spark, name)
        progress.say(
            f"wrote {commits} commits in {write_s:.1f}s: {before.data_files} data files, "
            f"{before.rows} rows; waiting for lakewarden to compact..."
        )

        def finished() -> dict[str, Any] | None:
            page = api.get("/api/v1/tasks", params={"table": DEMO.dotted}).json()["items"]
            page = [t for t in page if t["id"] >= first_task]
            progress.status(_waiting(page, table, time.monotonic() - t_wait))
            done = [
                t for t in page if t["state"] in FINISHED_TASK_STATES and t["kind"] == "compaction"
            ]
            # Done once no task is still open and one has ended after our last commit.
            if done and not any(t["state"] in OPEN_TASK_STATES for t in page):
                return done[0]
            return None

        t_wait = time.monotonic()
        task = _wait(finished, timeout_s, "the compaction task", services)
        wait_s = time.monotonic() - t_wait
        detail = api.get(f"/api/v1/tasks/{task['id']}").json()
        after = fingerprint(table)
        spark.sql(f"REFRESH TABLE {name}")
        query_after = _query_ms(spark, name)
        spark.stop()
    finally:
        progress.stop()
        services.stop()
        api.close()
        _revoke(rt, token_id)
    report = _report(
        before,
        after,
        detail,
        commits,
        write_s,
        wait_s,
        query_before,
        query_after,
        time.monotonic() - started,
    )
    if progress.quiet:
        print(json.dumps(report, default=str))
    else:
        _print_report(report)
        print(f"  logs (the services', Spark's): {services.log_dir}")
    ok = (
        detail["state"] == TaskState.SUCCEEDED
        and after.rows == before.rows
        and after.checksum == before.checksum
        and after.data_files < before.data_files
    )
    return 0 if ok else 1


def _waiting(tasks: list[dict[str, Any]], table: Any, waited_s: float) -> str:
    """The status line while lakewarden works: the task's state and the files so far."""
    snapshot = table.refresh().current_snapshot()
    files = (snapshot.summary or {}).get("total-data-files", "?") if snapshot else 0
    if not tasks:
        return f"waiting for lakewarden to create a task ({files} data files, {waited_s:.0f}s)"
    t = tasks[0]
    return (
        f"{t['kind']} task {t['id']}: {t['state']}, attempt {t['attempt']}/{t['max_attempts']} "
        f"({files} data files, {waited_s:.0f}s)"
    )


def _demo_token(rt: Runtime) -> tuple[int, str]:
    """The demo's own operator token (admin: it unregisters a previous run's table), valid
    for a day and revoked when the demo ends: no manual token step."""
    with transaction(rt.engine) as session:
        token, secret = tokens.issue(
            session,
            name="demo",
            owner="lakewarden demo",
            grants=parse_grants(["admin"]),
            created_by="demo",
            expires_at=datetime.now(UTC) + timedelta(days=1),
        )
        return token.id, secret


def _revoke(rt: Runtime, token_id: int) -> None:
    with transaction(rt.engine) as session:
        tokens.revoke(session, token_id, by="demo")


def _last_task_id(api: httpx.Client) -> int:
    items = api.get("/api/v1/tasks", params={"limit": 1}).json()["items"]
    return int(items[0]["id"]) if items else 0


def _ready(api: httpx.Client) -> bool:
    try:
        return api.get("/readyz").status_code == 200
    except httpx.HTTPError:
        return False


def _report(before, after, detail, commits, write_s, wait_s, q_before, q_after, total_s):
    from datetime import datetime

    t0 = datetime.fromisoformat(detail["history"][0]["at"])

    def offset(at: str) -> float:
        return round((datetime.fromisoformat(at) - t0).total_seconds(), 2)

    run = detail["runs"][-1] if detail["runs"] else {}
    return {
        "table": DEMO.dotted,
        "commits": commits,
        "files_before": before.data_files,
        "files_after": after.data_files,
        "rows_before": before.rows,
        "rows_after": after.rows,
        "checksum_before": before.checksum,
        "checksum_after": after.checksum,
        "query_ms_before": q_before,
        "query_ms_after": q_after,
        "task_id": detail["id"],
        "task_state": detail["state"],
        "task_trigger": detail["trigger"].get("reason"),
        "task_plan": (detail["plan"] or {}).get("expected_files_after"),
        "spark_app_id": run.get("spark_app_id"),
        "job_ms": run.get("duration_ms"),
        "job_metrics": run.get("metrics"),
        "timeline": [
            {
                "t_s": offset(h["at"]),
                "from": h["from_state"],
                "to": h["to_state"],
                "actor": h["actor"].split("-")[0],
                "reason": h["reason"],
            }
            for h in detail["history"]
        ],
        "write_s": round(write_s, 1),
        "wait_for_compaction_s": round(wait_s, 1),
        "total_s": round(total_s, 1),
    }


def _print_report(r: dict[str, Any]) -> None:
    same = "identical" if r["checksum_before"] == r["checksum_after"] else "DIFFERENT"
    print()
    print(f"  table {r['table']}           before      after")
    print(f"  data files             {r['files_before']:>8}   {r['files_after']:>8}")
    print(
        f"  rows                   {r['rows_before']:>8}   {r['rows_after']:>8}   ({same} checksum)"
    )
    print(f"  group-by query (ms)    {r['query_ms_before']:>8}   {r['query_ms_after']:>8}")
    print()
    print(f"  task {r['task_id']}: {r['task_state']}; why: {r['task_trigger']}")
    for line in _run_lines(r):
        print(f"  {line}")
    print("  timeline:")
    for h in r["timeline"]:
        print(
            f"    +{h['t_s']:>6.2f}s  {h['from'] or '-':>9} -> {h['to']:<10} {h['actor']:<9} "
            f"{h['reason'] or ''}"
        )
    print(
        f"\n  writing {r['write_s']}s, waiting for compaction {r['wait_for_compaction_s']}s, "
        f"total {r['total_s']}s"
    )
    print(
        f"  the whole record: lakewarden task {r['task_id']} "
        "(with `lakewarden api` running and LAKEWARDEN_TOKEN set)"
    )


def _run_lines(r: dict[str, Any]) -> list[str]:
    """The Spark run as a person reads it: what it rewrote, in how long, and whether its
    post-rewrite validation passed (the per-partition detail is in --json and the task)."""
    from rich.filesize import decimal

    from cli.ops import _validation as validation_line  # the CLI's own summary

    m = r["job_metrics"]
    if m is None:
        return ["no Spark run"]
    seconds = f"{r['job_ms'] / 1000:.1f}s" if r["job_ms"] is not None else "?"
    rewrote = (
        f"Spark {r['spark_app_id']} in {seconds}: rewrote {m.get('rewritten_data_files')} data "
        f"files ({decimal(m.get('rewritten_bytes') or 0)}) into {m.get('added_data_files')}"
    )
    if m.get("failed_data_files"):
        rewrote += f"; {m['failed_data_files']} data files failed"
    validation = validation_line(m.get("validation"))
    return [rewrote, f"validation {validation}" if validation else "no validation recorded"]
