"""The leader's capacity round (settings `pool_capacity`, lakewarden.capacity): each
`capacity_interval_s`, decide every elastic pool's capacity under the fence, and keep the
result for dispatch, whose only hook is `Capacity.limits()` as its pool limits."""

from __future__ import annotations

import logging
import threading

from lakewarden import capacity
from lakewarden.db.session import transaction
from lakewarden.leader import Fence, FencedOut
from lakewarden.runtime import Runtime

log = logging.getLogger(__name__)


class Capacity:
    """The elastic pools' capacity as this leader last decided it."""

    def __init__(self, rt: Runtime, wake: threading.Event) -> None:
        self.rt = rt
        self.wake = wake  # set when a pool grew: dispatch looks again at once
        self.current: dict[str, int] = {}

    def limits(self) -> dict[str, int]:
        """The jobs each pool may run at once now (dispatch's `pool_limits`)."""
        return capacity.limits(self.rt.settings, self.current)

    def round(self, fence: Fence | None) -> None:
        if not self.rt.settings.pool_capacity:
            return
        if fence is None:
            self.current = {}  # a standby: the next leader reads the pools' rows
            return
        try:
            with transaction(self.rt.engine) as s:
                decided = capacity.apply(s, fence, self.rt.settings)
        except FencedOut as exc:
            log.warning("capacity round refused: %s", exc)
            return
        grew = any(d.after > self.current.get(p, d.before) for p, d in decided.items())
        self.current = {pool: d.after for pool, d in decided.items()}
        if grew:
            self.wake.set()
