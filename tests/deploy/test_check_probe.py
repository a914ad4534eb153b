"""`lakewarden check`: the worker's and scheduler's Kubernetes probes, on a real Postgres.

Its answer comes from the process's heartbeat row (by role and this host's name, the pod's
name in Kubernetes), judged stale by the database's own clock."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from cli.main import app
from lakewarden.runtime import Runtime
from lakewarden.settings import Settings

HOST = socket.gethostname()


def check(settings: Settings, monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    """`lakewarden check ARGV` on `settings`; its exit code."""
    monkeypatch.setattr("lakewarden.settings.get_settings", lambda: settings)
    return CliRunner().invoke(app, ["check", *argv]).exit_code


def beat_at(rt: Runtime, role: str, host: str, seconds_ago: float, pid: int = 1) -> None:
    params: dict[str, Any] = {
        "id": f"{role}-{host}-{pid}",
        "role": role,
        "host": host,
        "pid": pid,
        "ago": seconds_ago,
    }
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO process_heartbeats (process_id, role, hostname, pid, last_seen) "
                "VALUES (:id, :role, :host, :pid, now() - make_interval(secs => :ago))"
            ),
            params,
        )


def test_fresh_heartbeat_passes(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    beat_at(rt, "worker", HOST, 2)
    assert check(rt.settings, monkeypatch, "--role", "worker") == 0
    assert check(rt.settings, monkeypatch, "--role", "worker", "--liveness") == 0


def test_stale_or_missing_heartbeat_fails(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    assert check(rt.settings, monkeypatch, "--role", "scheduler") == 1  # none yet
    beat_at(rt, "scheduler", HOST, rt.settings.stale_after_s + 30)
    assert check(rt.settings, monkeypatch, "--role", "scheduler") == 1
    assert check(rt.settings, monkeypatch, "--role", "scheduler", "--liveness") == 1
    assert check(rt.settings, monkeypatch, "--role", "scheduler", "--max-age", "600") == 0


def test_a_restarted_process_in_the_same_pod_counts_by_its_newest_beat(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    beat_at(rt, "worker", HOST, 900, pid=1)  # the previous container's row, left behind
    beat_at(rt, "worker", HOST, 1, pid=7)
    assert check(rt.settings, monkeypatch, "--role", "worker") == 0


def test_other_pods_and_roles_do_not_count(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    beat_at(rt, "worker", "another-pod", 1)
    beat_at(rt, "api", HOST, 1)
    assert check(rt.settings, monkeypatch, "--role", "worker") == 1


def test_database_down_fails_readiness_but_not_liveness(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = rt.settings.model_copy(
        update={"database_url": f"postgresql+psycopg://nobody:x@127.0.0.1:{port}/none"}
    )
    assert check(down, monkeypatch, "--role", "worker") == 1
    assert check(down, monkeypatch, "--role", "worker", "--liveness") == 0
