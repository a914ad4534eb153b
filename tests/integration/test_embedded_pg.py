"""The embedded Postgres holds the users' Iceberg catalog: it must be durable and locked.

Each test runs its own server in a fresh directory (the shared test server runs without
fsync, for speed) and stops it at the end.
"""

from __future__ import annotations

import os
import random
import stat
import subprocess
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from lakewarden.db import embedded
from lakewarden.db.embedded import (
    _any_free_port,
    _port_free,
    ensure_server,
    password_file,
)


@pytest.fixture
def data_dir(own_pg_dir: Path) -> Path:
    return own_pg_dir


def _refused(**kwargs: object) -> str:
    with pytest.raises(psycopg.OperationalError) as err:
        psycopg.connect(user="postgres", dbname="postgres", connect_timeout=5, **kwargs)  # type: ignore[arg-type]
    return str(err.value)


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _assert_locked_and_durable(data_dir: Path, url: str) -> None:
    u = make_url(url)
    assert u.host == "127.0.0.1" and u.port is not None
    password = password_file(data_dir).read_text().strip()
    assert u.password == password and len(password) >= 32
    assert _mode(password_file(data_dir)) == 0o600
    assert _mode(data_dir / "pg") == 0o700
    with psycopg.connect(_libpq(url)) as conn:
        for name in ("fsync", "synchronous_commit", "full_page_writes"):
            assert conn.execute(f"SHOW {name}").fetchone() == ("on",), name
        assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        assert conn.execute("SHOW password_encryption").fetchone() == ("scram-sha-256",)
    # Without the password, or with a wrong one, over TCP and over the Unix socket: refused.
    assert "no password supplied" in _refused(host="127.0.0.1", port=u.port)
    assert "password authentication failed" in _refused(
        host="127.0.0.1", port=u.port, password="not-" + password
    )
    assert "no password supplied" in _refused(host=str(data_dir / "pg"), port=u.port)


def test_a_new_server_is_durable_and_password_protected(data_dir: Path) -> None:
    url = ensure_server(data_dir, _any_free_port())
    _assert_locked_and_durable(data_dir, url)
    with psycopg.connect(_libpq(url)) as conn:
        started = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
    # Every other process finds the same server and the same password; nothing restarts.
    assert ensure_server(data_dir, _any_free_port()) == url
    with psycopg.connect(_libpq(url)) as conn:
        assert conn.execute("SELECT pg_postmaster_start_time()").fetchone() == started


def test_tests_may_run_their_own_server_without_fsync_but_not_without_a_password(
    data_dir: Path,
) -> None:
    url = ensure_server(data_dir, _any_free_port(), durable=False)
    u = make_url(url)
    with psycopg.connect(_libpq(url)) as conn:
        assert conn.execute("SHOW fsync").fetchone() == ("off",)
    assert "no password supplied" in _refused(host="127.0.0.1", port=u.port)


def _older_version(data_dir: Path, port: int, *, running: bool) -> None:
    """A data dir as lakewarden left it before passwords: trust, fsync off, no password file;
    with a table in it, which must survive the upgrade."""
    pgdata = data_dir / "pg"
    pgdata.mkdir(parents=True)
    if os.geteuid() == 0:
        embedded._prepare_root(pgdata)
    run = embedded._as_server()
    initdb = [embedded._bin("initdb"), "-D", str(pgdata), "--auth=trust", "-U", "postgres"]
    subprocess.run(initdb, check=True, capture_output=True, **run)
    opts = f"-h 127.0.0.1 -p {port} -k {pgdata} -c max_connections=200 -c fsync=off"
    pg_ctl = [embedded._bin("pg_ctl"), "-D", str(pgdata), "-w", "-l", str(pgdata / "server.log")]
    subprocess.run([*pg_ctl, "-o", opts, "start"], check=True, capture_output=True, **run)
    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE lakewarden")
    with psycopg.connect(
        host="127.0.0.1", port=port, user="postgres", dbname="lakewarden", autocommit=True
    ) as conn:
        conn.execute("CREATE TABLE kept (v text)")
        conn.execute("INSERT INTO kept VALUES ('catalog pointer')")
    if not running:
        subprocess.run([*pg_ctl, "-m", "fast", "stop"], check=True, capture_output=True, **run)
    assert not password_file(data_dir).exists()


def _port_no_client_takes() -> int:
    """A free port below the kernel's ephemeral range: while the server is stopped, no
    process's outgoing connection can be given it (one from `_any_free_port` could, and
    the server then rightly moves to another port)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        if _port_free(port):
            return port
    raise RuntimeError("no free port below the ephemeral range")


@pytest.mark.parametrize("running", [True, False], ids=["running", "stopped"])
def test_an_older_trust_data_dir_is_upgraded_in_place(data_dir: Path, running: bool) -> None:
    port = _port_no_client_takes()
    _older_version(data_dir, port, running=running)
    url = ensure_server(data_dir, port)
    assert make_url(url).port == port
    _assert_locked_and_durable(data_dir, url)
    with psycopg.connect(_libpq(url)) as conn:
        assert conn.execute("SELECT v FROM kept").fetchall() == [("catalog pointer",)]
    assert ensure_server(data_dir, port) == url


def test_the_test_server_needs_its_password_too(server_url: str) -> None:
    if os.environ.get("TEST_DATABASE_URL"):
        pytest.skip("TEST_DATABASE_URL: not the embedded server")
    u = make_url(server_url)
    assert u.password
    assert "no password supplied" in _refused(host=u.host, port=u.port)
