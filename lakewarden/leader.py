"""Leader election on Postgres alone: one lease row, an epoch as fencing token.

Expiry is judged by the database clock, so schedulers whose clocks disagree
still agree on who leads. Every write a leader makes passes its `Fence`; the
write is refused once the lease has moved on (a newer epoch, another holder,
or simply expired), so a paused or partitioned old leader cannot act.

Row locks: a fenced transaction holds the lease row `FOR KEY SHARE`. The leader's own
renewal updates non-key columns only, which that lock does not block, so the leader's
work never holds its own renewal hostage. A takeover (any change of holder or epoch)
first locks the row `FOR UPDATE`, which waits for every fenced transaction still open:
a fenced write completes under a live lease or is refused, as before.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.orm import Session

from lakewarden.catalogs.regions import region_of_lease
from lakewarden.db.locks import DBLocks
from lakewarden.db.session import checked_on_checkout


@dataclass(frozen=True)
class Fence:
    lease: str
    holder: str
    epoch: int

    @property
    def region(self) -> str | None:
        """The region whose tasks this fence may move (None: not a region's lease)."""
        return region_of_lease(self.lease)


class FencedOut(RuntimeError):
    """The caller is no longer the leader; its write was refused."""


_ACQUIRE = text(
    """
    INSERT INTO leader_lease AS l (name, holder, epoch, acquired_at, renewed_at, expires_at)
    VALUES (:name, :me, 1, now(), now(), now() + make_interval(secs => :ttl))
    ON CONFLICT (name) DO UPDATE SET
        holder = EXCLUDED.holder,
        -- renewing our own live lease keeps the epoch; any takeover bumps it
        epoch = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > now()
                     THEN l.epoch ELSE l.epoch + 1 END,
        acquired_at = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > now()
                           THEN l.acquired_at ELSE now() END,
        renewed_at = now(),
        expires_at = now() + make_interval(secs => :ttl)
    WHERE l.holder = EXCLUDED.holder OR l.expires_at <= now()
    RETURNING epoch
    """
)


# Taking the lease from another holder, or our own after it lapsed, waits for the fenced
# transactions still open (they hold the row FOR KEY SHARE). Renewing our live lease
# matches no row here and so waits for nothing.
_LOCK_FOR_TAKEOVER = text(
    """
    SELECT 1 FROM leader_lease
    WHERE name = :name AND NOT (holder = :me AND expires_at > now())
    FOR UPDATE
    """
)


def acquire_or_renew(conn: Connection | Session, name: str, me: str, ttl_s: float) -> Fence | None:
    """Take a free/expired lease or renew ours, in the caller's transaction (whose now()
    both statements share). None: someone else leads."""
    params = {"name": name, "me": me, "ttl": ttl_s}
    conn.execute(_LOCK_FOR_TAKEOVER, params)
    epoch = conn.execute(_ACQUIRE, params).scalar()
    return Fence(name, me, int(epoch)) if epoch is not None else None


def lease_expires_in(conn: Connection | Session, name: str) -> float | None:
    """Seconds until the lease lapses, by the database clock (None: no lease yet)."""
    left = conn.execute(
        text("SELECT extract(epoch FROM expires_at - now()) FROM leader_lease WHERE name = :name"),
        {"name": name},
    ).scalar()
    return float(left) if left is not None else None


def lease_engine(engine: Engine, timeout_s: float) -> Engine:
    """Connections of the lease renewal's own, to `engine`'s database: a renewal never waits
    for a connection the leader's other work holds, and no statement of it waits longer
    than `timeout_s` (the next renewal tries again rather than hang past the lease)."""
    return _lease_engine(engine.url.render_as_string(hide_password=False), timeout_s)


@functools.cache
def _lease_engine(url: str, timeout_s: float) -> Engine:
    """One per database for the life of the process, as `db.session.engine_for`."""
    ms = max(1, int(timeout_s * 1000))
    return checked_on_checkout(
        create_engine(
            url,
            pool_size=1,
            max_overflow=2,
            pool_timeout=timeout_s,
            connect_args={"options": f"-c statement_timeout={ms} -c lock_timeout={ms}"},
        )
    )


def resign(conn: Connection | Session, fence: Fence) -> None:
    """Let a standby take over at once instead of waiting for the lease to lapse."""
    conn.execute(
        text(
            "UPDATE leader_lease SET expires_at = now() "
            "WHERE name = :name AND holder = :me AND epoch = :epoch"
        ),
        {"name": fence.lease, "me": fence.holder, "epoch": fence.epoch},
    )


def check_fence(session: Session, fence: Fence) -> None:
    """Hold the lease row (key-shared) for the rest of the transaction, or raise FencedOut.

    A takeover locks the row FOR UPDATE first and so waits for our transaction: a fenced
    write either completes under a live lease or is refused. Our own renewal does not
    wait (FOR KEY SHARE does not block an update of non-key columns); still, keep a
    fenced transaction short: a standby's takeover after we die waits for it too.
    """
    ok = session.execute(
        text(
            "SELECT 1 FROM leader_lease WHERE name = :name AND holder = :me "
            "AND epoch = :epoch AND expires_at > now() FOR KEY SHARE"
        ),
        {"name": fence.lease, "me": fence.holder, "epoch": fence.epoch},
    ).scalar()
    if not ok:
        raise FencedOut(f"{fence.holder} no longer holds lease {fence.lease!r} epoch {fence.epoch}")


@dataclass(frozen=True)
class LeaderStatus:
    holder: str
    epoch: int
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime
    live: bool


def leader_status(session: Session, name: str = DBLocks.SCHEDULER_LEASE) -> LeaderStatus | None:
    row = session.execute(
        text(
            "SELECT holder, epoch, acquired_at, renewed_at, expires_at, expires_at > now() "
            "FROM leader_lease WHERE name = :name"
        ),
        {"name": name},
    ).one_or_none()
    return LeaderStatus(*row) if row else None
