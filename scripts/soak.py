"""Soak test (not in CI): many tables, continuous writers, random kill -9 of schedulers
and workers for a few minutes; then the same checks as the fault tests, as figures.

    .venv/bin/python scripts/soak.py --minutes 5 --tables 8

Uses its own embedded Postgres (a fresh data dir) and local Spark. Prints one JSON object:
tasks by terminal state, tasks left open, writer rows lost or duplicated, tables whose
rows changed, maintenance commits per task, and every failover time measured.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
from sqlalchemy import create_engine, text

# The repository's root, for benchmarks.processes (run as `python scripts/soak.py`, only
# scripts/ is on the path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import processes
from lakewarden.db.embedded import _any_free_port, ensure_server, stop_server
from lakewarden.db.migrate import migrate
from lakewarden.runtime import Runtime
from lakewarden.settings import Settings
from lakewarden.spark.commits import TASK_KEY
from lakewarden.states import OPEN_TASK_STATES, TERMINAL_TASK_STATES, sql_in

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("region", pa.string(), nullable=False)]
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=5)
    ap.add_argument("--tables", type=int, default=8)
    ap.add_argument("--kill-every", type=float, default=20, help="seconds between kills")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="lakewarden-soak-"))
    url = ensure_server(tmp / "pgserver", _any_free_port())
    settings = Settings(database_url=url, data_dir=tmp, warehouse=(tmp / "wh").as_uri())
    engine = create_engine(settings.database_url or url)
    rt = Runtime(settings=settings, db_url=settings.database_url or url, engine=engine, role="soak")
    migrate(rt)
    env = processes.process_env(
        url,
        tmp,
        warehouse=settings.warehouse_uri,
        lease_ttl_s="6",
        lease_renew_interval_s="2",
        stale_after_s="10",
        poll_interval_s="5",
        retry_base_s="1",
    )
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str) -> None:
        role = name.split("-")[0]
        procs[name] = processes.start([role], env, tmp / f"{name}.log", append=True)

    for name in ("api-0", "worker-0", "worker-1", "scheduler-0", "scheduler-1"):
        start(name)

    catalog = rt.catalog
    catalog.create_namespace_if_not_exists("soak")
    tables, written = [], {}
    from pyiceberg.transforms import IdentityTransform

    with engine.begin() as conn:
        for i in range(args.tables):
            t = catalog.create_table(f"soak.t{i}", schema=SCHEMA)
            with t.update_spec() as spec:
                spec.add_field("region", IdentityTransform(), "region")
            tables.append(f"soak.t{i}")
            written[f"soak.t{i}"] = 0
            conn.execute(
                text(
                    "INSERT INTO managed_tables (catalog, namespace, name, policy) VALUES "
                    "('lake', 'soak', :n, CAST(:p AS jsonb))"
                ),
                {
                    "n": f"t{i}",
                    "p": json.dumps(
                        {
                            "compaction": {
                                "min_small_files": 8,
                                "min_input_files": 4,
                                "max_attempts": 6,
                            }
                        }
                    ),
                },
            )

    failovers: list[float] = []
    kills = {"scheduler": 0, "worker": 0}
    deadline = time.monotonic() + args.minutes * 60
    next_kill = time.monotonic() + args.kill_every
    while time.monotonic() < deadline:
        name = rng.choice(tables)
        t = catalog.load_table(name)
        start_id = written[name]
        batch = pa.table(
            {
                "id": list(range(start_id, start_id + 50)),
                "region": [rng.choice("abc") for _ in range(50)],
            },
            schema=SCHEMA,
        )
        try:
            t.append(batch)
            written[name] += 50
        except CommitFailedException:
            pass  # a maintenance commit won the race; the writer simply tries later
        if time.monotonic() > next_kill:
            next_kill = time.monotonic() + args.kill_every
            victim = rng.choice([n for n in procs if not n.startswith("api")])
            role = victim.split("-")[0]
            before = processes.scheduler_lease(engine)
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            kills[role] += 1
            killed_at = time.monotonic()
            if role == "scheduler" and before and f"-{procs[victim].pid}-" in before.holder:
                while time.monotonic() - killed_at < 60:
                    now = processes.lease_holder(engine)
                    if now is not None and now[1] > before.epoch:
                        failovers.append(round(time.monotonic() - killed_at, 2))
                        break
                    time.sleep(0.1)
            start(victim)
        time.sleep(0.2)

    # Let the fleet drain what is open, then judge.
    drain_until = time.monotonic() + 180
    while time.monotonic() < drain_until:
        with engine.connect() as conn:
            open_tasks = conn.execute(
                text(f"SELECT count(*) FROM tasks WHERE {sql_in('state', OPEN_TASK_STATES)}")
            ).scalar()
        if not open_tasks:
            break
        time.sleep(2)
    with engine.connect() as conn:
        states = dict(conn.execute(text("SELECT state, count(*) FROM tasks GROUP BY state")).all())
        multi_end = conn.execute(
            text(
                "SELECT count(*) FROM (SELECT task_id FROM task_transitions "
                f"WHERE {sql_in('to_state', TERMINAL_TASK_STATES)} GROUP BY task_id "
                "HAVING count(*) > 1) x"
            )
        ).scalar()
    lost_rows, duplicated_rows, commits_per_task = 0, 0, {}
    for name in tables:
        t = catalog.load_table(name)
        ids = t.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist()
        lost_rows += len(set(range(written[name])) - set(ids))
        duplicated_rows += len(ids) - len(set(ids))
        for sn in t.snapshots():
            if sn.summary is not None and sn.summary.get(TASK_KEY):
                key = f"{name}:{sn.summary.get(TASK_KEY)}"
                commits_per_task[key] = commits_per_task.get(key, 0) + 1
    processes.stop(procs.values())
    stop_server(tmp / "pgserver")
    print(
        json.dumps(
            {
                "minutes": args.minutes,
                "tables": args.tables,
                "rows_written": sum(written.values()),
                "kills": kills,
                "failover_s": failovers,
                "task_states": states,
                "tasks_left_open": sum(states.get(s, 0) for s in OPEN_TASK_STATES),
                "tasks_with_more_than_one_terminal_state": multi_end,
                "writer_rows_lost": lost_rows,
                "writer_rows_duplicated": duplicated_rows,
                "max_commits_by_one_task": max(commits_per_task.values(), default=0),
                "logs": str(tmp),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
