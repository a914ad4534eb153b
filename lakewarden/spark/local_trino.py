"""A single-node Trino for tests and benchmarks: the reader the seeds use, reading the tables
lakewarden maintains through the same catalogs (JDBC, REST, Hive Metastore).

Trino's server core and its Iceberg plugin are the `server-trino` group of
`lakewarden/spark/jars.lock` (archives, fetched and unpacked through `lakewarden.spark.jars`).
Trino needs Java 24 or newer: `TRINO_JAVA_HOME`, else the newest JDK of `/usr/lib/jvm`
that is new enough (`trino_java_home`; None when there is none, and the fixture skips).

One coordinator that is also its worker, on loopback and a free port, its `etc/` written
under a work directory (`config.properties`; the JVM flags, a modest heap, on its command
line, as Trino's launcher would pass its `jvm.config`), and catalogs
managed dynamically (`catalog.management=dynamic`, kept in memory only), so that a test adds
the catalog it reads with `CREATE CATALOG` (`Trino.add_iceberg_catalog`). The server runs in
its work directory: nothing it writes lands elsewhere. A secret a catalog needs (the
JDBC catalog's database password) goes into the server's environment at its start
(`secrets`) and the catalog names it `${ENV:NAME}`: never in a query nor on a command line.

    with local_trino(work, secrets={"LW_PG_PASSWORD": pw}) as trino:
        trino.add_iceberg_catalog("hive", {"iceberg.catalog.type": "hive_metastore", ...})
        trino.query('SELECT count(*) FROM hive."db"."t"')
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakewarden.settings import Settings
from lakewarden.spark.jars import server_jars, unpacked
from lakewarden.spark.local_cluster import HOST, end_daemon, free_port, launch_daemon

GROUP = "server-trino"
MIN_JAVA = 24  # Trino 476's floor
JVM_ROOT = Path("/usr/lib/jvm")
START_TIMEOUT_S = 180.0
MAIN_CLASS = "io.trino.server.TrinoServer"
# Trino's recommended flags (its docs' jvm.config), with a heap for a test machine.
JVM_FLAGS = [
    "-Xmx1G",
    "-XX:+UseG1GC",
    "-XX:G1HeapRegionSize=32M",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-OmitStackTraceInFastThrow",
    "-XX:ReservedCodeCacheSize=256M",
    "-XX:PerMethodRecompilationCutoff=10000",
    "-XX:PerBytecodeRecompilationCutoff=10000",
    "-XX:+EnableDynamicAgentLoading",
    "-Djdk.attach.allowAttachSelf=true",
    "-Djdk.nio.maxCachedBufferSize=2000000",
    "-Dfile.encoding=UTF-8",
]
# Every catalog reads the tables' files from the local disk (file:// warehouses): Trino's
# own local file system, rooted at /, so a file:///x location is the file /x.
LOCAL_FILES = {"fs.native-local.enabled": "true", "local.location": "/"}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def _java_version(home: Path) -> int | None:
    release = home / "release"
    if not (home / "bin" / "java").exists() or not release.exists():
        return None
    found = re.search(r'^JAVA_VERSION="(\d+)', release.read_text(), re.MULTILINE)
    return int(found.group(1)) if found else None


def trino_java_home() -> Path | None:
    """A JDK Trino runs on: `TRINO_JAVA_HOME`, else the newest of /usr/lib/jvm that is at
    least `MIN_JAVA` (the machine's default Java, 17, is too old)."""
    if os.environ.get("TRINO_JAVA_HOME"):
        return Path(os.environ["TRINO_JAVA_HOME"])
    homes = [(_java_version(h), h) for h in JVM_ROOT.glob("*")] if JVM_ROOT.is_dir() else []
    fit = sorted((v, str(h)) for v, h in homes if v is not None and v >= MIN_JAVA)
    return Path(fit[-1][1]) if fit else None


@dataclass
class Trino:
    """One Trino server on 127.0.0.1:`port`."""

    port: int
    etc: Path
    log_path: Path
    start_s: float = 0.0  # how long the start took
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def connect(self, **options: Any) -> Any:
        import trino.dbapi

        return trino.dbapi.connect(host=HOST, port=self.port, user="lakewarden", **options)

    def query(self, sql: str, **options: Any) -> list[list[Any]]:
        """Every row of one statement (`options`: the client's, e.g. `max_attempts`)."""
        conn = self.connect(**options)
        try:
            cur = conn.cursor()
            cur.execute(sql)
            rows: list[list[Any]] = cur.fetchall()
            return rows
        finally:
            conn.close()

    def add_iceberg_catalog(self, name: str, properties: Mapping[str, str]) -> None:
        """`CREATE CATALOG name USING iceberg` with `properties` (the catalog file's keys;
        a secret as `${ENV:NAME}` of the server's `secrets`) and the local file system."""
        if not _NAME.match(name):
            raise ValueError(f"a Trino catalog name is lower case letters, digits, _: {name!r}")
        props = {**LOCAL_FILES, **properties}
        with_ = ", ".join(f'"{k}" = {_literal(v)}' for k, v in props.items())
        self.query(f"CREATE CATALOG {name} USING iceberg WITH ({with_})")

    def drop_catalog(self, name: str) -> None:
        self.query(f"DROP CATALOG IF EXISTS {name}")

    def stop(self) -> None:
        if self._proc is not None:
            end_daemon(self._proc)
            self._proc = None

    def _answers(self) -> bool:
        try:
            # One attempt: the client's own retries would log each refused connection.
            return self.query("SELECT 1", max_attempts=1, request_timeout=5.0) == [[1]]
        except Exception:
            return False


def estimated_rows(plan: str, node: str) -> float | None:
    """The output rows Trino's EXPLAIN estimates for the first `node` (e.g. "InnerJoin") of
    `plan`; None where it shows `?` (it lacks the statistics to estimate them)."""
    lines = plan.splitlines()
    at = next(i for i, line in enumerate(lines) if f"{node}[" in line)
    shown = next(line for line in lines[at:] if "Estimates: {rows: " in line)
    rows = shown.split("Estimates: {rows: ", 1)[1].split(" ", 1)[0]
    return None if rows == "?" else float(rows.replace(",", ""))


def _literal(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _write_etc(etc: Path, data: Path, plugins: Path, port: int) -> None:
    (etc / "config.properties").write_text(
        "\n".join(
            [
                "coordinator=true",
                "node-scheduler.include-coordinator=true",
                f"http-server.http.port={port}",
                f"discovery.uri=http://{HOST}:{port}",
                "node.environment=lakewarden_test",
                f"node.id={uuid.uuid4()}",
                f"plugin.dir={plugins}",
                "catalog.management=dynamic",
                # Kept in memory only: the file store writes each catalog's properties with
                # `${ENV:...}` resolved, the secret in clear on disk.
                "catalog.store=memory",
                f"http-server.log.path={data / 'http-request.log'}",
                f"log.path={data / 'server.log'}",
                "query.max-memory=512MB",
                "query.max-memory-per-node=256MB",
                # One node, two shared cores: no more threads than that asks for.
                "task.concurrency=2",
                "task.max-worker-threads=4",
                "",
            ]
        )
    )
    (etc / "log.properties").write_text("io.trino=WARN\nio.airlift=WARN\n")


@contextmanager
def local_trino(
    work: Path,
    *,
    secrets: Mapping[str, str] | None = None,
    settings: Settings | None = None,
    java_home: Path | None = None,
) -> Iterator[Trino]:
    """A Trino server under `work` (etc/, data/, plugin/, trino.log), started and stopped
    around the block. `secrets`: environment variables of the server only, for catalogs'
    `${ENV:NAME}`. Raises RuntimeError naming what is missing (a JDK) or the log."""
    home = java_home or trino_java_home()
    if home is None or not (home / "bin" / "java").exists():
        raise RuntimeError(
            f"Trino needs Java {MIN_JAVA}+: none in {JVM_ROOT}; set TRINO_JAVA_HOME to a JDK"
        )
    server, iceberg = (unpacked(p) for p in server_jars(settings or Settings(), GROUP))
    work = work.resolve()
    etc, data, plugins = work / "etc", work / "data", work / "plugin"
    for d in (etc, data, plugins):
        d.mkdir(parents=True, exist_ok=True)
    # Only the Iceberg connector: each plugin loaded costs start time.
    link = plugins / "iceberg"
    if not link.exists():
        link.symlink_to(iceberg, target_is_directory=True)
    port = free_port()
    _write_etc(etc, data, plugins, port)
    trino = Trino(port, etc, work / "trino.log")
    env = {**os.environ, **(secrets or {}), "JAVA_HOME": str(home)}
    argv = [
        str(home / "bin" / "java"),
        *JVM_FLAGS,
        f"-Dconfig={etc / 'config.properties'}",
        f"-Dlog.levels-file={etc / 'log.properties'}",
        "-cp",
        f"{server / 'lib'}/*",
        MAIN_CLASS,
    ]
    started = time.monotonic()
    # In `work`: what Trino still writes to relative paths (var/, etc/) stays there.
    trino._proc = proc = launch_daemon(argv, env, trino.log_path, cwd=work)
    try:
        deadline = started + START_TIMEOUT_S
        while not trino._answers():
            if proc.poll() is not None:
                raise RuntimeError(f"Trino exited ({proc.returncode}); its log: {trino.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Trino did not answer; its log: {trino.log_path}")
            time.sleep(0.5)
        trino.start_s = time.monotonic() - started
        yield trino
    finally:
        trino.stop()
