"""The consumer: entry point and checkpoint store in, new entries out, oldest first, at least once.

::

    with Consumer("https://feeds.example.com/recent", "consumer.sqlite3") as consumer:
        for entry in consumer.entries():     # or: consumer.run(handler)
            handle(entry)

Processing is **at least once**. An entry counts as processed when the caller asks for the next one
(:meth:`Consumer.entries`). With :meth:`Consumer.run`, it counts when the handler returns. With
:meth:`Consumer.run_acknowledged`, entries go ahead of their acknowledgements, and one counts when
it is acknowledged. Only then can the checkpoint move past it. With ``checkpoint_every="entry"``
(the default), the checkpoint is stored durably after every processed entry. So a crash repeats at
most the entry being processed. With ``checkpoint_every="page"``, it is stored when the last entry
of a page has been processed. It is also stored on the last processed entry whenever processing
stops, for whatever reason. So a crash repeats at most one page of entries. An entry is never
skipped. The checkpoint never moves past an entry that was not processed. The consumer checks that
sequence numbers are contiguous.

A handler that raises stops processing at that entry. The checkpoint stays on the entry before
it (:class:`~simplefeed.client.errors.HandlerError`). With ``on_error="park"``, processing goes
on instead. The entry is kept in the state file with its error, durably, before the checkpoint
moves past it. The methods :meth:`Consumer.parked`, :meth:`Consumer.retry` and
:meth:`Consumer.drop` work on the parked entries. The ``max_parked`` limit stops the consumer
(:class:`~simplefeed.client.errors.TooManyParked`) before a broken handler parks the whole
feed. The method :meth:`Consumer.status` tells the checkpoint, the head as last seen, the lag
and the parked count.

A feed may break the protocol: not Atom, a link loop, a sequence gap, or the last processed
entry gone. Processing then stops with a specific
:class:`~simplefeed.client.errors.FeedError` before the entry past the problem. The checkpoint
stays on the last processed entry.

``parser`` chooses what reads documents besides the strict reading every entry comes from
(:mod:`simplefeed.client.parse`). The default adds feedparser. ``"lxml"`` adds nothing else and
is several times faster. The entries are the same either way. A first run walks back through
the whole history reading only outlines. Then it walks forward again, parsing each page once.
Memory stays flat in the number of pages (:mod:`simplefeed.client.walk`). With feedparser, a
long catch-up makes its checks in a child process (:mod:`simplefeed.client.checker`). The
garbage collector belongs to the application. An application catching up on a long history
gains 7-10 % with lxml by calling ``gc.freeze()`` once its modules are loaded.
``simplefeed consume`` does so.

Every response is bounded in size and time (``bounds``,
:class:`~simplefeed.client.fetch.Bounds`). Redirects and links stay within the entry point's
origin, unless ``allow_redirect_origins`` names others (:mod:`simplefeed.client.fetch`).
Checkpoints are kept under the entry point as given. If it redirects permanently, the consumer
warns once and names the URL to give instead (``_HttpPages.head``). Memory stays flat across
the passes of follow mode. A pass holds at most three pages besides the entry point's: the
current one, the next, and the one read ahead. It also holds the walk's bounded trail.

In follow mode, the consumer polls the entry point again after each pass. The wait adapts to
how often new entries appear (:mod:`simplefeed.client.poll`). It is never shorter than the
entry point's max-age. :meth:`Consumer.stop` may be called from any thread or a signal handler.
It ends follow mode within a quarter of a second, with the checkpoint stored. The fetcher's
waits look at it (:meth:`~simplefeed.client.fetch.Fetcher.interrupt`). The clock and the sleep
are injected.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from os import PathLike
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Protocol

from simplefeed.client.entry import FeedEntry
from simplefeed.client.errors import (
    ClientError,
    DigestMismatch,
    HandlerError,
    LastEntryVanished,
    StateError,
    Stopped,
    TooManyParked,
)
from simplefeed.client.fetch import (
    Bounds,
    Fetcher,
    RetryPolicy,
    Transport,
    finite_seconds,
    url_problem,
)
from simplefeed.client.pages import HttpPages
from simplefeed.client.parse import (
    PARSERS,
    Page,
    Parser,
)
from simplefeed.client.poll import PollPolicy, next_interval
from simplefeed.client.saving import BackgroundSaver
from simplefeed.client.state import Checkpoint, Head, Parked, StateFile, damaged_values
from simplefeed.client.walk import (
    MAX_PAGES,
    Progress,
    entry_numbered,
    new_entries,
    parting,
    starting_point,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

__all__ = [
    "AcknowledgingHandler",
    "CheckpointEvery",
    "Consumer",
    "Handler",
    "OnError",
    "Start",
    "Status",
]

#: Where a consumer without a checkpoint starts: the whole history, or only what comes next.
Start = Literal["start", "now"]
#: When the checkpoint is stored: after each entry, or after each page.
CheckpointEvery = Literal["entry", "page"]
Handler = Callable[[FeedEntry], object]
#: What a handler's failure does: stop at that entry, or park it and go on.
OnError = Literal["stop", "park"]


@dataclass(frozen=True)
class Status:
    """Where a consumer stands.

    It holds the checkpoint and the head of the feed as last seen. It tells how many entries
    the consumer is behind, from sequence numbers, and how many are parked.
    """

    url: str
    checkpoint: Checkpoint | None
    head: Head | None
    parked: int

    @property
    def lag(self) -> int | None:
        if self.head is None:
            return None
        return max(0, self.head.seq - (self.checkpoint.seq if self.checkpoint else 0))

    @property
    def past_head(self) -> bool:
        """Whether the checkpoint is past the head as last seen.

        Perhaps the entry point read was an older copy from a cache. Or the server's database
        was restored from a backup that lost entries read here. In that case, use
        :meth:`Consumer.reset` to its head.
        """
        head, checkpoint = self.head, self.checkpoint
        return head is not None and checkpoint is not None and checkpoint.seq > head.seq


#: The server may say it held a long poll that came back sooner than this with nothing new. Then
#: it was not held, and the next poll waits as an ordinary one would. A server cannot make us spin.
HELD = 1.0


class Consumer:
    """Read a Simplefeed feed from its entry point, never missing or repeating an entry.

    Entries repeat only within the at-least-once window the module docstring describes.
    ``url`` is the feed's entry point. ``state`` keeps the checkpoint and the page cache. It is
    a path or an open :class:`StateFile`, which the caller closes. A missing file is created,
    but never its directory.

    - ``start``: where a consumer without a checkpoint begins. ``"start"`` is the whole
      history, and ``"now"`` is what comes next. A sequence number means the entries after it.
      The first pass raises :class:`NoSuchEntry` when the feed holds no entry of that number.
    - ``checkpoint_every``: ``"entry"`` or ``"page"``. With ``"entry"``, a crash repeats at
      most one entry. With ``"page"``, it repeats at most one page, and runs faster.
    - ``parser``: ``"feedparser"`` (its checks besides the strict reading) or ``"lxml"``.
    - ``on_error``, ``max_parked``: a handler's failure stops (``"stop"``) or parks the
      entry (``"park"``). At most ``max_parked`` entries are parked (:class:`TooManyParked`).
    - ``timeout``: seconds each connect and each socket read may wait. A long poll's read may
      wait ``wait`` more. ``bounds`` (:class:`Bounds`) caps a whole response's seconds and
      bytes, so a server that drips bytes is cut off whatever the timeout.
    - ``retry`` (:class:`RetryPolicy`): attempts and backoff for network errors, timeouts, 5xx
      and 429. ``allow_redirect_origins``: other origins that redirects and links may reach.
    - ``poll`` (:class:`PollPolicy`): follow mode's adaptive interval. ``wait``: the seconds a
      long poll asks the server to hold it (``Prefer: wait``). 0 never asks.
    - ``progress``: called with a :class:`Progress` as a long catch-up goes. ``max_pages``: the
      most pages a pass walks back, fetches and caches (:data:`~simplefeed.client.walk.MAX_PAGES`
      by default). A longer history stops with :class:`MalformedPage`.
    - ``clock``, ``sleep``, ``transport``: injected for tests. The default sleep ends at
      :meth:`stop`.
    """

    #: Per page: the last processed entry, until its page is done. Its checkpoint is made
    #: then, not for every entry.
    _pending: FeedEntry | None = None
    #: The iteration under way: the thread running it, and whether it is running now. The
    #: other case is waiting at a yield for its caller to ask for the next entry.
    _runner: int | None = None
    _executing = False
    _closed = False

    def __init__(
        self,
        url: str,
        state: str | PathLike[str] | StateFile,
        *,
        start: Start | int = "start",
        checkpoint_every: CheckpointEvery = "entry",
        transport: Transport | None = None,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        bounds: Bounds | None = None,
        allow_redirect_origins: Iterable[str] = (),
        poll: PollPolicy | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        progress: Callable[[Progress], None] | None = None,
        parser: Parser = "feedparser",
        on_error: OnError = "stop",
        max_parked: int | None = None,
        wait: float = 30.0,
        max_pages: int = MAX_PAGES,
    ) -> None:
        _check_arguments(
            url, start, checkpoint_every, parser, on_error, max_parked, wait, max_pages
        )
        self.url = url
        self.wait = wait
        self.max_pages = max_pages
        self.on_error, self.max_parked = on_error, max_parked
        self.start = start
        self.parser = parser
        self.checkpoint_every = checkpoint_every
        self.poll = poll if poll is not None else PollPolicy()
        self.clock = clock
        self.progress = progress
        self._owns_state = not isinstance(state, StateFile)
        self.state = state if isinstance(state, StateFile) else StateFile(state)
        self._saver = BackgroundSaver(self.state.path)
        with _closed_on_error(self.state if self._owns_state else None):
            self.fetcher = Fetcher(
                self.state,
                transport=transport,
                timeout=timeout,
                retry=retry,
                bounds=bounds,
                allow_redirect_origins=allow_redirect_origins,
                clock=clock,
                sleep=sleep,
            )
        #: Waits between polls and between attempts. They use the fetcher's pause, which
        #: :meth:`stop` ends, unless another was given.
        self.sleep = sleep if sleep is not None else self.fetcher.pause
        self._pages = HttpPages(self.fetcher, parser, url)
        self._saved = self.state.load_checkpoint(url)
        # The sequence numbers and ids of the entries processed since the checkpoint.
        self._unsaved: list[tuple[int, str]] = []
        self._streams: weakref.WeakSet[Generator[FeedEntry, None, None]] = weakref.WeakSet()

    # -- public API ----------------------------------------------------------------------

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The last processed entry, stored or about to be at the end of its page."""
        return _checkpoint_of(self._pending) if self._pending is not None else self._saved

    def entries(
        self, *, follow: bool = False, stop: Callable[[], bool] | None = None
    ) -> Iterator[FeedEntry]:
        """New entries, oldest first. Each counts as processed when the next one is asked for.

        Without ``follow``, the iteration ends once caught up. With it, the consumer polls on.
        It stops when ``stop()`` is true (checked after each pass), when :meth:`stop` is
        called, or when the iterator is closed.
        """
        stream = self._stream(follow, stop)
        self._streams.add(stream)
        return stream

    def run(
        self,
        handler: Handler,
        *,
        follow: bool = False,
        stop: Callable[[], bool] | None = None,
    ) -> int:
        """Call ``handler`` on each new entry, oldest first; return how many were processed.

        A handler that raises an :class:`Exception` stops processing with
        :class:`HandlerError`. The checkpoint stays on the entry before. With
        ``on_error="park"``, the entry is parked instead (:meth:`park`) and processing goes on.
        A handler may raise :class:`HandlerError` itself. That says no entry can be handled
        now, for example because its program is gone. It stops processing whatever
        ``on_error`` is, and nothing is parked."""
        processed = 0
        stream = self._stream(follow, stop)
        try:
            for entry in stream:
                try:
                    handler(entry)
                except HandlerError:
                    raise
                except Exception as exc:
                    _failed(self, entry, exc)
                processed += 1
        finally:
            stream.close()
        return processed

    def run_acknowledged(
        self,
        handler: AcknowledgingHandler,
        *,
        window: int = 1000,
        follow: bool = False,
        stop: Callable[[], bool] | None = None,
    ) -> int:
        """:meth:`run` through an :class:`AcknowledgingHandler`, at most ``window`` entries
        ahead of the acknowledgements; return how many were acknowledged."""
        pending = _Unacknowledged(self, handler, window)
        with contextlib.closing(self._stream(follow, stop, pending)) as stream:
            for entry in stream:
                pending.send(entry)
        return pending.acknowledged

    def stop(self) -> None:
        """End the iteration under way (:meth:`entries`, :meth:`run`).

        It may be called from any thread or a signal handler. The entry being handled
        finishes, and no other is handed over. Its checkpoint is stored. A wait ends within a
        quarter of a second. That covers a long poll and the pause between polls or between
        attempts. Called while nothing iterates, it ends the next iteration at its start. The
        consumer can iterate again afterwards.
        """
        self.fetcher.interrupt()

    def park(self, entry: FeedEntry, error: BaseException) -> None:
        """Keep ``entry`` in the state file with ``error``, durably, to be retried or dropped.

        Raise :class:`TooManyParked` instead when ``max_parked`` entries are parked already."""
        if self.max_parked is not None and self.state.parked_count(self.url) >= self.max_parked:
            raise TooManyParked(entry, error, self.max_parked) from error
        log.warning("%s: entry %r (sequence %d) parked: %s", self.url, entry.id, entry.seq, error)
        self.state.park(
            self.url, entry.id, entry.seq, entry.to_json(), _describe(error), self.clock()
        )

    def parked(self) -> list[Parked]:
        """The parked entries of this entry point, oldest first."""
        return self.state.parked(self.url)

    def retry(self, handler: Handler, entry_ids: Iterable[str] = ()) -> tuple[int, int]:
        """Call ``handler`` on parked entries; return (succeeded, failed).

        It calls it on those of ``entry_ids``, or on all, oldest first. Each that succeeds is
        forgotten. It holds the state file's right to process, as :meth:`entries` does. If
        another consumer or retry holds it, :class:`StateError` comes at once. Two retries at
        once would handle every parked entry twice.
        """
        wanted = set(entry_ids)
        succeeded = failed = 0
        with self.state.processing():
            for parked in self.parked():
                if wanted and parked.entry_id not in wanted:
                    continue
                with damaged_values(self.state.path, "parked entry"):
                    entry = FeedEntry.from_json(parked.entry)
                try:
                    handler(entry)
                except Exception as exc:
                    failed += 1
                    self.state.park(
                        self.url, entry.id, entry.seq, parked.entry, _describe(exc), self.clock()
                    )
                else:
                    succeeded += 1
                    self.state.unpark(self.url, entry.id)
        return succeeded, failed

    def drop(self, entry_id: str) -> bool:
        """Forget a parked entry; return whether there was one."""
        return self.state.unpark(self.url, entry_id)

    def reset(self, to: Start | int) -> Checkpoint:
        """Move the checkpoint, back or forward, and return it.

        ``"start"`` makes every entry new again. ``"now"`` counts the feed's newest entry as
        processed. A sequence number makes the entries after it new. A server's database may be
        restored from a backup that lost entries this consumer had read. The consumer then
        stops with :class:`LastEntryVanished`. Give the number of the last entry the restore
        kept.

        It reads the entry point. For a number, it walks back to the page holding it and checks
        each page as a pass checks it. It raises the errors of :meth:`entries`, and
        :class:`NoSuchEntry` for a number the feed does not hold. It holds the state file's
        right to process as :meth:`entries` does. The cached archived pages are forgotten,
        because a restored server may have frozen other pages under their URLs. Parked entries
        are kept.
        """
        _check_position("to", to)
        with self.state.processing():
            self.fetcher.forget_archived_pages()
            self.fetcher.forget(self.url)  # A copy from before a restore stays fresh for seconds.
            try:
                head = self._pages.head(self.url, None)
                checkpoint = self._position(head, 0 if to == "start" else to)
            finally:
                self._pages.end_pass()
            self._save(checkpoint)
            if head.newest_seq is not None:
                self.state.save_head(self.url, head.newest_seq, self.clock())
            else:  # A page had just frozen. The head as last seen may predate a restore.
                self.state.forget_head(self.url)
        return checkpoint

    def status(self) -> Status:
        return Status(
            self.url,
            self.checkpoint,
            self.state.heads().get(self.url),
            self.state.parked_count(self.url),
        )

    def close(self) -> None:
        """Close the consumer: its iteration, HTTP connections and state file.

        From another thread than the one iterating, it only stops the iteration (:meth:`stop`).
        So it does from a signal handler that interrupted the iteration. Closing the
        connections and the state file under the iteration would break it. The thread that
        iterates then closes the consumer when it is done (``with``).
        """
        if self._closed:
            return
        runner = self._runner
        if runner is not None and (runner != threading.get_ident() or self._executing):
            self.stop()
            return
        self._closed = True
        try:
            for stream in list(self._streams):
                stream.close()
            self._flush()
        finally:
            self._saver.close()
            self._pages.close()
            self.fetcher.close()
            if self._owns_state:
                self.state.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the loop ------------------------------------------------------------------------

    def _stream(
        self,
        follow: bool,
        stop: Callable[[], bool] | None,
        pending: _Unacknowledged | None = None,
    ) -> Generator[FeedEntry, None, None]:
        interval = self.poll.initial
        wait: float | None = None  # The first pass answers at once.
        holds = False  # The server has held one of our long polls.
        if self._runner is not None:
            raise StateError(
                str(self.state.path),
                "this consumer is iterating already: one iteration at a time (close the other"
                " iterator first)",
            )
        with self.state.processing():  # No other consumer works on this state file.
            self._runner, self._executing = threading.get_ident(), True
            self._unacknowledged = pending  # processed when acknowledged
            try:
                while True:
                    found = 0
                    with contextlib.closing(self._one_pass(wait)) as passing:
                        try:
                            for entry in passing:
                                if self.fetcher.interrupted:
                                    return
                                if pending is None and (
                                    self._saver.busy or _turned(self._pending, entry)
                                ):
                                    self._flush()  # Every entry of the previous page is done.
                                self._executing = False
                                yield entry
                                self._executing = True
                                if pending is None:
                                    # The caller came back for more: the entry is processed.
                                    self._processed(entry)
                                found += 1
                        except Stopped:
                            return
                    if pending is not None:
                        pending.settle()
                    self._flush()
                    if not follow:
                        log.debug("%s: %d new entries; caught up", self.url, found)
                        return
                    if self.fetcher.interrupted or (stop is not None and stop()):
                        return
                    pause, interval, holds = self._next_poll(found, interval, wait is None, holds)
                    log.debug("%s: %d new entries; next poll in %.1f s", self.url, found, pause)
                    wait = self.wait or None
                    if pause > 0:
                        self.sleep(pause)
            finally:
                self._runner, self._executing = None, False
                self._unacknowledged = None
                self.fetcher.resume()
                if not self._closed:
                    self._flush()

    def _next_poll(
        self, found: int, interval: float, first: bool, holds: bool
    ) -> tuple[float, float, bool]:
        """The wait before the next poll, after a pass that found ``found`` entries.

        Return the pause, the polling interval, and whether the server holds long polls."""
        pages = self._pages
        held = pages.head_waited and (found > 0 or pages.head_seconds >= HELD)
        holds = holds or held
        if self.wait and (first or held or (holds and found > 0)):
            # The first long poll goes out at once. So does the next after one the server held
            # until the feed changed or the wait was over. So does one after new entries from a
            # server that held one before. A copy made stale between two polls is answered at
            # once, by some servers without Preference-Applied. A server that does not hold long
            # polls gets the ordinary interval, never shorter than max-age.
            return 0.0, interval, holds
        interval = next_interval(self.poll, interval, found, pages.head_max_age)
        return interval, interval, holds

    def _one_pass(self, wait: float | None) -> Generator[FeedEntry, None, None]:
        head = self._pages.head(self.url, wait)
        if head.newest_seq is not None:
            self.state.save_head(self.url, head.newest_seq, self.clock())
        newest = head.newest_seq
        try:
            checkpoint = self.checkpoint
            if checkpoint is None and self.start != "start":
                checkpoint = self._position(head, self.start)
                self._save(checkpoint)
            yield from new_entries(
                self._pages,
                head,
                checkpoint,
                progress=self.progress,
                page_done=self._page_done,
                behind=self._behind,
                max_pages=self.max_pages,
            )
        except LastEntryVanished as exc:
            raise self._parted(head, exc) from None
        except DigestMismatch:
            # The server's chain no longer vouches for a cached copy, or the copy is damaged.
            # The feed may have been re-rendered (`archive rebase`). The other copies were
            # cached alike, so all go, and the next run reads them again. Otherwise the
            # consumer would stop once per cached page.
            self.fetcher.forget_archived_pages()
            raise
        finally:
            self._pages.end_pass()
        caught_up = self.checkpoint
        if caught_up is not None and newest is None:
            # The entry point held no entries, because a page had just frozen. The newest entry
            # of the feed seen is the last one processed, not an older head. So `consumer status`
            # does not show a head behind the checkpoint. An entry point whose newest entry is
            # older than the checkpoint's is kept as the head. `consumer status` says so
            # (past_head).
            self.state.save_head(self.url, caught_up.seq, self.clock())

    def _behind(self, page: Page, checkpoint: Checkpoint) -> None:
        """Handle a feed whose newest entry is older than the checkpoint's.

        The entry is on ``page``: the entry point, or the page before an entry point without
        entries. Usually this is an older copy of the entry point. Nothing is new yet
        (:func:`new_entries`), and the log says so. The entry read here at that number may have
        been another. Then the feed lost entries read here (:class:`LastEntryVanished`).
        """
        newest = page.newest_seq
        assert newest is not None
        read = self.state.processed_id(self.url, newest)
        if read is not None and read != page.entries[-1].id:
            raise LastEntryVanished(page.url, checkpoint.entry_id)
        log.warning(
            "%s: its newest entry (sequence %d) is older than the last processed (%d): an"
            " older copy of the entry point (a cache, a server in a fault)? Or the server's"
            " database was restored from a backup that lost entries read here: then move"
            " the checkpoint to its head (`simplefeed consumer reset`, Consumer.reset)",
            self.url,
            newest,
            checkpoint.seq,
        )

    def _parted(self, head: Page, vanished: LastEntryVanished) -> LastEntryVanished:
        """``vanished``, saying where the feed parts from the entries read here, if it can."""
        read = self.state.processed(self.url)
        if not read:
            return vanished
        try:
            found = parting(self._pages, head, read, max_pages=self.max_pages)
        except ClientError as exc:
            log.warning(
                "%s: cannot tell where the feed parts from what was read: %s", self.url, exc
            )
            return vanished
        return LastEntryVanished(vanished.url, vanished.entry_id, found)

    def _position(self, head: Page, to: Literal["now"] | int) -> Checkpoint:
        """The checkpoint at the newest entry (``"now"``) or entry ``to``, read from ``head`` on."""
        if to == "now":
            return starting_point(self._pages, head)
        return entry_numbered(self._pages, head, to, max_pages=self.max_pages)

    # -- checkpoints ---------------------------------------------------------------------

    def _processed(self, entry: FeedEntry) -> None:
        if self.checkpoint_every == "entry":
            self._save(_checkpoint_of(entry), [(entry.seq, entry.id)])
        else:
            self._pending = entry
            self._unsaved.append((entry.seq, entry.id))

    def _page_done(self) -> None:
        """The walk is past the last entry of a page, and all of them are processed.

        With checkpoints per page, start storing the checkpoint while the walk reads on. Entries
        that await their acknowledgements put it off until the last of them has it."""
        if self._unacknowledged is None or not self._unacknowledged.page_ends():
            self._store_page()

    def _store_page(self) -> None:
        if self.checkpoint_every != "page" or self._pending is None:
            return
        pending = _checkpoint_of(self._pending)
        self._saver.start(self.url, pending, self.clock(), self._unsaved)
        self._saved = pending
        self._pending = None
        self._unsaved = []

    def _flush(self) -> None:
        self._saver.wait()
        if self._pending is not None:
            self._save(_checkpoint_of(self._pending), self._unsaved)

    def _save(self, checkpoint: Checkpoint, processed: list[tuple[int, str]] | None = None) -> None:
        """Store ``checkpoint`` with the entries ``processed`` since the one before.

        None processed means the checkpoint was moved, not reached."""
        self.state.save_checkpoint(self.url, checkpoint, self.clock(), processed or ())
        self._saved = checkpoint
        self._pending = None
        self._unsaved = []


