"""The runtime: the command line and the WSGI entry point uWSGI loads."""

from __future__ import annotations

from collections.abc import Mapping

from simplefeed.errors import ConfigError
from simplefeed.settings import Settings, mask_url

__all__ = ["load_settings"]


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from the environment, the database URL checked by the store.

    Every command and every uWSGI worker loads them so, and refuses a database URL that no
    backend opens with the same words.
    """
    settings = Settings.from_env(environ)
    from simplefeed.store import url_problem  # the store's import is heavy: only here

    problem = url_problem(settings.database_url)
    if problem is not None:
        raise ConfigError(f"SIMPLEFEED_DATABASE_URL {mask_url(settings.database_url)!r} {problem}")
    return settings
