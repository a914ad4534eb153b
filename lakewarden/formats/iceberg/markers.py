"""How lakewarden's mark on a commit is spelled in an Iceberg snapshot summary.

The scheduler runs a job with its task id and attempt (`lakewarden.spark.commits`); each
commit the job makes carries them as summary properties. `carries` is the one test of
"this summary carries our mark" (the validation, the finders, TTL and recovery all ask it).
A validated rewrite commits to a staging branch first (`lakewarden.spark.staging`), named
here so that the finders can tell it from the table's own branches.
"""

from __future__ import annotations

from collections.abc import Mapping

from lakewarden.formats.base import ATTEMPT_KEY as ATTEMPT_KEY  # the same for every format
from lakewarden.formats.base import TASK_KEY as TASK_KEY
from lakewarden.formats.base import JobMarker

# On the commit that reverted a task's rewrite after a failed validation (before rewrites
# were staged: such commits stay in older tables' histories, and the finders honour them).
REVERT_KEY = "lakewarden.reverts-task"
# On a validated rewrite re-applied to its target after a writer committed there: the staged
# snapshot that was validated (lakewarden.spark.staging).
PUBLISHED_FROM_KEY = "lakewarden.published-from"
# A rewrite's staging branch: `lakewarden-stage-<task id>-<attempt>`.
STAGE_PREFIX = "lakewarden-stage-"


def stage_branch(marker: JobMarker) -> str:
    """The staging branch of a job with `marker`."""
    return f"{STAGE_PREFIX}{marker.task_id}-{marker.attempt or 0}"


def is_stage(branch: str) -> bool:
    """Whether `branch` is a rewrite's staging branch: lakewarden's, in flight, holding
    commits that no reader was meant to see (never a success to recover)."""
    return branch.startswith(STAGE_PREFIX)


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
