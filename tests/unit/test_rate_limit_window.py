"""The sliding window's arithmetic (services/api/rate_limit.wait_for): when a call may go
and how long a refused one should wait."""

from __future__ import annotations

import pytest

from services.api.rate_limit import wait_for


@pytest.mark.parametrize(
    "current, previous, elapsed, limit, wait",
    [
        (1, 0, 0, 5, 0.0),  # the first call
        (5, 0, 30, 5, 0.0),  # the limit itself goes
        (6, 0, 30, 5, 30.0 + 60 * (1 - 4 / 6)),  # over this minute alone: into the next
        (1, 5, 0, 5, 60 * (1 - 3 / 5)),  # all of the previous minute counts: 2 + 5 * 0.6
        (1, 5, 30, 5, 0.0),  # half of it: 1 + 2.5 <= 5
        (2, 10, 30, 5, 60 * (0.5 - 2 / 10)),  # wait until its share is down to 2
    ],
)
def test_wait_for(current: int, previous: int, elapsed: float, limit: int, wait: float) -> None:
    assert wait_for(current, previous, elapsed, limit) == pytest.approx(wait)
