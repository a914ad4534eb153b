"""Why lakewarden's periodic work runs on `lakewarden.process.Ticker`, not APScheduler: a
probe, kept so the decision can be checked again on a new APScheduler release.

A sweep whose run outlasts its interval (0.8 s runs every 0.5 s) under APScheduler's
background scheduler (one instance per job, coalescing: the set-up the design named)
and under a fixed-delay runner, which is what `Ticker` does for sweeps. Printed: the gaps
between one run's end and the next run's start. APScheduler's interval trigger is fixed
rate, so a slow sweep runs again almost at once (back to back: a loaded database gets no
breather); `Ticker` waits the whole interval after a slow run, and renews the lease at a
fixed rate where that is what is wanted.

    python -m venv /tmp/aps && /tmp/aps/bin/pip install apscheduler==3.11.3
    /tmp/aps/bin/python scripts/probe_periodic_runner.py
"""

from __future__ import annotations

import threading
import time

from apscheduler.schedulers.background import BackgroundScheduler

INTERVAL_S, RUN_S, RUNS = 0.5, 0.8, 8


def _gaps(starts: list[float], ends: list[float]) -> list[float]:
    return [round(start - end, 2) for end, start in zip(ends, starts[1:], strict=False)]


def apscheduler_gaps() -> list[float]:
    starts: list[float] = []
    ends: list[float] = []
    done = threading.Event()

    def sweep() -> None:
        starts.append(time.monotonic())
        time.sleep(RUN_S)
        ends.append(time.monotonic())
        if len(ends) >= RUNS:
            done.set()

    scheduler = BackgroundScheduler()
    scheduler.add_job(
        sweep,
        "interval",
        seconds=INTERVAL_S,
        max_instances=1,
        coalesce=True,
        misfire_grace_time=None,
    )
    scheduler.start()
    done.wait(30)
    scheduler.shutdown(wait=False)
    return _gaps(starts, ends)


def fixed_delay_gaps() -> list[float]:
    starts: list[float] = []
    ends: list[float] = []
    for _ in range(RUNS):
        starts.append(time.monotonic())
        time.sleep(RUN_S)
        ends.append(time.monotonic())
        time.sleep(INTERVAL_S)
    return _gaps(starts, ends)


if __name__ == "__main__":
    print(f"a {RUN_S} s sweep every {INTERVAL_S} s; gaps between a run's end and the next")
    print("APScheduler 3 (interval, max_instances=1, coalesce):", apscheduler_gaps())
    print("fixed delay (lakewarden.process.Ticker):          ", fixed_delay_gaps())