class AcknowledgingHandler(Protocol):
    """A handler that takes entries ahead of their acknowledgements (``run_acknowledged``).

    :meth:`send` hands an entry over. :meth:`acknowledgement` waits for the outcome of the
    entry given, the oldest not acknowledged: ``None`` once handled, or its error, which stops
    or parks as ``on_error`` says. At most the window's entries await theirs, across pages; all
    of them have theirs before each poll. A page's checkpoint is stored once its last entry is
    acknowledged. Processing that stops (an error,
    :meth:`Consumer.stop`) leaves the checkpoint on the last acknowledged entry, and those sent
    after it come again. Raising :class:`HandlerError` says no entry can be handled now (the
    handler is gone).
    """

    def send(self, entry: FeedEntry) -> None: ...

    def acknowledgement(self, entry: FeedEntry) -> Exception | None: ...


class _Unacknowledged:
    """The entries sent to an acknowledging handler and not yet acknowledged, oldest first."""

    def __init__(self, consumer: Consumer, handler: AcknowledgingHandler, window: int) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.consumer, self.handler, self.window = consumer, handler, window
        self.entries: deque[FeedEntry] = deque()
        self.acknowledged = 0
        #: The sequence numbers of the entries sent that end a page the walk has left.
        self.ends: set[int] = set()

    def send(self, entry: FeedEntry) -> None:
        while len(self.entries) >= self.window:
            self._settle_one()
        self.handler.send(entry)
        self.entries.append(entry)

    def page_ends(self) -> bool:
        """The walk left a page: whether its last entry awaits its acknowledgement, which then
        stores the page's checkpoint."""
        if not self.entries:
            return False
        self.ends.add(self.entries[-1].seq)
        return True

    def settle(self) -> None:
        """Wait for every entry sent to be acknowledged, and process each."""
        while self.entries:
            self._settle_one()

    def _settle_one(self) -> None:
        entry = self.entries[0]
        error = self.handler.acknowledgement(entry)
        self.entries.popleft()
        if error is not None:
            _failed(self.consumer, entry, error)
        self.consumer._processed(entry)
        self.acknowledged += 1
        if entry.seq in self.ends:
            self.ends.discard(entry.seq)
            self.consumer._store_page()


