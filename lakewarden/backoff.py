"""Retry delays: exponential with jitter, so retries of many tasks do not align.

The one rule for every retry: a failed job (scheduler), a failed plan (worker) and a failed
alert delivery (alert sinks) all wait `retry_delay_s`."""

from __future__ import annotations

import random


def retry_delay_s(
    attempt: int, base_s: float, cap_s: float, rng: random.Random | None = None
) -> float:
    """Delay before attempt `attempt + 1` (attempt counts from 1): half fixed, half jittered."""
    ceiling = min(cap_s, base_s * 2 ** max(0, attempt - 1))
    return ceiling * (0.5 + 0.5 * (rng or random).random())
