"""The WSGI entry point uWSGI loads (``module = simplefeed.wsgi:application``).

With ``lazy-apps`` each worker imports this after the fork, so each builds its own engine and pool,
and sets up its own logging (JSON lines on standard error: uWSGI's log) and metrics files.

A worker refuses to load the app (and uWSGI, with ``need-app``, to run) when uWSGI has no
shared area (``sharedarea = 1``: :class:`NodeWaitingSlots`), and when a feed's frozen
pages link to another base URL than the configured one (:meth:`Simplefeed.check_base_url`);
``simplefeed serve`` checks the same before it starts uWSGI. A database that does not answer is
not checked here: the service starts and answers 503 until it does (each freeze checks again).
"""

import logging
import os
import signal
import threading
from typing import NoReturn

from simplefeed import logs, metrics
from simplefeed.app import create_app, requests_only
from simplefeed.core import Simplefeed
from simplefeed.errors import BaseUrlMismatch, StoreError
from simplefeed.settings import Settings

try:
    import uwsgi  # type: ignore[import-untyped]
except ImportError:  # another WSGI server
    uwsgi = None


def refuse_to_start(reason: object) -> NoReturn:
    """Log why (CRITICAL) and stop: this worker, and uWSGI's master, which would only respawn
    a worker that exits."""
    logging.getLogger("simplefeed").critical("not starting: %s", reason)
    if uwsgi is not None:
        os.kill(uwsgi.masterpid(), signal.SIGINT)
    raise SystemExit(1) from None


settings = Settings.from_env()
logs.configure(settings.log_level)
if uwsgi is not None and not hasattr(uwsgi, "sharedarea_read64"):
    refuse_to_start(
        "uWSGI has no shared area, where the node counts its waiting long-polls: add"
        " `sharedarea = 1` to the uWSGI configuration (the shipped uwsgi.ini has it)"
    )
core = Simplefeed(settings)
try:
    core.check_base_url()
except BaseUrlMismatch as exc:
    refuse_to_start(exc)
except StoreError as exc:
    logging.getLogger("simplefeed").warning("base URL not checked (database: %s)", exc)


class NodeWaitingSlots:
    """Room for long-polls to wait, counted for the whole node in uWSGI's shared area
    (``sharedarea = 1`` in uwsgi.ini): each worker keeps the number of its waiting requests at
    its own place there (zeroed when it starts: a worker that died takes its count with it),
    and a long-poll waits only while the node's total is under seven eighths of the node's
    threads. Waiting requests hold threads, and uWSGI hands connections to whichever worker has
    a thread in ``accept``, unevenly: with every thread of the node waiting, a producer's
    connection queued in the kernel until a wait ended (30 s). A bound per worker declined the
    consumers of the busiest worker long before the node was full (docs/architecture.md,
    2026-11-23). Two workers taking the last places at once may pass the bound by one each."""

    def __init__(self) -> None:
        self._mine = 8 * uwsgi.worker_id()
        self._workers = [8 * w for w in range(1, uwsgi.numproc + 1)]
        self.limit = max(1, uwsgi.numproc * uwsgi.cores * 7 // 8)
        self._count = 0
        self._lock = threading.Lock()
        uwsgi.sharedarea_write64(0, self._mine, 0)

    def acquire(self) -> bool:
        with self._lock:
            if sum(uwsgi.sharedarea_read64(0, w) for w in self._workers) >= self.limit:
                return False
            self._count += 1
            uwsgi.sharedarea_write64(0, self._mine, self._count)
            return True

    def release(self) -> None:
        with self._lock:
            self._count -= 1
            uwsgi.sharedarea_write64(0, self._mine, self._count)


# uWSGI's cores are the requests a worker serves at once (its threads).
application = requests_only(
    create_app(
        settings,
        core=core,
        threads=uwsgi.cores if uwsgi is not None else None,
        waits=NodeWaitingSlots() if uwsgi is not None else None,
    )
)

if uwsgi is not None:
    _pid = os.getpid()
    uwsgi.atexit = lambda: metrics.worker_exited(_pid)
