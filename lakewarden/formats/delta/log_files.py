"""What a Delta table's `_delta_log/` holds beyond its versions: its files and their times
(which are past `delta.logRetentionDuration` and may go), and the table's liquid clustering
columns (the `delta.clustering` domain metadata a `CLUSTER BY` writes).

Delta removes old log files only when it writes a checkpoint, and then only those before
the newest checkpoint that is itself older than the log retention (so every version within
the retention can still be read). A table written rarely, or by writers that do not
checkpoint, keeps its whole log. delta-rs' `cleanup_metadata()` applies the same rule
(checked against delta-rs 1.6.6: a log file goes only when it is older than the retention
and before a checkpoint as old); it does not read `delta.enableExpiredLogCleanup`, so the
planner does. Python only, no JVM.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyarrow import fs as pafs

if TYPE_CHECKING:
    from lakewarden.formats.delta.timeline import DeltaTimeline

LOG_RETENTION = "delta.logRetentionDuration"
DEFAULT_LOG_RETENTION_HOURS = 720.0  # Delta's default: interval 30 days
EXPIRED_LOG_CLEANUP = "delta.enableExpiredLogCleanup"
CLUSTERING_DOMAIN = "delta.clustering"
_INTERVAL = re.compile(r"^\s*interval\s+(\d+(?:\.\d+)?)\s+(\w+?)s?\s*$", re.IGNORECASE)
_HOURS = {"second": 1 / 3600, "minute": 1 / 60, "hour": 1, "day": 24, "week": 168}
# A log file's version leads its name: commits, checkpoints (single, multi-part, v2), the
# checksums Spark writes beside commits (`.crc`), delta-rs' compacted logs.
_VERSIONED = re.compile(r"^(?P<version>\d{20})\.(?P<rest>.+)$")


def interval_hours(value: Any, default: float) -> float:
    """A Delta table property's interval (`interval 7 days`) in hours, else `default`."""
    match = _INTERVAL.match(str(value or ""))
    if match is None or match.group(2).lower() not in _HOURS:
        return default
    return float(match.group(1)) * _HOURS[match.group(2).lower()]


@dataclass
class LogFiles:
    """The log's versioned files: (version, name, bytes, written at ms), oldest first."""

    retention_hours: float  # the table's `delta.logRetentionDuration`
    cleanup_enabled: bool  # the table's `delta.enableExpiredLogCleanup` (true by default)
    files: list[tuple[int, str, int, int]] = field(default_factory=list)

    def cutoff_ms(self, now_ms: int) -> int:
        return now_ms - int(self.retention_hours * 3_600_000)

    def checkpoints(self) -> dict[int, int]:
        """Checkpoint version -> when it was written (its newest part's time, ms)."""
        out: dict[int, int] = {}
        for version, name, _, at in self.files:
            if ".checkpoint" in name:
                out[version] = max(at, out.get(version, 0))
        return out

    def commits(self) -> list[tuple[int, int]]:
        return [(v, at) for v, name, _, at in self.files if name.endswith(f"{v:020d}.json")]

    def removable(self, now_ms: int) -> list[str]:
        """The files a cleanup removes now: those before the newest checkpoint written
        longer ago than the retention, themselves older than it (Delta's rule)."""
        cutoff = self.cutoff_ms(now_ms)
        old = [v for v, at in self.checkpoints().items() if at <= cutoff]
        if not old:
            return []
        below = max(old)
        return [name for v, name, _, at in self.files if v < below and at <= cutoff]

    def checkpoint_needed(self, now_ms: int, head: int) -> list[int]:
        """Commits older than the retention that no checkpoint after them will ever let go
        (none was written at or after their version): a checkpoint at the head is due, so
        that a later cleanup can remove them once it is itself that old."""
        cutoff = self.cutoff_ms(now_ms)
        newest = max(self.checkpoints(), default=-1)
        return [v for v, at in self.commits() if at <= cutoff and newest <= v < head]

    def oldest_commit_age_s(self, now_ms: int) -> float | None:
        commits = self.commits()
        return max(0.0, (now_ms - commits[0][1]) / 1000) if commits else None

    def summary(self, now_ms: int, head: int | None = None) -> dict[str, Any]:
        newest = max((v for v, *_ in self.files), default=None)
        at = head if head is not None else (newest if newest is not None else 0)
        return {
            "log_files": len(self.files),
            "log_bytes": sum(size for _, _, size, _ in self.files),
            "oldest_commit_age_s": self.oldest_commit_age_s(now_ms),
            "log_retention_hours": self.retention_hours,
            "expired_log_cleanup": self.cleanup_enabled,
            "removable_log_files": len(self.removable(now_ms)),
            "commits_waiting_for_a_checkpoint": len(self.checkpoint_needed(now_ms, at)),
        }


