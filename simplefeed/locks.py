"""Work done once by whichever thread comes first: a bounded set of locks chosen by key."""

from __future__ import annotations

import threading
from collections.abc import Hashable

#: Locks in a set: keys that share one only wait for each other, never deadlock (a thread holds
#: one at a time).
STRIPES = 64


class Striped:
    """A lock for a key, one of :data:`STRIPES`, so that a thread doing work for a key (rendering
    a document's new version, looking a feed up after a commit) makes the other threads wanting
    the same result wait for it and then find it done, instead of doing it again each. Bounded
    whatever keys come: a request may name any feed."""

    def __init__(self) -> None:
        self._locks = tuple(threading.Lock() for _ in range(STRIPES))

    def __call__(self, key: Hashable) -> threading.Lock:
        return self._locks[hash(key) % STRIPES]
