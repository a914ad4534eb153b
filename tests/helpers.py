"""Test helpers: Iceberg tables written by pyiceberg (no JVM), for tests that need files fast;
waiting; a webhook receiver; a real API process."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import pyarrow as pa

from benchmarks import processes
from lakewarden.runtime import Runtime

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from lakewarden.db.models import JobRun, PartitionReadiness, Task
    from lakewarden.leader import Fence
    from services.scheduler.main import Scheduler

T = TypeVar("T")
# The variable of the test Trino server's environment holding the test Postgres's password
# (conftest's `trino`): a JDBC catalog names it `${ENV:...}`, never the password in a query.
TRINO_PG_PASSWORD = "LW_TRINO_PG_PASSWORD"

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string(), nullable=False),
        pa.field("amount", pa.float64()),
    ]
)


def make_table(
    rt: Runtime,
    namespace: str = "sales",
    name: str = "orders",
    partitioned: bool = True,
    catalog: str | None = None,
) -> Table:
    """An Iceberg table in the test catalog (or the registered `catalog`), written by
    pyiceberg (no JVM)."""
    from pyiceberg.transforms import IdentityTransform

    cat = rt.catalog if catalog is None else rt.catalogs.load(catalog)
    cat.create_namespace_if_not_exists(namespace)
    table = cat.create_table(f"{namespace}.{name}", schema=SCHEMA)
    if partitioned:
        with table.update_spec() as spec:
            spec.add_field("region", IdentityTransform(), "region")
    return cat.load_table(f"{namespace}.{name}")


def append_batches(
    table: Table, batches: int, rows: int = 10, start: int = 0, regions: Sequence[str] = ("a", "b")
) -> Table:
    """`batches` commits, each writing one small file per region."""
    next_id = start
    for _ in range(batches):
        ids = list(range(next_id, next_id + rows))
        next_id += rows
        table.append(
            pa.table(
                {
                    "id": ids,
                    "region": [regions[i % len(regions)] for i in ids],
                    "amount": [float(i) for i in ids],
                },
                schema=SCHEMA,
            )
        )
        table = table.refresh()
    return table


def manage(rt: Runtime, name: str, policy: dict[str, Any], kind: str = "compaction") -> int:
    """Manage sales.<name> with `policy` and open a `kind` task on it (as a trigger would)."""
    from lakewarden.db.models import ManagedTable
    from lakewarden.db.session import transaction
    from lakewarden.tasks import repo

    with transaction(rt.engine) as s:
        row = ManagedTable(
            catalog=rt.settings.catalog_name, namespace="sales", name=name, policy=policy
        )
        s.add(row)
        s.flush()
        task_id = repo.create_task(
            s,
            table_id=row.id,
            kind=kind,
            trigger={"reason": "test"},
            actor="test",
            max_attempts=policy.get(kind, {}).get("max_attempts", 3),
        )
    assert task_id is not None
    return task_id


def register_catalog(
    rt: Runtime, name: str, kind: str, properties: dict[str, object], region: str = "default"
) -> None:
    """Catalog `name` of `kind` ("jdbc", "rest", "hive") registered in `rt`'s database (as
    the API would) in `region`, replacing one of that name, and `rt` made to load it afresh."""
    from sqlalchemy import delete

    from lakewarden.db.models import Catalog as CatalogRow
    from lakewarden.db.session import transaction

    with transaction(rt.engine) as s:
        s.execute(delete(CatalogRow).where(CatalogRow.name == name))
        s.add(CatalogRow(name=name, type=kind, properties=properties, version=1, region=region))
    rt.catalogs.forget()


def break_planned_rewrite(rt: Runtime, task_id: int, table: Table) -> str:
    """Make a planned rewrite fail inside Spark: one of the table's data files deleted from
    storage (as after a bad manual cleanup), and the plan all or nothing (with partial
    progress, the planner's default, Iceberg logs a failed file group and commits the
    others). Returns the lost file's name."""
    from pathlib import Path
    from urllib.parse import urlsplit

    from sqlalchemy import text

    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE tasks SET plan = jsonb_set(plan, "
                "'{options,partial-progress.enabled}', '\"false\"') WHERE id = :id"
            ),
            {"id": task_id},
        )
    path = Path(urlsplit(table.inspect.files()["file_path"][0].as_py()).path)
    path.unlink()
    return path.name


