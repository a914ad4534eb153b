"""The one benchmark harness: figures, repeats, the machine they ran on, the report.

A figure (B1..B9) is a function `run(ctx) -> Figure`. It measures its subject and its
baseline side by side in the same run, `ctx.repeats` times, and reports the ratio's
median and spread: on 2 shared cores absolute times mean little, ratios measured
together mean more. Every run records the machine's cores and load before and after.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakewarden.runtime import Runtime


@dataclass(frozen=True)
class Stat:
    """Median and spread of repeated measurements."""

    median: float
    low: float
    high: float
    n: int

    @property
    def spread(self) -> float:
        """(high - low) / median: 0.1 means the repeats were within 10% of each other."""
        return (self.high - self.low) / self.median if self.median else 0.0

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        if not values:
            raise ValueError("no measurements")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def as_json(self) -> dict[str, float]:
        return {
            "median": round(self.median, 4),
            "low": round(self.low, 4),
            "high": round(self.high, 4),
            "spread": round(self.spread, 4),
            "n": self.n,
        }


@dataclass
class Figure:
    """One row of the report. `ratio` is the headline (what the goal is stated in);
    `values` holds every other measurement (medians and spreads, counts, bytes)."""

    id: str
    measure: str
    compared_with: str
    goal: str
    ratio: Stat | None = None
    ratio_label: str = ""  # what the ratio is, e.g. "after/before time"
    goal_met: bool | None = None  # None: the figure only reports
    values: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0  # how long the figure took to measure
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ratio"] = self.ratio.as_json() if self.ratio else None
        out["values"] = _jsonable(self.values)
        return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, Stat):
        return value.as_json()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float):
        return round(value, 4)
    return value


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds `fn` took (monotonic clock), and what it returned."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def jvm_cpu_seconds(spark: SparkSession) -> float:
    """CPU seconds the Spark JVM (a local master's driver and executors) has used so far:
    on a loaded shared machine a job's CPU moves far less between repeats than its wall
    time. Linux only (its /proc)."""
    jvm: Any = spark._jvm
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def repeat(times: int, fn: Callable[[], Any]) -> Stat:
    """`fn` timed `times` times."""
    return Stat.of([timed(fn)[0] for _ in range(times)])


def ratios(times: int, subject: Callable[[], Any], baseline: Callable[[], Any]) -> dict[str, Stat]:
    """subject and baseline timed alternately (so drifting load hits both alike); the
    ratio is taken per pair, baseline / subject (>1: the subject is faster)."""
    pairs = [(timed(baseline)[0], timed(subject)[0]) for _ in range(times)]
    return {
        "baseline_s": Stat.of([b for b, _ in pairs]),
        "subject_s": Stat.of([s for _, s in pairs]),
        "speedup": Stat.of([b / s if s else 0.0 for b, s in pairs]),
    }


@dataclass(frozen=True)
class Sizes:
    """How big each figure's data is. `smoke` completes in a minute or two; `full` is
    what docs/performance.md's table reports."""

    name: str
    repeats: int
    # B1/B4 (and B9): the small-file table
    appends: int
    files_per_append: int
    rows_per_file: int
    # B9: the peers' table (the issue's: 300 files in 10 appends, 1.92 M rows)
    peer_appends: int
    peer_files_per_append: int
    peer_rows_per_file: int
    # B2: the table Z-ordered
    layout_rows: int
    layout_files: int
    # B3: rounds of small appends
    rounds: int
    round_files: int
    round_rows_per_file: int
    # B5: commits timed per path; B7: events posted; B8: fleet sizes listed
    commits: int
    events: int
    fleet: tuple[int, ...]
    # B27: the Delta table Z-ordered and compacted (rows in small files)
    delta_rows: int
    delta_files: int


SMOKE = Sizes(
    name="smoke",
    repeats=1,  # checks every figure's path once (B6 and B13 start a JVM per repeat)
    appends=2,
    files_per_append=5,
    rows_per_file=2_000,
    peer_appends=2,
    peer_files_per_append=5,
    peer_rows_per_file=2_000,
    layout_rows=40_000,
    layout_files=8,
    rounds=3,
    round_files=3,
    round_rows_per_file=500,
    commits=4,
    events=200,
    fleet=(200, 1_000),
    delta_rows=40_000,
    delta_files=8,
)
# ~1 GB in 3,000 files for B1/B4; the whole run fits in ~20-30 min on 2 cores
FULL = Sizes(
    name="full",
    repeats=3,
    appends=20,
    files_per_append=150,
    rows_per_file=10_000,
    peer_appends=10,
    peer_files_per_append=30,
    peer_rows_per_file=6_400,
    layout_rows=4_000_000,
    layout_files=200,
    rounds=20,
    round_files=20,
    round_rows_per_file=5_000,
    commits=30,
    events=1_000,
    fleet=(1_000, 10_000, 100_000),
    delta_rows=1_500_000,
    delta_files=300,
)


@dataclass
class Context:
    """What every figure gets: the sizes, a runtime on the benchmark's own database and
    warehouse, and one warm Spark session shared by the Spark figures."""

    sizes: Sizes
    rt: Runtime
    work_dir: Path
    _spark: SparkSession | None = None
    # What several figures measure alike, kept for the next (`benchmarks.cluster.local_rounds`)
    shared: dict[str, Any] = field(default_factory=dict)

    @property
    def repeats(self) -> int:
        return self.sizes.repeats

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from lakewarden.spark.session import build_session

            self._spark = build_session(self.rt.settings, self.rt.db_url, "lakewarden-bench")
        return self._spark

    def stop(self) -> None:
        if self._spark is not None:
            self._spark.stop()
            self._spark = None


def machine() -> dict[str, Any]:
    """Where and when: the numbers mean nothing without it."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "cores": os.cpu_count(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": commit or None,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


@contextmanager
def measuring(figure_id: str, measure: str, compared_with: str, goal: str) -> Iterator[Figure]:
    """A figure being measured: its wall time is recorded; an error is recorded on it
    (the other figures still run) instead of ending the run, and its traceback printed on
    stderr (the JSON keeps the message only: where it was raised is in the run's log)."""
    fig = Figure(figure_id, measure, compared_with, goal)
    start = time.perf_counter()
    try:
        yield fig
    except Exception as exc:
        fig.error = f"{type(exc).__name__}: {exc}"[:2000]
        print(f"{figure_id} failed:", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
    finally:
        fig.seconds = round(time.perf_counter() - start, 1)


def write_json(path: Path, sizes: Sizes, before: dict[str, Any], figures: list[Figure]) -> None:
    after = machine()
    doc = {
        "sizes": asdict(sizes),
        "machine": {**before, "load_avg_after": after["load_avg"], "finished": after["at"]},
        "figures": [f.as_json() for f in figures],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
