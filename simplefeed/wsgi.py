"""The WSGI entry point uWSGI loads (``module = simplefeed.wsgi:application``).

With ``lazy-apps`` each worker imports this after the fork, so each builds its own engine and pool,
and sets up its own logging (JSON lines on standard error: uWSGI's log) and metrics files.

A worker refuses to load the app (and uWSGI, with ``need-app``, to run) when a feed's frozen
pages link to another base URL than the configured one (:meth:`Simplefeed.check_base_url`);
``simplefeed serve`` checks the same before it starts uWSGI. A database that does not answer is
not checked here: the service starts and answers 503 until it does (each freeze checks again).
"""

import logging
import os
import signal

from simplefeed import logs, metrics
from simplefeed.app import create_app, requests_only
from simplefeed.core import Simplefeed
from simplefeed.errors import BaseUrlMismatch, StoreError
from simplefeed.settings import Settings

try:
    import uwsgi  # type: ignore[import-untyped]
except ImportError:  # another WSGI server
    uwsgi = None

settings = Settings.from_env()
logs.configure(settings.log_level)
core = Simplefeed(settings)
try:
    core.check_base_url()
except BaseUrlMismatch as exc:
    logging.getLogger("simplefeed").critical("not starting: %s", exc)
    if uwsgi is not None:  # a worker that exits is only respawned: stop the master too
        os.kill(uwsgi.masterpid(), signal.SIGINT)
    raise SystemExit(1) from None
except StoreError as exc:
    logging.getLogger("simplefeed").warning("base URL not checked (database: %s)", exc)
# uWSGI's cores are the requests a worker serves at once (its threads).
application = requests_only(
    create_app(settings, core=core, threads=uwsgi.cores if uwsgi is not None else None)
)

if uwsgi is not None:
    _pid = os.getpid()
    uwsgi.atexit = lambda: metrics.worker_exited(_pid)