def executor_error(group: str) -> str:
    """The executor's own ERROR line for a failed task, as log4j wrote it in the driver JVM,
    tagged with the job's group: only Spark's log has it (the Python exception quotes
    other lines)."""
    return rf"^\S+ ERROR Executor \[[^\]]*\] \{{{group}\}} Exception in task "


def run_one(scheduler: Scheduler) -> str:
    """Dispatch the one planned task and wait for its job; returns the task's new state."""
    scheduler.renew()  # stands in for the renewal thread: setup may have outlasted the lease
    assert scheduler.dispatch_once()
    (entry,) = scheduler.inflight.values()
    return str(entry.future.result(timeout=300))


@contextmanager
def read_throughout(read: Callable[[], T], pause_s: float = 0.02) -> Iterator[list[T | str]]:
    """`read` (a reader of the table under test) called over and over on a thread of its
    own while the block runs, and at least 3 times: what each read returned, in order. A
    read that raises is a reader seeing a bad table: its error (`error: ...`) is what it
    saw."""
    seen: list[T | str] = []
    done = threading.Event()

    def loop() -> None:
        while not done.is_set() or len(seen) < 3:
            try:
                seen.append(read())
            except Exception as exc:
                seen.append(f"error: {exc!r}")
            time.sleep(pause_s)

    reader = threading.Thread(target=loop, name="reader", daemon=True)
    reader.start()
    try:
        yield seen
    finally:
        done.set()
        reader.join(60)


def wait_for(
    fn: Callable[[], T | None], timeout: float, what: str, on_timeout: Callable[[], str] = str
) -> T:
    """Poll `fn` until it returns something truthy; fail with `what` (and context) if not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{on_timeout()}")


def current(table: Table) -> Snapshot:
    """The table's current snapshot; it must have one."""
    snapshot = table.current_snapshot()
    assert snapshot is not None, f"{table.name()} has no snapshot"
    return snapshot


def equal_to(column: str, value: Any) -> BooleanExpression:
    """`column = value` for pyiceberg scans and deletes (the keyword form of EqualTo is the
    one its pydantic model declares to type checkers)."""
    from pyiceberg.expressions import EqualTo, Reference
    from pyiceberg.expressions.literals import literal

    return EqualTo(term=Reference(column), value=literal(value))