def list_log(timeline: DeltaTimeline, configuration: dict[str, str]) -> LogFiles:
    """The log's versioned files as listed now (hidden files, such as the checksums a
    local Hadoop file system writes, are not the table's and are left out)."""
    found = LogFiles(
        retention_hours=interval_hours(
            configuration.get(LOG_RETENTION), DEFAULT_LOG_RETENTION_HOURS
        ),
        cleanup_enabled=str(configuration.get(EXPIRED_LOG_CLEANUP, "true")).strip().lower()
        != "false",
    )
    selector = pafs.FileSelector(timeline.log, allow_not_found=True)
    for info in timeline.fs.get_file_info(selector):
        match = _VERSIONED.match(info.base_name)
        if info.type != pafs.FileType.File or match is None:
            continue
        at = (info.mtime_ns or 0) // 10**6
        found.files.append((int(match["version"]), info.base_name, int(info.size or 0), at))
    found.files.sort()
    return found


def _columns(config: str) -> list[str]:
    """`clusteringColumns` of a `delta.clustering` domain's configuration: each a path of
    names (`[["a"], ["b", "c"]]`), given dotted."""
    paths = json.loads(config or "{}").get("clusteringColumns") or []
    return [".".join(path) for path in paths]


def clustering_columns(timeline: DeltaTimeline, checkpoint: int | None) -> list[str]:
    """The table's liquid clustering columns: the newest `delta.clustering` domain metadata,
    from the commits after the last checkpoint, else from that checkpoint; [] when there is
    none or it was removed."""
    after = checkpoint if checkpoint is not None else -1
    for version in reversed([v for v in timeline.versions() if v > after]):
        for action in timeline.read_actions(version):
            domain = action.get("domainMetadata")
            if domain and domain.get("domain") == CLUSTERING_DOMAIN:
                return [] if domain.get("removed") else _columns(domain.get("configuration"))
    if checkpoint is None:
        return []
    import pyarrow.parquet as pq

    selector = pafs.FileSelector(timeline.log)
    for info in timeline.fs.get_file_info(selector):
        if not (
            info.base_name.startswith(f"{checkpoint:020d}.checkpoint")
            and info.base_name.endswith(".parquet")
        ):
            continue
        with timeline.fs.open_input_file(info.path) as f:
            schema = pq.read_schema(f)
            if "domainMetadata" not in schema.names:
                continue
            rows = pq.read_table(f, columns=["domainMetadata"]).column(0).to_pylist()
        for domain in rows:
            if domain and domain.get("domain") == CLUSTERING_DOMAIN and not domain.get("removed"):
                return _columns(domain.get("configuration"))
    return []


def clean_log(timeline: DeltaTimeline, *, checkpoint: bool) -> dict[str, Any]:
    """Remove the log files past the table's log retention as Delta would (delta-rs'
    `cleanup_metadata()`), after writing a checkpoint at the head when `checkpoint`
    (`create_checkpoint()`); what it did. Refuses a table whose
    `delta.enableExpiredLogCleanup` is false (read again here: it may have changed since
    the plan)."""
    table = timeline.open_table()
    config = dict(table.metadata().configuration or {})
    before = list_log(timeline, config)
    if not before.cleanup_enabled:
        raise ValueError(f"{timeline.path}: {EXPIRED_LOG_CLEANUP} is false: its log is kept")
    done: dict[str, Any] = {"log_files_before": len(before.files)}
    if checkpoint:
        table.create_checkpoint()
        done["checkpoint_version"] = table.version()
    table.cleanup_metadata()
    after = list_log(timeline, config)
    gone = {f[1] for f in before.files} - {f[1] for f in after.files}
    done.update(log_files_after=len(after.files), log_files_removed=len(gone))
    done["oldest_version_in_log"] = min((f[0] for f in after.files), default=None)
    return done
