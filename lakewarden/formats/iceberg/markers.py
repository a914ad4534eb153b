"""How lakewarden's mark on a commit is spelled in an Iceberg snapshot summary.

The scheduler runs a job with its task id and attempt (`lakewarden.spark.commits`); each
commit the job makes carries them as summary properties. `carries` is the one test of
"this summary carries our mark" (the validation, the finders, TTL and recovery all ask it).
"""

from __future__ import annotations

from collections.abc import Mapping

from lakewarden.formats.base import JobMarker

TASK_KEY = "lakewarden.task-id"
ATTEMPT_KEY = "lakewarden.attempt"
# On the commit that reverts a task's rewrite after a failed validation (spark.validation).
REVERT_KEY = "lakewarden.reverts-task"


def properties(marker: JobMarker) -> dict[str, str]:
    """The summary properties a job with `marker` stamps on its commits."""
    out = {TASK_KEY: str(marker.task_id)}
    if marker.attempt is not None:
        out[ATTEMPT_KEY] = str(marker.attempt)
    return out


def carries(summary: Mapping[str, str] | None, props: Mapping[str, str]) -> bool:
    """Whether `summary` holds every one of `props` (no properties mark nothing)."""
    if not props or summary is None:
        return False
    return all(summary.get(key) == value for key, value in props.items())