def serve_http(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    """`handler` served on a free loopback port in a daemon thread: the server, its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class Receiver:
    """A real HTTP endpoint on 127.0.0.1 that records what it is sent: (path, JSON body).
    The first `fail_first` requests are answered 503. With `hold_s`, each recorded request
    is held until `release` is set (at most that long); `arrived` is set by the first."""

    def __init__(self, fail_first: int = 0, hold_s: float = 0.0) -> None:
        self.received: list[tuple[str, Any]] = []
        self.fail_first = fail_first
        self.arrived, self.release = threading.Event(), threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if receiver.fail_first > 0:
                    receiver.fail_first -= 1
                    self.send_response(503)
                else:
                    receiver.received.append((self.path, body))
                    receiver.arrived.set()
                    receiver.release.wait(hold_s)
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server, self.url = serve_http(Handler)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()


M = TypeVar("M")


def stored(rt: Runtime, model: type[M], key: Any) -> M:
    """The row of `model` with primary key `key` as stored now, detached from its session."""
    from lakewarden.db.session import transaction

    with transaction(rt.engine) as s:
        row = s.get(model, key)
        assert row is not None, f"no {model.__name__} {key}"
        s.expunge(row)
        return row


def lead(rt: Runtime, who: str = "leader") -> Fence:
    """Take the scheduler's lease in `rt`'s database as `who` (a leader's rounds run under
    its fence), or fail if another holds it."""
    from lakewarden.db.locks import DBLocks
    from lakewarden.leader import acquire_or_renew

    with rt.engine.begin() as conn:
        fence = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, who, 60.0)
    assert fence is not None
    return fence


def readiness_rows(rt: Runtime) -> dict[str, PartitionReadiness]:
    """Every partition's readiness row in `rt`'s database, by partition (detached)."""
    from sqlalchemy import select

    from lakewarden.db.models import PartitionReadiness
    from lakewarden.db.session import transaction

    with transaction(rt.engine) as s:
        rows = s.scalars(select(PartitionReadiness)).all()
        s.expunge_all()
    return {r.partition: r for r in rows}


def job_runs(rt: Runtime) -> list[JobRun]:
    """Every job run, by task and attempt (detached: read after the session closed)."""
    from sqlalchemy import select

    from lakewarden.db.models import JobRun
    from lakewarden.db.session import transaction

    with transaction(rt.engine) as s:
        runs = list(s.scalars(select(JobRun).order_by(JobRun.task_id, JobRun.attempt)))
        s.expunge_all()
    return runs


def process_logs(tmp_path: Path) -> str:
    """The tails of the scheduler processes' logs and their applications' (a test's
    `tmp_path` as their data directory): what a failover test prints when it times out."""
    files = sorted(tmp_path.glob("scheduler-*.log")) + sorted(
        (tmp_path / "applications").glob("*.log")
    )
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in files)


# A leader whose every job is a Spark application of its own (no warm session), as the
# scheduler runs Hudi's and Delta's jobs and a pool in application mode: small and quick.
APPLICATION_SETTINGS: dict[str, Any] = {
    "application_master": "local[1]",
    "application_driver_memory": "768m",
    "heartbeat_interval_s": 1.0,
    "spark_warmup": False,
}


def application_runtime(db_url: str, data_dir: Path, **overrides: Any) -> Runtime:
    """A scheduler's runtime on `db_url` with APPLICATION_SETTINGS (`overrides` win)."""
    from sqlalchemy import create_engine

    from lakewarden.settings import Settings

    config = Settings(
        database_url=db_url, data_dir=data_dir, **{**APPLICATION_SETTINGS, **overrides}
    )
    url = config.database_url or db_url
    return Runtime(config, url, create_engine(url, pool_size=5), role="scheduler")


@contextmanager
def application_leader(rt: Runtime) -> Iterator[Scheduler]:
    """A scheduler on `rt` that holds the lease (renewed each second) for the block; the
    applications it started are killed after."""
    from lakewarden.process import Ticker
    from services.scheduler.main import Scheduler

    sched = Scheduler(rt)
    sched.renew()
    stop = threading.Event()
    Ticker("lease", 1.0, sched.renew, stop).start()
    try:
        yield sched
    finally:
        stop.set()
        sched.applications.kill_all()


def warm_launch(rt: Runtime, writers: Any, family: str) -> Any:
    """A leader's launch that runs the application in the shared `family` writer's warm JVM
    (`spark_writer.run_job`: the application's own code, with the environment the leader
    gives one), not a JVM of its own."""
    from lakewarden.spark.submit import application_settings, settings_env

    def launch(fence: Any, job: Any, timeout_s: float) -> None:
        env = settings_env(application_settings(rt.settings), rt.db_url)
        writers.run(family, [{"job": {"task_id": job.task_id, "attempt": job.attempt, "env": env}}])

    return launch


def run_hudi_pass(
    db_url: str, tmp_path: Path, task_ids: dict[str, int], warm: Any = None, **settings: Any
) -> tuple[dict[str, Task], dict[str, str], dict[str, JobRun]]:
    """Plan the tasks (the worker), then run them (the leader submits each as a Hudi-family
    application, one after the other: one running task per table) to their end: the
    plans, the end states and the runs. `warm`: the shared writers (`spark_writers`), to
    run each application in the Hudi writer's warm JVM (`warm_launch`). `settings`: more
    of the leader's (`secrets_dir` where a catalog's references are)."""
    from sqlalchemy import select

    from lakewarden.db.models import JobRun
    from lakewarden.db.session import transaction
    from services.worker.main import Worker

    rt = application_runtime(db_url, tmp_path / "data", **settings)
    try:
        worker = Worker(rt)
        while worker.run_once():
            pass
        plans = {k: task_of(rt, t) for k, t in task_ids.items()}
        assert all(p.state == "planned" for p in plans.values()), plans
        with application_leader(rt) as sched:
            if warm is not None:
                sched.applications.launch = warm_launch(rt, warm, "hudi")  # type: ignore[method-assign]

            def ended() -> dict[str, str] | None:
                sched.applications.poll(sched.leading())
                sched.dispatch_once()  # one running task per table: the second after the first
                states = {k: task_of(rt, t).state for k, t in task_ids.items()}
                over = all(s in ("succeeded", "failed", "pending") for s in states.values())
                return states if over else None

            logs = sched.applications.log_dir
            states = wait_for(
                ended,
                600,
                f"tasks {task_ids}",
                lambda: "\n".join(p.read_text()[-4000:] for p in logs.glob("*.log")),
            )
        with transaction(rt.engine) as s:
            runs = {
                k: s.scalars(select(JobRun).where(JobRun.task_id == t)).one()
                for k, t in task_ids.items()
            }
            for r in runs.values():
                s.expunge(r)
    finally:
        rt.engine.dispose()
    return plans, states, runs


def task_of(rt: Runtime, task_id: int) -> Task:
    """A task as stored now, detached from its session."""
    from lakewarden.db.models import Task

    return stored(rt, Task, task_id)


def issue_token(rt: Runtime, *grants: str, name: str = "test") -> str:
    """A new API token's secret with these grants (default: admin of everything), issued
    straight into the database as `lakewarden token create` does."""
    from lakewarden.auth import tokens
    from lakewarden.auth.grants import parse_grants
    from lakewarden.db.session import transaction

    with transaction(rt.engine) as session:
        _, secret = tokens.issue(
            session,
            name=name,
            owner="tests",
            grants=parse_grants(grants or ("admin",)),
            created_by="tests",
            expires_at=None,
        )
    return secret


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def admin_headers(rt: Runtime) -> dict[str, str]:
    """Headers that let a test client do anything (a fresh admin token)."""
    return bearer(issue_token(rt, name="test-admin"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def api_process(db_url: str, data_dir: Path, **settings: str) -> Iterator[str]:
    """A real `lakewarden api` process on a free port, on `db_url`, with `settings` as
    LAKEWARDEN_<NAME> variables; yields its URL once /readyz answers. Its output is in
    `data_dir/api.log`; it is stopped on the way out."""
    port = free_port()
    env = processes.process_env(
        db_url, data_dir, warehouse=(data_dir / "warehouse").as_uri(), log_level="WARNING"
    ) | processes.setting_vars(settings)
    log = data_dir / "api.log"
    proc = processes.start(["api", "--port", str(port)], env, log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the API did not get ready"
            time.sleep(0.2)
        yield url
    finally:
        processes.stop([proc])


def past_quiet() -> datetime:
    """A readiness round's clock a second past now: past a tiny quiet rule's time for every
    commit made so far (a commit within its milliseconds of `datetime.now()`, on a fast
    machine, is not quiet yet: CI saw that)."""
    return datetime.now(UTC) + timedelta(seconds=1)


def register_hudi_orders(client: Any, warehouse: Path) -> dict[str, Any]:
    """A `hudi` catalog `hlake` over `warehouse` and its table `lake.orders` under a policy
    that makes a compaction due: the table's first event (its compaction task's id in
    `decision_detail`)."""
    got = client.post(
        "/api/v1/catalogs",
        json={"name": "hlake", "type": "hudi", "properties": {"warehouse": str(warehouse)}},
    )
    assert got.status_code == 201, got.text
    tables = "/api/v1/catalogs/hlake/tables"
    policy = {"compaction": {"min_input_files": 2, "min_small_files": 2}}
    got = client.post(tables, json={"namespace": "lake", "name": "orders", "policy": policy})
    assert got.status_code == 201, got.text
    event: dict[str, Any] = client.get(f"{tables}/lake/orders/events").json()["items"][0]
    return event
