"""The WSGI entry point uWSGI loads (``module = simplefeed.wsgi:application``).

With ``lazy-apps`` each worker imports this after the fork, so each builds its own engine and pool,
and sets up its own logging (JSON lines on standard error: uWSGI's log) and metrics files.
"""

import os

from simplefeed import logs, metrics
from simplefeed.app import create_app
from simplefeed.settings import Settings

settings = Settings.from_env()
logs.configure(settings.log_level)
application = create_app(settings)

try:
    import uwsgi  # type: ignore[import-untyped]
except ImportError:  # another WSGI server
    pass
else:
    _pid = os.getpid()
    uwsgi.atexit = lambda: metrics.worker_exited(_pid)
