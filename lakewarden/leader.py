"""Leader election on Postgres alone: one lease row, an epoch as fencing token.

Expiry is judged by the database clock, so schedulers whose clocks disagree
still agree on who leads. Every write a leader makes passes its `Fence`; the
write is refused once the lease has moved on (a newer epoch, another holder,
or simply expired), so a paused or partitioned old leader cannot act.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from lakewarden.db.locks import DBLocks


@dataclass(frozen=True)
class Fence:
    lease: str
    holder: str
    epoch: int


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


def acquire_or_renew(conn: Connection | Session, name: str, me: str, ttl_s: float) -> Fence | None:
    """One statement: take a free/expired lease or renew ours. None: someone else leads."""
    epoch = conn.execute(_ACQUIRE, {"name": name, "me": me, "ttl": ttl_s}).scalar()
    return Fence(name, me, int(epoch)) if epoch is not None else None


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
    """Hold the lease row (shared) for the rest of the transaction, or raise FencedOut.

    A takeover must update the row and so waits for our transaction: a fenced
    write either completes under a live lease or is refused.
    """
    ok = session.execute(
        text(
            "SELECT 1 FROM leader_lease WHERE name = :name AND holder = :me "
            "AND epoch = :epoch AND expires_at > now() FOR SHARE"
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
