"""The Simplefeed consumer: read a feed from its entry point, oldest first, at least once.

::

    from simplefeed.client import Consumer

    with Consumer("https://feeds.example.com/recent", "consumer.sqlite3") as consumer:
        consumer.run(print)                          # or: for entry in consumer.entries(): ...

Modules, each owning one thing:

===============  =================================================================================
``consumer``     :class:`Consumer`: the loop, checkpoints (at-least-once), follow mode.
``walk``         Which entries are new. Walk back through ``prev-archive``, then forward again.
``fetch``        HTTP, the only httpx user. One pool, conditional GET, cache, retries.
``entry``        :class:`FeedEntry`, what the consumer hands over. Every field published.
``parse``        Bytes to :class:`Page`, the only feedparser user. The parser switch.
``checker``      feedparser's checks in a child process while a catch-up reads ahead.
``tree``         The strict reading by namespace, exact values. The only lxml user.
``state``        The SQLite state file: checkpoints and the HTTP cache.
``saving``       A page's checkpoint stored on its own thread while the walk reads on.
``poll``         The adaptive polling interval (pure).
``errors``       The exception hierarchy.
``command``      ``simplefeed consume`` and ``simplefeed consumer``.
``exec_stream``  ``consume --exec-stream``: one handler process, entries written ahead of acks.
``jsonl``        ``consume --jsonl``: JSON lines in large writes, acknowledged once written.
===============  =================================================================================
"""

from simplefeed.client.consumer import AcknowledgingHandler, Consumer, Status
from simplefeed.client.entry import EntryAuthor, EntryCategory, EntryLink, FeedEntry
from simplefeed.client.errors import (
    ClientError,
    DigestMismatch,
    FeedError,
    FetchError,
    HandlerError,
    LastEntryVanished,
    LinkLoop,
    LinkRefused,
    MalformedPage,
    NoSuchEntry,
    NotAtom,
    Parting,
    RedirectRefused,
    RepeatedEntry,
    ResponseTooLarge,
    RetriesExhausted,
    SequenceGap,
    StateError,
    TooManyPages,
    TooManyParked,
    UnexpectedStatus,
)
from simplefeed.client.fetch import Bounds, RetryPolicy
from simplefeed.client.poll import PollPolicy
from simplefeed.client.state import Checkpoint, Head, Parked, StateFile
from simplefeed.client.walk import Progress

#: The public surface. It holds the consumer, what it yields, how it is configured and what it
#: raises. It holds the handler that takes entries ahead of their acknowledgements
#: (:class:`AcknowledgingHandler`). It holds what its methods return (:class:`Status`,
#: :class:`Head`, :class:`Parked`). It holds what its ``progress`` callback receives
#: (:class:`Progress`) and what its errors carry (:class:`Parting`). Everything else is reachable
#: through its module and may change without notice. That covers the walk, the fetcher and the
#: parsers.
__all__ = [
    "AcknowledgingHandler",
    "Bounds",
    "Checkpoint",
    "ClientError",
    "Consumer",
    "DigestMismatch",
    "EntryAuthor",
    "EntryCategory",
    "EntryLink",
    "FeedEntry",
    "FeedError",
    "FetchError",
    "HandlerError",
    "Head",
    "LastEntryVanished",
    "LinkLoop",
    "LinkRefused",
    "MalformedPage",
    "NoSuchEntry",
    "NotAtom",
    "Parked",
    "Parting",
    "PollPolicy",
    "Progress",
    "RedirectRefused",
    "RepeatedEntry",
    "ResponseTooLarge",
    "RetriesExhausted",
    "RetryPolicy",
    "SequenceGap",
    "StateError",
    "StateFile",
    "Status",
    "TooManyPages",
    "TooManyParked",
    "UnexpectedStatus",
]