def _turned(processed: FeedEntry | None, entry: FeedEntry) -> bool:
    """Whether ``entry`` is on another page than the last ``processed`` one."""
    return processed is not None and processed.page_url != entry.page_url


def _failed(consumer: Consumer, entry: FeedEntry, error: Exception) -> None:
    """The handler failed on ``entry``: stop there, or park it, as ``on_error`` says."""
    if consumer.on_error == "stop":
        raise HandlerError(entry, error) from error
    consumer.park(entry, error)


@contextlib.contextmanager
def _closed_on_error(state: StateFile | None) -> Iterator[None]:
    """Close ``state`` if the block raises, because a consumer that failed to start owns it."""
    try:
        yield
    except BaseException:
        if state is not None:
            state.close()
        raise


def _checkpoint_of(entry: FeedEntry) -> Checkpoint:
    return Checkpoint(entry.id, entry.seq, entry.page_url)


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _check_arguments(
    url: str,
    start: Start | int,
    checkpoint_every: CheckpointEvery,
    parser: Parser,
    on_error: OnError,
    max_parked: int | None,
    wait: float,
    max_pages: int,
) -> None:
    """Raise :class:`ValueError` for a consumer's argument it cannot work with."""
    if on_error not in ("stop", "park"):
        raise ValueError(f"on_error must be 'stop' or 'park', not {on_error!r}")
    if max_parked is not None and max_parked < 0:
        raise ValueError("max_parked must not be negative")
    _check_position("start", start)
    if checkpoint_every not in ("entry", "page"):
        raise ValueError(f"checkpoint_every must be 'entry' or 'page', not {checkpoint_every!r}")
    if parser not in PARSERS:
        raise ValueError(f"parser must be one of {', '.join(PARSERS)}, not {parser!r}")
    if not finite_seconds(wait):
        raise ValueError("wait must be finite and not negative")
    if max_pages < 1:
        raise ValueError("max_pages must be at least 1")
    problem = url_problem(url)
    if problem is not None:
        raise ValueError(f"the entry point {problem}")


def _check_position(name: str, value: object) -> None:
    """Refuse a place in the feed that is not ``"start"``, ``"now"`` or a sequence number."""
    if isinstance(value, bool) or (not isinstance(value, int) and value not in ("start", "now")):
        raise ValueError(f"{name} must be 'start', 'now' or a sequence number, not {value!r}")
    if isinstance(value, int) and value < 0:
        raise ValueError(f"{name}: a sequence number is not negative")
