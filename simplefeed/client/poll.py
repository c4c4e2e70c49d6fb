"""How long to wait before polling the entry point again: pure arithmetic, no I/O, no clock.

The rule is the simple one from "Dynamic feed polling times for news aggregators"
(``reference/adaptive-polling.txt``). Start at the shortest interval. After a poll that found
new entries, divide the interval by ``factor``. After one that found none, multiply it by
``factor``. Keep it within ``[min_interval, max_interval]``. On top of that, the interval is
never shorter than the entry point's ``max-age``, because the cache would answer a sooner poll.

So a busy feed is polled every ``min_interval`` seconds, or every max-age. A quiet one backs
off geometrically to ``max_interval``. The first entry after a quiet spell brings the interval
back down by one ``factor`` per poll that finds something.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["PollPolicy", "next_interval"]


@dataclass(frozen=True)
class PollPolicy:
    """Bounds (seconds) and the ramp factor of the adaptive polling interval."""

    min_interval: float = 1.0
    max_interval: float = 300.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not all(map(math.isfinite, (self.min_interval, self.max_interval, self.factor))):
            raise ValueError("min_interval, max_interval and factor must be finite")
        if self.min_interval <= 0:
            raise ValueError("min_interval must be positive")
        if self.max_interval < self.min_interval:
            raise ValueError("max_interval must be at least min_interval")
        if self.factor < 1:
            raise ValueError("factor must be at least 1")

    @property
    def initial(self) -> float:
        return self.min_interval


def next_interval(
    policy: PollPolicy, current: float, new_entries: int, max_age: float | None = None
) -> float:
    """The interval after a poll that waited ``current`` seconds and found ``new_entries``."""
    interval = current / policy.factor if new_entries > 0 else current * policy.factor
    interval = min(max(interval, policy.min_interval), policy.max_interval)
    if max_age is not None and interval < max_age:
        interval = max_age
    return interval
