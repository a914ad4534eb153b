"""The change-request rate limit is one limit for all API replicas (issue 23): two app
instances on one database together allow MUTATIONS_PER_MINUTE per credential, not twice
it; its counter rows expire."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from conftest import make_test_runtime
from fastapi.testclient import TestClient
from helpers import bearer, issue_token, make_table
from sqlalchemy import create_engine, text

from services.api.app import create_app

LIMIT = 5


def test_two_replicas_share_one_limit(db_url: str, tmp_path: Path) -> None:
    replicas = [
        make_test_runtime(db_url, tmp_path / f"replica{i}", mutations_per_minute=LIMIT)
        for i in (1, 2)
    ]
    make_table(replicas[0], "sales", "orders", partitioned=False)
    admin, other = issue_token(replicas[0]), issue_token(replicas[0], name="other")
    url = "/api/v1/tables/sales/orders/blockers"
    body = {"holder": "writer", "ttl_s": 60}
    try:
        with (
            TestClient(create_app(replicas[0], background=False)) as one,
            TestClient(create_app(replicas[1], background=False)) as two,
        ):
            r = one.post(
                "/api/v1/tables",
                json={"namespace": "sales", "name": "orders"},
                headers=bearer(other),
            )
            assert r.status_code == 201, r.text
            statuses = [
                (one if i % 2 else two).post(url, json=body, headers=bearer(admin)).status_code
                for i in range(2 * LIMIT)
            ]
            assert statuses.count(201) == LIMIT and statuses.count(429) == LIMIT, statuses
            assert statuses[:LIMIT] == [201] * LIMIT  # the first LIMIT, on both replicas
            refused = one.post(url, json=body, headers=bearer(admin))
            assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 120
            # Per credential: the other token still has its own.
            assert two.post(url, json=body, headers=bearer(other)).status_code == 201
    finally:
        for rt in replicas:
            rt.engine.dispose()


def test_counter_rows_expire(db_url: str, tmp_path: Path) -> None:
    rt = make_test_runtime(db_url, tmp_path, mutations_per_minute=LIMIT)
    make_table(rt, "sales", "orders", partitioned=False)
    # The rows are dated by the minute: were the minute to turn between this insert and the
    # request, "the previous minute" would be two minutes back and pruned. Start with at
    # least 20 s of the minute left (the insert's now() is its transaction's start).
    with rt.engine.connect() as conn:
        second = float(conn.scalar(text("SELECT extract(second FROM clock_timestamp())")))
    if second > 40:
        time.sleep(61 - second)
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO rate_counts (key, window_start, count) VALUES "
                "('token:gone', date_trunc('minute', now()) - interval '5 minutes', 7), "
                "('token:last', date_trunc('minute', now()) - interval '1 minute', 3)"
            )
        )
    try:
        with TestClient(create_app(rt, background=False), headers=bearer(issue_token(rt))) as c:
            r = c.post("/api/v1/tables", json={"namespace": "sales", "name": "orders"})
            assert r.status_code == 201, r.text
        with rt.engine.connect() as conn:
            keys = sorted(k for (k,) in conn.execute(text("SELECT key FROM rate_counts")))
        # The old minute is gone; the previous one stays (the sliding window reads it).
        assert "token:gone" not in keys and "token:last" in keys and len(keys) == 2, keys
    finally:
        rt.engine.dispose()


def test_counting_needs_no_second_connection_of_the_main_pool(db_url: str, tmp_path: Path) -> None:
    """The request's session holds a connection of the main pool while the call is
    counted: with every connection of that pool held (here: its only one), counting must
    not wait for one (it would, until the pool's timeout, and then go uncounted)."""
    base = make_test_runtime(db_url, tmp_path, mutations_per_minute=LIMIT)
    rt = dataclasses.replace(
        base, engine=create_engine(base.engine.url, pool_size=1, max_overflow=0, pool_timeout=3)
    )
    make_table(rt, "sales", "orders", partitioned=False)
    try:
        with TestClient(create_app(rt, background=False), headers=bearer(issue_token(rt))) as c:
            started = time.monotonic()
            r = c.post("/api/v1/tables", json={"namespace": "sales", "name": "orders"})
            assert r.status_code == 201, r.text
            assert time.monotonic() - started < 2.5
        with rt.engine.connect() as conn:
            assert conn.scalar(text("SELECT sum(count) FROM rate_counts")) == 1
    finally:
        rt.engine.dispose()
        base.engine.dispose()
