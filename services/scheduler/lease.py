"""The scheduler's lease round: renew (or take) its region's leadership lease on a ticker
of its own, and say whether this process leads its region now (`leading`, with a margin
before the database's expiry). Every write that depends on leading carries the fence it
returns. A region leader also renews (or takes, when it lapsed) the fleet-wide duties'
lease (`leading_fleet`: lakewarden.catalogs.regions)."""

from __future__ import annotations

import logging
import time

from sqlalchemy import Engine

from lakewarden.catalogs.regions import lease_name
from lakewarden.db.locks import DBLocks
from lakewarden.db.session import round_connection
from lakewarden.leader import Fence, acquire_or_renew, lease_engine, lease_expires_in
from lakewarden.runtime import Runtime

log = logging.getLogger(__name__)


class LeaseRounds:
    """The lease round and the leadership it keeps (state set by `Scheduler.__init__`)."""

    rt: Runtime
    fence: Fence | None
    fleet_fence: Fence | None
    _valid_until: float  # monotonic deadline of our last successful renewal
    _fleet_valid_until: float
    _next_try: float | None  # a standby's next try: when the lease lapses

    @property
    def _lease_db(self) -> Engine:
        return lease_engine(self.rt.engine, self.rt.settings.lease_renew_interval_s)

    @property
    def lease(self) -> str:
        """This scheduler's region's lease."""
        return lease_name(self.rt.settings.region)

    def renew(self) -> None:
        """Renew (or take) the lease, and nothing else: on the lease ticker's thread and
        connections of its own, so no other work of this process delays it (the fenced
        work does not block it in the database either: `lakewarden.leader`)."""
        ttl = self.rt.settings.lease_ttl_s
        started = time.monotonic()
        with round_connection(self._lease_db) as conn:
            fence = acquire_or_renew(conn, self.lease, self.rt.process_id, ttl)
            # A standby tries again the moment the leader's lease lapses, not up to a
            # renewal interval later: failover is the lease's TTL, not TTL + interval.
            left = None if fence else lease_expires_in(conn, self.lease)
        self._next_try = None if left is None else started + max(0.0, left) + 0.05
        if fence is not None:
            if self.fence is None or fence.epoch != self.fence.epoch:
                log.info(
                    "%s leads the scheduler of region %s (epoch %d)",
                    self.rt.process_id,
                    self.rt.settings.region,
                    fence.epoch,
                )
            # Our own idea of validity ends a margin before the database's.
            self._valid_until = started + ttl * 0.8
        elif self.fence is not None:
            log.warning("%s lost scheduler leadership", self.rt.process_id)
        self.fence = fence

    def renew_fleet(self) -> None:
        """Renew (or take) the fleet-wide duties' lease, on a ticker of its own (a slow one
        never delays the region's renewal). Only a region's leader holds it: another
        region's leader takes it at its next try once it lapses (TTL + an interval)."""
        ttl = self.rt.settings.lease_ttl_s
        started = time.monotonic()
        fleet = None
        if self.leading() is not None:
            with round_connection(self._lease_db) as conn:
                fleet = acquire_or_renew(conn, DBLocks.FLEET_LEASE, self.rt.process_id, ttl)
        if fleet is not None:
            if self.fleet_fence is None or fleet.epoch != self.fleet_fence.epoch:
                log.info("%s runs the fleet-wide duties (epoch %d)", fleet.holder, fleet.epoch)
            self._fleet_valid_until = started + ttl * 0.8
        self.fleet_fence = fleet

    def _lease_due_in(self) -> float | None:
        return None if self._next_try is None else self._next_try - time.monotonic()

    def leading(self) -> Fence | None:
        if self.fence is not None and time.monotonic() < self._valid_until:
            return self.fence
        return None

    def leading_fleet(self) -> Fence | None:
        """The fence of the fleet-wide duties, while this process holds it."""
        if self.fleet_fence is not None and time.monotonic() < self._fleet_valid_until:
            return self.fleet_fence
        return None
