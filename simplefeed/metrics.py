"""Prometheus metrics (``GET /metrics``), the one module that imports ``prometheus_client``.

Under uWSGI, every worker is a process of its own. ``simplefeed serve`` points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory per server run. There each worker keeps its
counters and histograms in files. Any worker may answer a scrape, and it adds up every worker's
files (``MultiProcessCollector``). Without that variable, the values are the process's own.
That holds for tests in one process, and for another WSGI server with one process.

Per-feed state (head sequence, head age, archived pages) is not counted. It is read from the
database at scrape time. So every worker answers the same, and nothing is lost when a worker
restarts.

Every read is counted, archived pages too, because the shipped nginx block passes every request
to the app (deploy/nginx). A cache in front answers some reads itself, and those are its to
count.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from simplefeed.model import Feed

CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: How the directory of a ``simplefeed serve`` run's values is named, in the temporary
#: directory. Also the file in it that names the process that owns it. That process is serve,
#: which becomes uWSGI's master, and it removes the directory when it exits.
RUN_DIRECTORY_PREFIX = "simplefeed-metrics-"
RUN_OWNER = "serve.pid"


def _pid() -> int:
    """This process's id, as the kernel gave it at its start or fork (no system call)."""
    return _PIDS[0]


_PIDS = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _PIDS.__setitem__(0, os.getpid()))
if os.environ.get(MULTIPROCESS_ENV):
    # Each value written asks which process writes it, so as to start files of its own after a
    # fork. By default that is a system call per value, three per read answered.
    values.ValueClass = values.MultiProcessValue(process_identifier=_pid)  # type: ignore[no-untyped-call]

#: This process's metrics. They are not in prometheus_client's global registry, because apps
#: made in one test process share these. Nothing else registers here.
_OWN = CollectorRegistry(auto_describe=True)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

