"""One harness for the lakewarden processes that tests, benchmarks and scripts/soak.py
start as children (`python -m cli <role>`, as deployed): their environment, their
start, their teardown, and who holds the scheduler's lease.

Here (not in tests/) because all three use it: the tests and the benchmarks import it as
`benchmarks.processes` (the repository root is on their path), scripts/soak.py puts the
root on its path first."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from lakewarden.db.locks import DBLocks
from lakewarden.settings import Settings
from lakewarden.spark.submit import settings_env


def process_env(
    db_url: str,
    data_dir: Path | None = None,
    *,
    drop: str | None = None,
    settings: Settings | None = None,
    **values: str,
) -> dict[str, str]:
    """A child's environment: this process's own (without the variables whose names start
    with `drop`: `"LAKEWARDEN_"` so that only what is given here counts), then every field
    of `settings` (as `lakewarden.spark.submit.settings_env`), the database URL, the data
    directory, and each of `values` as `LAKEWARDEN_<NAME>` (`warehouse="file:..."`)."""
    env = {k: v for k, v in os.environ.items() if drop is None or not k.startswith(drop)}
    if settings is not None:
        env.update(settings_env(settings, db_url))
    env["LAKEWARDEN_DATABASE_URL"] = db_url
    if data_dir is not None:
        env["LAKEWARDEN_DATA_DIR"] = str(data_dir)
    env.update(setting_vars(values))
    return env


def setting_vars(values: Mapping[str, str]) -> dict[str, str]:
    """Settings as the variables a lakewarden process reads: `LAKEWARDEN_<NAME>`."""
    return {f"LAKEWARDEN_{name.upper()}": value for name, value in values.items()}


def start(
    args: Iterable[str],
    env: Mapping[str, str],
    log: Path,
    *,
    append: bool = False,
    module: str = "cli",
    **popen: Any,
) -> subprocess.Popen[bytes]:
    """`python -m cli <args>` (or another `module`), its output and errors into `log`
    (appended to, for a process restarted under the same log). `popen`: more of Popen's
    (cwd, ...)."""
    with open(log, "ab" if append else "wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            **popen,
        )


def stop(
    procs: Iterable[subprocess.Popen[bytes]], *, timeout: float = 30.0, crash: bool = False
) -> None:
    """Stop every process still running: SIGTERM (a scheduler resigns its lease), or
    SIGKILL when `crash`; wait up to `timeout` for each, then kill what is left (with its
    process group, when it leads one: a Spark driver it started goes too)."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGKILL if crash else signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                if os.getpgid(p.pid) == p.pid:
                    os.killpg(p.pid, signal.SIGKILL)
                else:
                    p.kill()
            p.wait()


@dataclass(frozen=True)
class Lease:
    """The scheduler's lease row."""

    holder: str
    epoch: int
    live: bool  # not expired
    renewed_at: datetime


def scheduler_lease(engine: Engine) -> Lease | None:
    """The scheduler's lease, live or lapsed (None: never taken)."""
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT holder, epoch, expires_at > now(), renewed_at FROM leader_lease "
                "WHERE name = :lease"
            ),
            {"lease": DBLocks.SCHEDULER_LEASE},
        ).one_or_none()
    return Lease(str(row[0]), int(row[1]), bool(row[2]), row[3]) if row else None


def lease_holder(engine: Engine) -> tuple[str, int] | None:
    """Who leads the schedulers now, and in which epoch (None: nobody). A process's id
    holds its pid: `f"-{proc.pid}-" in holder` tells which child leads."""
    lease = scheduler_lease(engine)
    return (lease.holder, lease.epoch) if lease is not None and lease.live else None
