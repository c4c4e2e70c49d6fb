"""The Simplefeed consumer: read a feed from its entry point, oldest first, at least once.

::

    from simplefeed.client import Consumer

    with Consumer("https://feeds.example.com/recent", "consumer.sqlite3") as consumer:
        consumer.run(print)                          # or: for entry in consumer.entries(): ...

Modules, each owning one thing:

=============  =================================================================================
``consumer``   :class:`Consumer`: the loop, checkpoints (at-least-once), follow mode
``walk``       which entries are new: walk back through ``prev-archive``, forward again
``fetch``      HTTP (the only httpx user): one pool, conditional GET, cache, retries
``parse``      bytes -> :class:`Page` (the only feedparser user), and the parser switch
``parse_fast`` the fast path: lxml for the documents a Simplefeed server renders
``state``      the SQLite state file: checkpoints and the HTTP cache
``poll``       the adaptive polling interval (pure)
``errors``     the exception hierarchy
``command``    ``simplefeed consume``
=============  =================================================================================
"""

from simplefeed.client.consumer import CheckpointEvery, Consumer, Handler, Start
from simplefeed.client.errors import (
    ClientError,
    FeedError,
    FetchError,
    HandlerError,
    LastEntryVanished,
    LinkLoop,
    MalformedPage,
    NotAtom,
    RetriesExhausted,
    SequenceGap,
    StateError,
    UnexpectedStatus,
)
from simplefeed.client.fetch import Fetched, Fetcher, RetryPolicy
from simplefeed.client.parse import (
    PARSERS,
    EntryLink,
    FeedEntry,
    Outline,
    Page,
    Parser,
    outline_page,
    parse_page,
)
from simplefeed.client.poll import PollPolicy, next_interval
from simplefeed.client.state import (
    CachedDocument,
    Checkpoint,
    CheckpointStore,
    PageCache,
    StateFile,
)
from simplefeed.client.walk import (
    OutlineSource,
    PageSource,
    Progress,
    new_entries,
    starting_point,
)

__all__ = [
    "PARSERS",
    "CachedDocument",
    "Checkpoint",
    "CheckpointEvery",
    "CheckpointStore",
    "ClientError",
    "Consumer",
    "EntryLink",
    "FeedEntry",
    "FeedError",
    "FetchError",
    "Fetched",
    "Fetcher",
    "Handler",
    "HandlerError",
    "LastEntryVanished",
    "LinkLoop",
    "MalformedPage",
    "NotAtom",
    "Outline",
    "OutlineSource",
    "Page",
    "PageCache",
    "PageSource",
    "Parser",
    "PollPolicy",
    "Progress",
    "RetriesExhausted",
    "RetryPolicy",
    "SequenceGap",
    "Start",
    "StateError",
    "StateFile",
    "UnexpectedStatus",
    "new_entries",
    "next_interval",
    "outline_page",
    "parse_page",
    "starting_point",
]
