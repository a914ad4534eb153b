"""The compose stack for real: docker-compose.yml with docker-compose.host.yml (host
networking, local images) brought up on this machine's Docker daemon, its work checked
from the host with pyiceberg and SQL.

One test, in the order a person would try the stack: up and ready; the demo writer's small
files compacted by the workers and schedulers in the containers; `docker kill` of the leading
scheduler's container and the standby leading within 10 s; a worker container restarted
mid-plan with nothing lost; everything torn down (volumes too).

It runs where the images exist, built from these sources (`make images`; their label
`org.lakewarden.source` must match `scripts/images.sh --source-hash`): a build takes
minutes, so a test run never starts one unless LAKEWARDEN_BUILD_IMAGES=1 asks. In CI
(CI set) it runs only when LAKEWARDEN_CONTAINER_TESTS=1 asks: it takes 5-10 minutes on
2 shared cores, which the suite's budget cannot spare; `pytest -m containers` runs it. It starts
the daemon itself when none answers (and stops it after), and is skipped, saying why, where
no daemon can start. Its timings are printed (docs/performance.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

ROOT = Path(__file__).resolve().parents[2]
IMAGES_SH = ROOT / "scripts" / "images.sh"
PROJECT = "lakewarden-test"
IMAGES = ("lakewarden:0.1.0", "lakewarden-postgres:15")
PG_PORT = 55432
# The services that stay up, each one a container (docker-compose.host.yml).
LONG_RUNNING = (
    "postgres",
    "api",
    "api-2",
    "worker",
    "worker-2",
    "scheduler",
    "scheduler-2",
    "spark-master",
    "spark-worker",
)
# A process id is "<role>-<hostname>-<pid>-<suffix>"; the override names each container's
# host after its service ("scheduler-1" is the service `scheduler`).
HOLDER = re.compile(r"^(?:worker|scheduler)-((?:worker|scheduler)-\d)-\d+-")
WORKERS = ("worker", "worker-2")
SERVICE_OF_HOST = {
    "worker-1": "worker",
    "worker-2": "worker-2",
    "scheduler-1": "scheduler",
    "scheduler-2": "scheduler-2",
}

pytestmark = [pytest.mark.containers, pytest.mark.slow, pytest.mark.timeout(1500)]


def run(*args: str, timeout: float = 120, check: bool = True, **env: str) -> str:
    result = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **env},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: exit {result.returncode}\n{result.stderr[-3000:]}")
    return result.stdout


def daemon_answers() -> bool:
    try:
        probe = subprocess.run(["docker", "info"], capture_output=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False
    return probe.returncode == 0


def stale_images() -> list[str]:
    """The images missing, or built from other sources than these."""
    wanted = run("bash", str(IMAGES_SH), "--source-hash").strip()
    stale = []
    for image in IMAGES:
        probe = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image],
            capture_output=True,
            text=True,
        )
        labels = (json.loads(probe.stdout or "null") or {}) if probe.returncode == 0 else {}
        if labels.get("org.lakewarden.source") != wanted:
            stale.append(image)
    return stale


@pytest.fixture(scope="module")
def docker() -> Iterator[None]:
    """A daemon that answers (started here when none does, stopped after) and the images."""
    if os.environ.get("CI") and os.environ.get("LAKEWARDEN_CONTAINER_TESTS") != "1":
        # 5-10 min on 2 shared cores: more than the suite's whole budget can spare.
        pytest.skip("in CI only with LAKEWARDEN_CONTAINER_TESTS=1 (the stack takes 5-10 min)")
    if shutil.which("docker") is None or shutil.which("dockerd") is None:
        pytest.skip("no Docker engine (docker, dockerd): `make images` installs one")
    started = False
    if not daemon_answers():
        try:
            start = subprocess.run(
                ["bash", str(IMAGES_SH), "--daemon"],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=ROOT,
            )
        except subprocess.TimeoutExpired:
            pytest.skip("the Docker daemon did not start within 120 s")
        if start.returncode != 0:
            pytest.skip(f"the Docker daemon cannot start here: {start.stderr.strip()[-800:]}")
        started = True
    try:
        if stale := stale_images():
            if os.environ.get("LAKEWARDEN_BUILD_IMAGES") != "1":
                pytest.skip(
                    f"images missing or built from other sources: {', '.join(stale)}; "
                    "run `make images` (or set LAKEWARDEN_BUILD_IMAGES=1)"
                )
            run("bash", str(IMAGES_SH), timeout=1800)
        yield
    finally:
        if started:
            subprocess.run(["bash", str(IMAGES_SH), "--stop"], timeout=60, cwd=ROOT)


class Stack:
    """`docker compose -p lakewarden-test -f docker-compose.yml -f docker-compose.host.yml`."""

    def __init__(self, warehouse: Path) -> None:
        self.env = {"LAKEWARDEN_HOST_WAREHOUSE": str(warehouse)}
        self.files = ["docker-compose.yml", "docker-compose.host.yml"]

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        files = [arg for f in self.files for arg in ("-f", f)]
        return run(
            "docker", "compose", "-p", PROJECT, *files, *args,
            timeout=timeout, check=check, **self.env,
        )  # fmt: skip

    def container(self, service: str) -> str:
        cid = self.compose("ps", "-q", "--all", service).strip()
        assert cid, f"no container for {service}"
        return cid.splitlines()[0]

    def health(self, service: str) -> str:
        return run(
            "docker",
            "inspect",
            "--format",
            "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}",
            self.container(service),
        ).strip()

    def exit_code(self, service: str) -> int | None:
        state = json.loads(
            run("docker", "inspect", "--format", "{{json .State}}", self.container(service))
        )
        return None if state["Running"] or state["Status"] == "created" else int(state["ExitCode"])

    def logs(self, *services: str, tail: int = 40) -> str:
        return self.compose("logs", "--no-color", "--tail", str(tail), *services, check=False)


def wait(fn: Callable[[], Any], timeout: float, what: str, stack: Stack, step: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{stack.logs()}")


@pytest.fixture(scope="module")
def stack(docker: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # The warehouse at the same path inside the containers and here, so that pyiceberg on
    # the host reads the files the containers wrote; 0777: they run as uid 10001.
    warehouse = Path("/var/tmp") / f"lakewarden-test-warehouse-{os.getpid()}"
    warehouse.mkdir(mode=0o777)
    warehouse.chmod(0o777)
    s = Stack(warehouse)
    s.compose("down", "-v", "--remove-orphans", check=False)  # a previous run's leftovers
    try:
        yield s
    finally:
        s.compose("down", "-v", "--remove-orphans", "-t", "5", timeout=180, check=False)
        # Files written by uid 10001 in the containers: root here removes them.
        shutil.rmtree(warehouse, ignore_errors=True)


def terminal_transitions(
    engine: Engine, task_id: int
) -> list[tuple[str | None, str, str, str | None]]:
    with engine.connect() as conn:
        return [
            (r.from_state, r.to_state, r.actor, r.reason)
            for r in conn.execute(
                text(
                    "SELECT from_state, to_state, actor, reason FROM task_transitions "
                    "WHERE task_id = :t ORDER BY id"
                ),
                {"t": task_id},
            )
        ]


def leader(engine: Engine) -> tuple[str, bool] | None:
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT holder, expires_at > now() FROM leader_lease WHERE name = 'scheduler'")
        ).one_or_none()
    return (str(row[0]), bool(row[1])) if row else None


def host_of(process_id: str) -> str:
    m = HOLDER.match(process_id)
    assert m, f"not a container's process: {process_id}"
    return m.group(1)


def test_compose_stack(stack: Stack, tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    from scripts import demo_writer

    # 1. Up and ready: every long-running container healthy (`lakewarden check` inside).
    t0 = time.monotonic()
    stack.compose("up", "-d", "--no-build", "--pull", "never", timeout=600)
    wait(
        lambda: all(stack.health(s) == "healthy" for s in LONG_RUNNING if s != "spark-worker"),
        300,
        "every service healthy",
        stack,
        step=1,
    )
    ready_s = time.monotonic() - t0
    print(f"\ncompose up -> every service healthy: {ready_s:.1f}s")
    networks = run("docker", "network", "ls", "--format", "{{.Name}}").split()
    assert not [n for n in networks if n.startswith(PROJECT)], "a compose network was made"

    # 2. The writer's small files, compacted in the containers; read back from the host.
    wait(lambda: stack.exit_code("writer") is not None, 600, "the writer to finish", stack, step=2)
    writer_log = stack.logs("writer", tail=20)
    assert stack.exit_code("writer") == 0, writer_log
    m = re.search(r"compacted: (\d+) -> (\d+) data files", writer_log)
    assert m, writer_log
    url = f"postgresql+psycopg://lakewarden:lakewarden@127.0.0.1:{PG_PORT}/lakewarden"
    engine = create_engine(url)
    catalog = SqlCatalog(
        "lake", uri=url, warehouse=f"file://{stack.env['LAKEWARDEN_HOST_WAREHOUSE']}"
    )
    table = catalog.load_table(f"{demo_writer.NAMESPACE}.{demo_writer.NAME}")
    assert table.scan().to_arrow().num_rows == 40 * 100
    files = demo_writer.data_files(table)
    assert files < int(m.group(1)), (files, m.groups())

    def succeeded() -> list[Any]:
        # The task row turns succeeded just after the writer sees the compaction's commit.
        with engine.connect() as conn:
            return list(
                conn.execute(
                    text(
                        "SELECT t.id, t.created_at, max(tr.at) AS ended FROM tasks t "
                        "JOIN task_transitions tr ON tr.task_id = t.id WHERE t.kind = "
                        "'compaction' AND t.state = 'succeeded' GROUP BY t.id"
                    )
                )
            )

    tasks = wait(succeeded, 60, "the compaction task to succeed", stack, step=1)
    first = min(tasks, key=lambda r: r.id)
    actors = {a for *_, a, _r in terminal_transitions(engine, first.id)}
    hosts = {host_of(a) for a in actors if HOLDER.match(a)}
    assert any(h.startswith("worker-") for h in hosts), actors  # planned in a worker container
    assert any(h.startswith("scheduler-") for h in hosts), actors  # run by a scheduler's
    print(f"compaction task {first.id}: {(first.ended - first.created_at).total_seconds():.1f}s")

    # 3. docker kill of the leading scheduler's container: the standby leads within 10 s.
    holder, live = wait(lambda: leader(engine), 60, "a scheduler lease", stack)
    assert live
    doomed = host_of(holder)
    run("docker", "kill", stack.container(SERVICE_OF_HOST[doomed]))
    killed = time.monotonic()
    new = wait(
        lambda: (lease := leader(engine)) and lease[1] and host_of(lease[0]) != doomed and lease,
        30,
        "the standby scheduler to lead",
        stack,
        step=0.1,
    )
    failover_s = time.monotonic() - killed
    print(f"docker kill of the leader ({doomed}): {host_of(new[0])} leads after {failover_s:.1f}s")
    assert failover_s < 10, failover_s

    # 4. A worker container restarted mid-plan: the task is planned again and ends once.
    # Workers that take 10 s to plan (the failpoint), so that a plan can be caught.
    slow = tmp_path / "slow-workers.yml"
    env = {"LAKEWARDEN_FAULT_PLAN_DELAY_S": "10"}
    slow.write_text(json.dumps({"services": {w: {"environment": env} for w in WORKERS}}))
    stack.files.append(str(slow))
    stack.compose("up", "-d", "--no-build", "--no-deps", *WORKERS)
    wait(lambda: all(stack.health(w) == "healthy" for w in WORKERS), 120, "slow workers", stack)
    table = demo_writer.write_commits(table, 25)
    with engine.connect() as conn:
        planning = wait(
            lambda: conn.execute(
                text(
                    "SELECT id, holder FROM tasks WHERE kind = 'compaction' "
                    "AND state = 'planning' AND id > :after"
                ),
                {"after": max(r.id for r in tasks)},
            ).first(),
            120,
            "a compaction in planning",
            stack,
            step=0.2,
        )
        conn.rollback()
    task_id, planner = planning
    run("docker", "restart", "-t", "0", stack.container(SERVICE_OF_HOST[host_of(planner)]))
    restarted = time.monotonic()

    def ended() -> str | None:
        with engine.connect() as conn:
            state = conn.execute(
                text("SELECT state FROM tasks WHERE id = :t"), {"t": task_id}
            ).scalar()
        return state if state in {"succeeded", "skipped", "failed", "cancelled"} else None

    state = wait(ended, 300, f"task {task_id} to end after the restart", stack, step=1)
    replanned_s = time.monotonic() - restarted
    print(f"worker restarted mid-plan: task {task_id} {state} {replanned_s:.1f}s later")
    history = terminal_transitions(engine, task_id)
    assert state == "succeeded", history
    assert ("planning", "pending") in [(f, t) for f, t, _a, _r in history], history
    assert [t for _f, t, _a, _r in history].count("succeeded") == 1, history
    table = catalog.load_table(f"{demo_writer.NAMESPACE}.{demo_writer.NAME}")
    ids = table.scan().to_arrow().column("id").to_pylist()
    assert sorted(ids) == list(range(65 * 100)), "rows lost or doubled"
    engine.dispose()
