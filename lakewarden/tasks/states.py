"""The task state machine, as data. Every change goes through `repo.transition`.

pending ──claim──► planning ──► planned ──dispatch──► running ──► succeeded
   ▲                 │  │                    │           │
   └──(stale/retry)──┘  └──► skipped         │           ├──► failed (attempts spent)
   ▲                                         │           │
   └────────────────(retry after backoff)────┴───────────┘
any open state ──► cancelled
"""

from __future__ import annotations

from lakewarden.db.models import OPEN_STATES

TERMINAL_STATES = ("succeeded", "skipped", "failed", "cancelled")
ALL_STATES = (*OPEN_STATES, *TERMINAL_STATES)

ALLOWED: dict[str, frozenset[str]] = {
    "pending": frozenset({"planning", "cancelled"}),
    # back to pending: the planner went silent (reaper) or hit a transient error
    "planning": frozenset({"planned", "skipped", "pending", "failed", "cancelled"}),
    # back to pending: the plan went stale before it could run
    "planned": frozenset({"running", "pending", "cancelled"}),
    # back to pending: a failed attempt with attempts left is re-planned after backoff, or
    # the policy changed under the job; skipped: the job measured it must not act (held)
    "running": frozenset({"succeeded", "pending", "skipped", "failed", "cancelled"}),
    "succeeded": frozenset(),
    "skipped": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}


def can_transition(src: str, dst: str) -> bool:
    return dst in ALLOWED.get(src, frozenset())


def sources_of(dst: str) -> tuple[str, ...]:
    return tuple(s for s, targets in ALLOWED.items() if dst in targets)
