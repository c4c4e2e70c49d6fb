"""Time and ids, injected into the service so that tests control them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

__all__ = ["Clock", "random_uuid", "system_clock"]

Clock = Callable[[], int]
"""Returns the current time in microseconds since the epoch."""


def system_clock() -> int:
    """The system's time in microseconds since the epoch."""
    return time.time_ns() // 1000


def random_uuid() -> str:
    """A version 7 UUID (RFC 9562): 48 bits of Unix time in milliseconds, then 74 random bits.

    Ids made one after another sort one after another. The unique index on (feed, entry id)
    then grows at its right edge, so an append touches one or two index pages. Random ids
    touched a random page per entry, which made appending slow in a feed of millions of entries.
    """
    value = (time.time_ns() // 1_000_000 & _MS_MASK) << 80 | int.from_bytes(os.urandom(10))
    value = value & _VERSION_VARIANT_CLEAR | _VERSION_VARIANT_SET
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_MS_MASK = (1 << 48) - 1
_VERSION_VARIANT_CLEAR = ~(0xF << 76 | 0x3 << 62)
_VERSION_VARIANT_SET = 0x7 << 76 | 0x2 << 62  # version 7, RFC 9562 variant
