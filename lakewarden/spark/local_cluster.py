"""A Spark standalone cluster (one master, one worker) started on this machine from
PySpark's own `spark-class`, on loopback and free ports.

For tests and benchmarks: it is the same pair of daemons docker-compose runs
(`org.apache.spark.deploy.master.Master` / `...worker.Worker`), so a job that runs with
`spark_master=cluster.master_url` really runs on a cluster: its own application on the
master, its tasks on the worker's executor. The master's REST submission server is on
(`rest_url`), for `spark-submit --deploy-mode cluster` and its `--status`/`--kill`.

Also the master's web UI JSON (`/json/`): `master_state`, `app_state`, `kill_app`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
LOG_TAIL_CHARS = 4000


class ClusterStartError(RuntimeError):
    pass


def spark_home() -> Path:
    """PySpark's package directory: it is a Spark distribution (bin/, jars/, sbin/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_class_path() -> Path:
    return spark_home() / "bin" / "spark-class"


def java_home() -> str | None:
    """JAVA_HOME, or the home of the `java` on PATH (spark-class needs one of them; the
    daemons are started with an explicit JAVA_HOME so PATH changes cannot break them)."""
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    if java is None:
        return None
    return str(Path(java).resolve().parent.parent)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def master_state(web_url: str, *, timeout: float = 10.0) -> dict[str, Any]:
    """The master's JSON state (`/json/`): workers, aliveworkers, activeapps,
    completedapps, status, ..."""
    body: dict[str, Any] = httpx.get(f"{web_url.rstrip('/')}/json/", timeout=timeout).json()
    return body


def apps_by_id(web_url: str) -> dict[str, dict[str, Any]]:
    """Every application the master knows (active and completed), by application id."""
    body = master_state(web_url)
    return {
        str(app["id"]): app
        for key in ("completedapps", "activeapps")  # active last: it wins if both list it
        for app in body.get(key, [])
    }


def app_state(web_url: str, app_id: str) -> str | None:
    """The master's state of `app_id`: WAITING, RUNNING, FINISHED, FAILED, KILLED, UNKNOWN.
    None: the master does not list it (not registered yet, or an id from elsewhere)."""
    app = apps_by_id(web_url).get(app_id)
    return None if app is None else str(app.get("state"))


def kill_app(web_url: str, app_id: str) -> None:
    """Ask the master to kill `app_id` (the web UI's kill action: a POST, as the UI's form).
    The master removes the application and its executors; a client-mode driver learns it
    from the master and its SparkContext stops."""
    response = httpx.post(
        f"{web_url.rstrip('/')}/app/kill/",
        data={"id": app_id, "terminate": "true"},
        timeout=10,
    )
    # The UI answers a redirect to its main page whether or not the id was known.
    if response.status_code >= 400:
        response.raise_for_status()


@dataclass
class LocalCluster:
    """A running master and worker. `stop()` (or leaving the `with` block) ends both."""

    master_url: str
    web_url: str
    rest_url: str
    worker_web_url: str
    base_dir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    def state(self) -> dict[str, Any]:
        return master_state(self.web_url)

    def app_state(self, app_id: str) -> str | None:
        return app_state(self.web_url, app_id)

    def kill_app(self, app_id: str) -> None:
        kill_app(self.web_url, app_id)

    def stop(self) -> None:
        """End the worker, then the master: each its whole process group (spark-class's
        launcher and the JVM it execs, and the executors the worker started), SIGTERM
        then SIGKILL after a grace period."""
        for proc in reversed(self.processes):
            end_daemon(proc)
        self.processes.clear()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def end_daemon(proc: subprocess.Popen[bytes]) -> None:
    """Stop a daemon `launch_daemon` started, with its whole process group: SIGTERM, then
    SIGKILL after a grace period."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_GRACE_S)
    # Executors are children of the worker in its group; they may outlive the daemon.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_GRACE_S)


def _daemon_env(base_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["SPARK_HOME"] = str(spark_home())
    home = java_home()
    if home:
        env["JAVA_HOME"] = home
    # An empty conf dir: no spark-defaults.conf or spark-env.sh from elsewhere.
    conf_dir = base_dir / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    env["SPARK_CONF_DIR"] = str(conf_dir)
    env["SPARK_LOG_DIR"] = str(base_dir / "logs")
    env["SPARK_LOCAL_IP"] = HOST
    env["SPARK_LOCAL_DIRS"] = str(base_dir / "local")
    # The driver's settings must not leak into the daemons.
    for key in ("SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        env.pop(key, None)
    return env


def launch_daemon(
    argv: list[str], env: dict[str, str], log_path: Path, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start one of the local servers' JVMs (Spark's, HDFS's, the metastore's, Trino's), its
    output appended to `log_path`; in `cwd` (a server that writes relative paths, as Trino
    does, is started in its own work directory)."""
    with open(log_path, "ab") as log:
        # Its own process group and session: stop() ends the launcher, the JVM and the
        # executors together, and a Ctrl-C in the terminal does not reach them.
        return subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _tail(path: Path) -> str:
    if not path.exists():
        return ""
    return path.read_bytes()[-LOG_TAIL_CHARS:].decode(errors="replace")