EVENTS_PUBLISHED = Counter(
    "simplefeed_events_published",
    "Events appended to a feed (replays of stored events are not counted).",
    ["feed"],
    registry=_OWN,
)
PUBLISH_SECONDS = Histogram(
    "simplefeed_publish_duration_seconds",
    "Time to answer a successful publish request (POST .../entries), in seconds.",
    ["feed"],
    buckets=_LATENCY_BUCKETS,
    registry=_OWN,
)
PAGES_FROZEN = Counter(
    "simplefeed_pages_frozen",
    "Pages that filled and were frozen (archived for good).",
    ["feed"],
    registry=_OWN,
)
APPEND_PUBLISHES = Histogram(
    "simplefeed_append_publishes",
    "Publishes committed per append transaction: more than one where group commit joined"
    " concurrent single-event publishes (its count is the number of commits).",
    ["feed"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
    registry=_OWN,
)
READS = Counter(
    "simplefeed_reads",
    "Feed documents answered by the application, by document (recent, page) and status (200, 304).",
    ["document", "status"],
    registry=_OWN,
)
READ_SECONDS = Histogram(
    "simplefeed_read_duration_seconds",
    "Time to answer a feed document read, by document and status, in seconds.",
    ["document", "status"],
    buckets=_LATENCY_BUCKETS,
    registry=_OWN,
)
WAITS_DECLINED = Counter(
    "simplefeed_waits_declined",
    "Long-polls (Prefer: wait) answered at once because the node's room to wait was full (its"
    " threads are kept for producers and reads).",
    registry=_OWN,
)
ERRORS = Counter(
    "simplefeed_http_errors",
    "Requests answered with a 4xx or 5xx status, by status.",
    ["status"],
    registry=_OWN,
)


def published(feed: str, created: int, seconds: float) -> None:
    EVENTS_PUBLISHED.labels(feed).inc(created)
    PUBLISH_SECONDS.labels(feed).observe(seconds)


def appends_committed(feed: str, publishes: int) -> None:
    """An append transaction committed, for ``publishes`` publishes."""
    APPEND_PUBLISHES.labels(feed).observe(publishes)


def pages_frozen(feed: str, count: int) -> None:
    if count:
        PAGES_FROZEN.labels(feed).inc(count)


#: (document, status) -> the read counter's and histogram's children for those labels. Every
#: answered read counts once. prometheus_client's ``labels`` checks and locks each time. That is
#: 1.2 us of a read's 4.3 us in-process, with the multiprocess values uWSGI's workers use.
#: There are four at most: the recent document or a page, 200 or 304.
_READ_CHILDREN: dict[tuple[str, int], tuple[Counter, Histogram]] = {}


def read(document: str, status: int, seconds: float) -> None:
    children = _READ_CHILDREN.get((document, status))
    if children is None:
        labels = (document, str(status))
        children = _READ_CHILDREN[document, status] = (
            READS.labels(*labels),
            READ_SECONDS.labels(*labels),
        )
    children[0].inc()
    children[1].observe(seconds)


def wait_declined() -> None:
    WAITS_DECLINED.inc()


def error(status: int) -> None:
    ERRORS.labels(str(status)).inc()


#: A relay's metrics (``simplefeed relay --metrics-port``): a process of its own, apart from
#: the service's.
RELAY = CollectorRegistry(auto_describe=True)
RELAY_BACKLOG_ROWS = Gauge(
    "simplefeed_relay_backlog_rows",
    "Rows in the outbox that the server has not acknowledged yet.",
    ["feed"],
    registry=RELAY,
)
RELAY_BACKLOG_AGE = Gauge(
    "simplefeed_relay_backlog_oldest_seconds",
    "Age of the oldest row in the outbox, 0 when it is empty.",
    ["feed"],
    registry=RELAY,
)
RELAY_SHIPPED = Counter(
    "simplefeed_relay_shipped_events",
    "Events the relay shipped and the server acknowledged.",
    ["feed"],
    registry=RELAY,
)


def relay_backlog(feed: str, rows: int, oldest_age_s: float) -> None:
    RELAY_BACKLOG_ROWS.labels(feed).set(rows)
    RELAY_BACKLOG_AGE.labels(feed).set(oldest_age_s)


def relay_shipped(feed: str, count: int) -> None:
    RELAY_SHIPPED.labels(feed).inc(count)


def serve_relay(port: int, host: str = "127.0.0.1") -> None:
    """Serve the relay's metrics on ``http://host:port/metrics``, from a thread."""
    start_http_server(port, addr=host, registry=RELAY)


class _Feeds(Collector):
    """Head sequence, head age and archived pages of every feed, read when scraped."""

    def __init__(self, feeds: Sequence[Feed], now_us: int) -> None:
        self.feeds = feeds
        self.now_us = now_us

    def collect(self) -> Iterator[Metric]:
        head = GaugeMetricFamily(
            "simplefeed_head_sequence",
            "Sequence number of the feed's newest entry.",
            labels=["feed"],
        )
        age = GaugeMetricFamily(
            "simplefeed_head_age_seconds",
            "Seconds since the feed last changed (absent while it is empty); below zero, this"
            " server's clock is behind that change.",
            labels=["feed"],
        )
        pages = GaugeMetricFamily(
            "simplefeed_archived_pages", "Archived pages of the feed.", labels=["feed"]
        )
        for feed in self.feeds:
            head.add_metric([feed.name], feed.head_seq)
            pages.add_metric([feed.name], feed.head_seq // feed.page_size)
            if feed.head_updated_us is not None:
                age.add_metric([feed.name], (self.now_us - feed.modified_us) / 1e6)
        yield from (head, age, pages)


class _Own(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from _OWN.collect()


class _Waiting(Collector):
    """Long-polls waiting now on the node, read from the node's count when scraped."""

    def __init__(self, waiting: int) -> None:
        self.waiting = waiting

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "simplefeed_long_polls_waiting",
            "Long-polls (Prefer: wait) waiting now on this node.",
            value=self.waiting,
        )


class _BucketWaiting(Collector):
    """The archived pages waiting for the bucket, read from the archive directory when
    scraped (every worker sees the same markers)."""

    def __init__(self, pages: int, since_s: float | None) -> None:
        self.pages = pages
        self.since_s = since_s

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "simplefeed_archive_pages_waiting",
            "Archived pages waiting to be put in the bucket (SIMPLEFEED_ARCHIVE_URL).",
            value=self.pages,
        )
        if self.since_s is not None:
            yield GaugeMetricFamily(
                "simplefeed_archive_pages_waiting_since_seconds",
                "When the oldest page waiting for the bucket began to wait (Unix time).",
                value=self.since_s,
            )


def scrape(
    feeds: Callable[[], Sequence[Feed]],
    now_us: int,
    waiting: int | None = None,
    bucket: Callable[[], tuple[int, float | None] | None] = lambda: None,
) -> bytes:
    """The Prometheus text exposition: every worker's counts, each feed's state, and the
    archived pages waiting for the bucket.

    ``waiting`` is the node's count of waiting long-polls. It is None where no bound counts
    them (a single process, or tests), and then the gauge is left out. ``bucket`` gives the
    pages waiting for the bucket and since when, or None without SIMPLEFEED_ARCHIVE_URL.
    """
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get(MULTIPROCESS_ENV):
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Own())
    registry.register(_Feeds(feeds(), now_us))
    if waiting is not None:
        registry.register(_Waiting(waiting))
    found = bucket()
    if found is not None:
        registry.register(_BucketWaiting(*found))
    return generate_latest(registry)


def worker_exited(pid: int) -> None:
    """Drop a finished worker's live-only values (multiprocess mode); its counts stay summed."""
    if os.environ.get(MULTIPROCESS_ENV):
        mark_process_dead(pid)  # type: ignore[no-untyped-call]


# -- the directory of a server run's values ---------------------------------------------------


def new_run_directory(parent: Path | None = None) -> Path:
    """A fresh directory for a server run's multiprocess values, naming this process as its owner.

    It is made after removing the directories of runs whose owner is gone. uWSGI removes its
    own when it exits, but not when it is killed (``kill -9``, a crash, a power cut). Otherwise
    one directory would be left per such run, for good.
    """
    parent = Path(tempfile.gettempdir()) if parent is None else parent
    for stale in stale_run_directories(parent):
        shutil.rmtree(stale, ignore_errors=True)
    directory = Path(tempfile.mkdtemp(prefix=RUN_DIRECTORY_PREFIX, dir=parent))
    (directory / RUN_OWNER).write_text(f"{os.getpid()}\n")
    return directory


def stale_run_directories(parent: Path) -> list[Path]:
    """The run directories in ``parent`` whose owner no longer runs.

    One without an owner file, an older release's, is left alone, because nothing says whether
    it is in use.
    """
    found = []
    for directory in sorted(parent.glob(RUN_DIRECTORY_PREFIX + "*")):
        try:
            owner = int((directory / RUN_OWNER).read_text())
        except (OSError, ValueError):
            continue
        if not _runs(owner):
            found.append(directory)
    return found


def _runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # Another user's process.
        return True
    return True
