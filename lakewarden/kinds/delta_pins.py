"""The Delta versions readiness pins (issue 29), held against VACUUM.

A Delta table has no tags: a ready partition records the log version it was judged at
(`partition_readiness.snapshot_id`), and a reader pins it with `VERSION AS OF n`. Reading
version n needs every file n references, including those a later commit removed; VACUUM
deletes a removed file once its removal is older than its retention. So while a ready
partition's pin is kept (`readiness.tag_retention_days` from when it became ready), the
clean kind's VACUUM retains at least the hours since the first commit after the pinned
version: every file removed since is kept, and the version reads whole. Past that, the
pin lapses and VACUUM keeps only its own retention.

What no VACUUM setting holds: time travel also needs the log from a checkpoint at or
before n (Delta's `delta.logRetentionDuration`, 30 days by default, and whoever cleans the
log); a pin kept longer than that cannot be read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lakewarden.formats.delta.timeline import DeltaTimeline

CONTEXT_KEY = "ready_pins"


@dataclass(frozen=True)
class Hold:
    """The retention a VACUUM keeps for the oldest pinned version that needs one."""

    hours: float
    partition: str
    version: int
    until: str

    @property
    def reason(self) -> str:
        return (
            f"held to {self.hours:g} h for version {self.version}, which ready partition "
            f"{self.partition} is pinned at until {self.until} (readiness.tag_retention_days)"
        )


def hold(pins: list[dict[str, Any]], timeline: DeltaTimeline, now: datetime) -> Hold | None:
    """The hours a VACUUM must retain so that every pinned version reads whole: since the
    first commit after the oldest pinned version (whole hours, rounded up, plus one for
    the time the job takes to start). None: no pin needs a hold (the pinned version is
    the newest, so nothing was removed since)."""
    versions = set(timeline.versions())
    for pin in pins:  # oldest version first: the first that needs a hold needs the most
        after = int(pin["commit"]) + 1
        if after not in versions:
            continue  # nothing committed since (or its commit file is cleaned up)
        removed_since = timeline.commit(after, after - 1).at_ms
        age_h = (now.astimezone(UTC).timestamp() * 1000 - removed_since) / 3_600_000
        return Hold(math.ceil(max(age_h, 0)) + 1.0, pin["partition"], after - 1, pin["until"])
    return None
