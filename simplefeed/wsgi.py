"""The WSGI entry point uWSGI loads (``module = simplefeed.wsgi:application``).

With ``lazy-apps`` each worker imports this after the fork, so each builds its own engine and pool.
"""

from simplefeed.app import create_app
from simplefeed.settings import Settings

application = create_app(Settings.from_env())