def start_cluster(
    base_dir: Path,
    *,
    worker_cores: int = 2,
    worker_memory: str = "2g",
    timeout_s: float = START_TIMEOUT_S,
) -> LocalCluster:
    """Start a master and one worker under `base_dir` (conf/, logs/, work/, local/) and
    wait until the master lists the worker as alive. Raises ClusterStartError (with the
    daemons' log tails) if that does not happen within `timeout_s`; nothing is left
    running then."""
    spark_class = spark_class_path()
    if not spark_class.exists():
        raise ClusterStartError(f"no spark-class at {spark_class}: is PySpark installed?")
    if java_home() is None:
        raise ClusterStartError("no Java: set JAVA_HOME or put java on PATH")
    base_dir = base_dir.resolve()
    for sub in ("logs", "work", "local"):
        (base_dir / sub).mkdir(parents=True, exist_ok=True)
    env = _daemon_env(base_dir)
    port, web_port, rest_port, worker_web_port = (free_port() for _ in range(4))
    master_props = base_dir / "conf" / "master.properties"
    master_props.write_text(
        "spark.master.rest.enabled true\n"
        f"spark.master.rest.port {rest_port}\n"
        # Tests start many applications: keep their records small and few.
        "spark.deploy.retainedApplications 200\n"
    )
    master_log = base_dir / "logs" / "master.out"
    worker_log = base_dir / "logs" / "worker.out"
    cluster = LocalCluster(
        master_url=f"spark://{HOST}:{port}",
        web_url=f"http://{HOST}:{web_port}",
        rest_url=f"spark://{HOST}:{rest_port}",
        worker_web_url=f"http://{HOST}:{worker_web_port}",
        base_dir=base_dir,
    )
    try:
        cluster.processes.append(
            launch_daemon(
                [
                    str(spark_class),
                    MASTER_CLASS,
                    "--host",
                    HOST,
                    "--port",
                    str(port),
                    "--webui-port",
                    str(web_port),
                    "--properties-file",
                    str(master_props),
                ],
                env,
                master_log,
            )
        )
        # The worker only once the master answers: a worker that finds no master retries
        # its registration after 5-15 s, most of a start's time.
        _wait_until(
            cluster,
            timeout_s,
            (master_log,),
            lambda state: state.get("status") == "ALIVE",
            "live master",
        )
        cluster.processes.append(
            launch_daemon(
                [
                    str(spark_class),
                    WORKER_CLASS,
                    cluster.master_url,
                    "--host",
                    HOST,
                    "--cores",
                    str(worker_cores),
                    "--memory",
                    worker_memory,
                    "--webui-port",
                    str(worker_web_port),
                    "--work-dir",
                    str(base_dir / "work"),
                ],
                env,
                worker_log,
            )
        )
        _wait_until(
            cluster,
            timeout_s,
            (master_log, worker_log),
            lambda state: int(state.get("aliveworkers", 0)) >= 1,
            "registered worker",
        )
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_until(
    cluster: LocalCluster,
    timeout_s: float,
    logs: tuple[Path, ...],
    ready: Callable[[dict[str, Any]], bool],
    what: str,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in cluster.processes:
            if proc.poll() is not None:
                raise ClusterStartError(
                    f"a Spark daemon exited with code {proc.returncode}:\n" + _logs(logs)
                )
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if ready(cluster.state()):
                return
        time.sleep(0.25)
    raise ClusterStartError(f"no {what} within {timeout_s:.0f}s:\n" + _logs(logs))


def _logs(paths: tuple[Path, ...]) -> str:
    return "\n".join(f"--- {p.name}\n{_tail(p)}" for p in paths)


def wait_for_daemons(
    processes: Mapping[str, subprocess.Popen[bytes]],
    ready: Callable[[], bool],
    log_dir: Path,
    timeout_s: float,
    not_ready: str,
    error: type[Exception],
) -> None:
    """Until `ready()` (HDFS writable, a NodeManager registered, ...): `error` with every
    daemon's log tail (`log_dir`'s *.out) as soon as one exits, or when `timeout_s` runs
    out (`not_ready` says what did not happen)."""

    def logs() -> str:
        return _logs(tuple(sorted(log_dir.glob("*.out"))))

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name, proc in processes.items():
            if proc.poll() is not None:
                raise error(f"the {name} exited with code {proc.returncode}:\n" + logs())
        if ready():
            return
        time.sleep(0.25)
    raise error(f"{not_ready} within {timeout_s:.0f}s:\n" + logs())
