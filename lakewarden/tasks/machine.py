"""The task state machine, as data: the moves between `lakewarden.states.TaskState`s.
Every change goes through `repo.transition`.

pending ──claim──► planning ──► planned ──dispatch──► running ──► succeeded
   ▲                 │  │                    │           │
   └──(stale/retry)──┘  └──► skipped         │           ├──► failed (attempts spent)
   ▲                                         │           │
   └────────────────(retry after backoff)────┴───────────┘
any open state ──► cancelled
"""

from __future__ import annotations

from lakewarden.states import TERMINAL_TASK_STATES, TaskState

# Plain strings, for the API's query parameters and messages.
ALL_STATES: tuple[str, ...] = tuple(s.value for s in TaskState)
TERMINAL_STATES: tuple[str, ...] = tuple(s.value for s in TERMINAL_TASK_STATES)

_S = TaskState
ALLOWED: dict[str, frozenset[str]] = {
    _S.PENDING: frozenset({_S.PLANNING, _S.CANCELLED}),
    # back to pending: the planner went silent (reaper) or hit a transient error
    _S.PLANNING: frozenset({_S.PLANNED, _S.SKIPPED, _S.PENDING, _S.FAILED, _S.CANCELLED}),
    # back to pending: the plan went stale before it could run
    _S.PLANNED: frozenset({_S.RUNNING, _S.PENDING, _S.CANCELLED}),
    # back to pending: a failed attempt with attempts left is re-planned after backoff, or
    # the policy changed under the job; skipped: the job measured it must not act (held)
    _S.RUNNING: frozenset({_S.SUCCEEDED, _S.PENDING, _S.SKIPPED, _S.FAILED, _S.CANCELLED}),
    **{s: frozenset() for s in TERMINAL_TASK_STATES},
}


def can_transition(src: str, dst: str) -> bool:
    return dst in ALLOWED.get(src, frozenset())


def sources_of(dst: str) -> tuple[str, ...]:
    return tuple(s for s, targets in ALLOWED.items() if dst in targets)
