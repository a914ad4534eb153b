"""The one periodic runner (lakewarden.process.Ticker): runs at its interval, never two runs
at once, survives an error, stops on its event, and can wait an interval before starting."""

from __future__ import annotations

import itertools
import threading
import time

from lakewarden.process import Ticker


def test_runs_repeatedly_without_overlap_survives_errors_and_stops() -> None:
    stop, running, runs, overlaps = threading.Event(), threading.Lock(), [0], [0]

    def job() -> None:
        if not running.acquire(blocking=False):
            overlaps[0] += 1
            return
        try:
            runs[0] += 1
            time.sleep(0.02)  # longer than the interval
            if runs[0] == 2:
                raise RuntimeError("logged, not fatal")
        finally:
            running.release()

    ticker = Ticker("job", 0.005, job, stop)
    ticker.start()
    deadline = time.monotonic() + 5
    while runs[0] < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    ticker.join(2)
    assert runs[0] >= 4 and overlaps[0] == 0 and not ticker.is_alive()


def test_wait_first_waits_one_interval_before_the_first_run() -> None:
    stop, ran = threading.Event(), threading.Event()
    Ticker("later", 0.3, ran.set, stop, wait_first=True).start()
    assert not ran.wait(0.15)
    assert ran.wait(2)
    at_once = threading.Event()
    Ticker("now", 60, at_once.set, stop).start()
    assert at_once.wait(1)
    stop.set()


def test_fixed_rate_counts_the_interval_from_one_start_to_the_next() -> None:
    """The lease renewal's ticker: a slow renewal does not push the next one back."""

    def start_gaps(fixed_rate: bool) -> list[float]:
        stop, starts = threading.Event(), []

        def slow() -> None:
            starts.append(time.monotonic())
            if len(starts) >= 3:
                stop.set()
            time.sleep(0.3)

        ticker = Ticker("job", 0.4, slow, stop, fixed_rate=fixed_rate)
        ticker.start()
        ticker.join(5)
        return [b - a for a, b in itertools.pairwise(starts)]

    assert all(gap < 0.6 for gap in start_gaps(fixed_rate=True))  # 0.4: start to start
    assert all(gap >= 0.65 for gap in start_gaps(fixed_rate=False))  # 0.3 run + 0.4 wait


def test_due_in_brings_the_next_run_forward_of_a_long_interval() -> None:
    """A standby asks to try the lease when it lapses, not a whole interval later."""
    stop, runs = threading.Event(), [0]

    def job() -> None:
        runs[0] += 1

    ticker = Ticker("lease", 300.0, job, stop, due_in=lambda: 0.01 if runs[0] < 3 else None)
    ticker.start()
    deadline = time.monotonic() + 10
    while runs[0] < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    ticker.join(2)
    assert runs[0] == 3  # the interval alone (300 s) would have allowed one run
