"""The change-request rate limit per credential, shared by every API replica through
Postgres (`rate_counts`, migration 0017): N replicas allow the rate, not N times it.

A sliding window over two fixed one-minute windows: a call is allowed while the calls of
the current minute plus the previous minute's, weighted by how much of it still lies in
the last 60 seconds, stay within the limit. One statement per change request (about
0.5 ms on a local Postgres), committed at once on its own connection (in the request's
transaction it would hold the counter row locked until the route returned, queueing a
credential's calls across replicas): an `INSERT … ON CONFLICT DO UPDATE … RETURNING` of
the current minute's row, reading the previous minute's beside it. From a pool of its
own: the request's session already holds a connection of the main pool, and waiting for
a second one there could last until every connection is held by a request waiting here.

Calls refused count too (a client retrying in a loop stays refused). The first call of a
minute drops the rows older than two minutes, skipping any another replica holds.
Postgres' clock is the one clock of every replica.
"""

from __future__ import annotations

import logging
import math

from sqlalchemy import Engine, create_engine, text

log = logging.getLogger(__name__)

WINDOW_S = 60.0

_COUNT = text(
    """
    WITH current AS (
        INSERT INTO rate_counts (key, window_start, count)
        VALUES (:key, date_trunc('minute', now()), 1)
        ON CONFLICT (key, window_start) DO UPDATE SET count = rate_counts.count + 1
        RETURNING count, window_start
    )
    SELECT current.count,
           coalesce((SELECT p.count FROM rate_counts p
                     WHERE p.key = :key
                       AND p.window_start = current.window_start - interval '1 minute'), 0),
           extract(epoch FROM now() - current.window_start)
    FROM current
    """
)

_DROP_EXPIRED = text(
    """
    DELETE FROM rate_counts WHERE (key, window_start) IN (
        SELECT key, window_start FROM rate_counts
        WHERE window_start < date_trunc('minute', now()) - interval '1 minute'
        FOR UPDATE SKIP LOCKED
    )
    """
)


class RateLimiter:
    """`per_minute` change requests per credential (`key`) over any 60 seconds, counted in
    the database every replica shares."""

    def __init__(self, engine: Engine, per_minute: int) -> None:
        # The services' database, through a pool of its own (see above); a call that waits
        # longer than pool_timeout for a connection goes uncounted.
        self.engine = create_engine(
            engine.url, pool_pre_ping=True, pool_size=1, max_overflow=4, pool_timeout=5
        )
        self.limit = per_minute

    def close(self) -> None:
        self.engine.dispose()

    def wait_needed(self, key: str) -> float:
        """0 if the call may go now (it is counted), else the seconds until one may. If
        the count cannot be written the call goes (logged): the limit guards the service,
        and the database that failed here will fail the request itself."""
        try:
            with self.engine.begin() as conn:
                row = conn.execute(_COUNT, {"key": key[:300]}).one()
                current, previous, elapsed = int(row[0]), int(row[1]), float(row[2])
                if current == 1:
                    conn.execute(_DROP_EXPIRED)
        except Exception:
            log.exception("rate limit: could not count a call of %s; let through", key)
            return 0.0
        return wait_for(current, previous, elapsed, self.limit)


def wait_for(current: int, previous: int, elapsed: float, limit: int) -> float:
    """Seconds until a call may go (0: now), given this minute's calls so far (this one
    included), the previous minute's, and the seconds elapsed in this minute. A hint for
    Retry-After: the next call counts one more."""
    elapsed = min(max(elapsed, 0.0), WINDOW_S)
    weight = 1 - elapsed / WINDOW_S  # the previous minute's share of the last 60 s
    if current + previous * weight <= limit:
        return 0.0
    if current + 1 <= limit and previous > 0:
        # Within this minute, once the previous minute's share has decayed enough.
        wait = (weight - (limit - current - 1) / previous) * WINDOW_S
        if wait < weight * WINDOW_S:
            return max(0.0, wait)
    # In the next minute, once this minute's share has: 1 + current * (1 - s / 60) <= limit.
    return weight * WINDOW_S + max(0.0, (1 - (limit - 1) / current) * WINDOW_S)


def retry_after(wait: float) -> str:
    return str(max(1, math.ceil(wait)))
