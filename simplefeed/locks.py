"""Work done once by whichever thread comes first: a bounded set of locks chosen by key."""

from __future__ import annotations

import threading
from collections.abc import Hashable

#: Locks in a set. Keys that share one only wait for each other. They never deadlock, because a
#: thread holds one at a time.
STRIPES = 64


class Striped:
    """A lock for a key, one of :data:`STRIPES`.

    A thread doing work for a key makes the other threads wanting the same result wait for it.
    They then find it done, instead of doing it again each. Such work is rendering a document's
    new version, or looking a feed up after a commit. The set is bounded whatever keys come,
    because a request may name any feed.
    """

    def __init__(self) -> None:
        self._locks = tuple(threading.Lock() for _ in range(STRIPES))

    def __call__(self, key: Hashable) -> threading.Lock:
        return self._locks[hash(key) % STRIPES]
