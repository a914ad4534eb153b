"""Old Spark log files are pruned; live ones (named in `keep`) and other files never are."""

from __future__ import annotations

import os
from pathlib import Path

from lakewarden.spark.logfiles import prune

DAY = 86_400.0


def _file(directory: Path, name: str, age_days: float, now: float) -> Path:
    path = directory / name
    path.write_text("x")
    os.utime(path, (now - age_days * DAY, now - age_days * DAY))
    return path


def test_old_logs_go_live_and_recent_ones_and_other_files_stay(tmp_path: Path) -> None:
    now = 1_800_000_000.0
    logs, apps = tmp_path / "spark" / "logs", tmp_path / "applications"
    logs.mkdir(parents=True)
    apps.mkdir()
    old_driver = _file(logs, "local-1.log", 9, now)
    old_rolled = _file(logs, "local-1.log.1", 9, now)
    live_driver = _file(logs, "local-2.log", 30, now)  # the live session, idle for long
    live_rolled = _file(logs, "local-2.log.1", 30, now)
    recent_app = _file(apps, "lakewarden-task-3-1.log", 1, now)
    old_app = _file(apps, "lakewarden-task-4-1.log", 8, now)
    running_app = _file(apps, "lakewarden-task-5-2.log", 8, now)
    not_a_log = _file(logs, "notes.txt", 90, now)
    (logs / "sub.log").mkdir()  # a directory, whatever its name

    removed = prune(
        (logs, apps, tmp_path / "missing"),
        7 * DAY,
        {"local-2.log", "lakewarden-task-5-2.log"},
        now=now,
    )

    assert sorted(removed) == sorted([old_driver, old_rolled, old_app])
    for kept in (live_driver, live_rolled, recent_app, running_app, not_a_log):
        assert kept.exists()
    assert not old_driver.exists() and not old_app.exists()
