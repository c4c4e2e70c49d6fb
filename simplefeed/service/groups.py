"""Group commit: publishes that arrive while another is being appended share one transaction.

A leader/follower queue per key (a feed's name). A thread that finds nobody appending for the
key appends alone, at once, with no timer and no wait. Threads that arrive while it does queue
up. When it is done, the first of them leads: it takes every publish queued by then, appends
them in one transaction, and hands each follower its own outcome. The queue only forms while
a commit is under way, so a lone publish pays one uncontended lock for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

__all__ = ["Groups"]

R = TypeVar("R")
T = TypeVar("T")


class _Member(Generic[R, T]):
    """A publish queued behind the one being appended."""

    __slots__ = ("group", "outcome", "ready", "request")

    def __init__(self, request: R) -> None:
        self.request = request
        self.ready = threading.Event()
        #: Set for the member that leads: every member of its group, itself first.
        self.group: list[_Member[R, T]] | None = None
        self.outcome: T | BaseException | None = None


class Groups(Generic[R, T]):
    """Runs publishes for a key one at a time, or queued ones together (the module says how)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: The keys being appended to now, each with the members queued behind.
        self._queues: dict[Hashable, list[_Member[R, T]]] = {}

    def busy(self, key: Hashable) -> bool:
        """Whether a publish for ``key`` would queue now (a hint: it may not by then)."""
        return key in self._queues

    def run(
        self,
        key: Hashable,
        request: R,
        alone: Callable[[R], T],
        together: Callable[[Sequence[R]], Sequence[T | BaseException]],
    ) -> T:
        """``alone(request)`` if nothing for ``key`` is under way, else ``request``'s outcome
        from ``together`` (one call for every request queued when its turn comes, each
        answered in order; an exception there answers them all). A group of one goes alone.
        """
        with self._lock:
            queue = self._queues.get(key)
            if queue is None:
                self._queues[key] = []
                member = None
            else:
                member = _Member[R, T](request)
                queue.append(member)
        if member is None:
            try:
                return alone(request)
            finally:
                self._hand_over(key)
        member.ready.wait()
        if member.group is not None:
            self._lead(key, member.group, alone, together)
        outcome = member.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[return-value]

    def _lead(
        self,
        key: Hashable,
        group: list[_Member[R, T]],
        alone: Callable[[R], T],
        together: Callable[[Sequence[R]], Sequence[T | BaseException]],
    ) -> None:
        """Run ``group``, hand the key over, then wake each follower with its outcome."""
        outcomes: Sequence[T | BaseException]
        try:
            if len(group) == 1:
                outcomes = [alone(group[0].request)]
            else:
                outcomes = together([m.request for m in group])
        except BaseException as exc:  # every member is answered, whatever happens
            outcomes = [exc] * len(group)
        finally:
            self._hand_over(key)
        for m, outcome in zip(group, outcomes, strict=True):
            m.outcome = outcome
            m.ready.set()

    def _hand_over(self, key: Hashable) -> None:
        """The first queued member leads every member queued now; else the key is free."""
        with self._lock:
            queue = self._queues.pop(key)
            if queue:
                self._queues[key] = []
        if queue:
            queue[0].group = queue
            queue[0].ready.set()
