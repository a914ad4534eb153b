"""How a job can end other than by committing. The runners raise these and the scheduler
maps each to a task state. They live here, below `kinds/` and `spark/`, so that any layer
can raise them without importing upwards."""

from __future__ import annotations


class PlanRejected(ValueError):
    """A plan that is not safe to execute: the task fails, never retried."""


class VerificationFailed(PlanRejected):
    """The job committed, but what it did differs from what it measured right before: the
    task fails for good (a critical alert) and the message says how to undo it."""


class JobHeld(RuntimeError):
    """The job measured, right before acting, that it must not act (a TTL that would remove
    more than the policy allows): the task is skipped with a reason starting "held:"."""

    def __init__(self, reason: str, metrics: dict[str, object] | None = None) -> None:
        super().__init__(reason if reason.startswith("held:") else f"held: {reason}")
        self.metrics = metrics or {}


class PolicyChanged(RuntimeError):
    """The current policy no longer allows what the task was planned for: the task is
    cancelled (the kind is now disabled) or re-planned (its settings changed)."""

    def __init__(self, reason: str, *, cancel: bool) -> None:
        super().__init__(reason)
        self.cancel = cancel


class RewriteFailed(RuntimeError):
    """Every file group of a rewrite failed and none committed (with partial progress,
    Iceberg only logs them): the attempt fails and is retried like any failure. `metrics`:
    what the rewrite measured, failed groups and files among them (the run records them)."""

    def __init__(self, reason: str, metrics: dict[str, object]) -> None:
        super().__init__(reason)
        self.metrics = metrics


class RewriteMismatch(VerificationFailed):
    """A rewrite committed to its staging branch, and a partition it touched no longer holds
    the same rows there (count or checksum: `lakewarden.spark.validation`). The rewrite is
    never published (the staging branch is dropped); the task fails for good with a critical
    alert: running it again would only rewrite the same way. `metrics`: the rewrite's, with
    "validation"."""

    def __init__(self, reason: str, metrics: dict[str, object]) -> None:
        super().__init__(reason)
        self.metrics = metrics
