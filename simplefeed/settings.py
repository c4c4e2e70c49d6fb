"""Configuration: the one place that reads ``SIMPLEFEED_*`` environment variables.

Everything else receives a :class:`Settings` object; nothing else looks at ``os.environ``.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from simplefeed.errors import ConfigError
from simplefeed.model import BAD_PERCENT

#: Feed names appear in URLs and in archive paths, so they are restricted to a safe alphabet.
FEED_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\Z")


def base_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be the base URL, or None.

    Every document's links are built on the base URL. Archived pages keep those links for good.
    """
    if not re.match(r"^https?://[^/\s]+(/[^\s]*)?\Z", url):
        scheme = re.match(r"^(https?)://", url, re.IGNORECASE)
        if scheme is not None and not scheme[1].islower():
            return "has its scheme in capitals: write http:// or https://"
        return "is not an absolute http(s) URL"
    if len(url) > MAX_BASE_URL:
        # Every link of every document is built on it. A document's head is bounded
        # (atom.MAX_DOCUMENT_BYTES).
        return f"is longer than {MAX_BASE_URL} characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535"...
        return f"is not a URL ({exc})"
    if port == 0:
        return "has port 0"
    if "@" in parts.netloc:
        return "holds a user name or password, which every document would show"
    if "?" in url or "#" in url:
        return "has a query or a fragment: page URLs are built by appending to it"
    if BAD_PERCENT.search(url):
        return "has a % not followed by two hex digits"
    return service_url_problem(url)


def service_url_problem(url: str) -> str | None:
    """Why ``url`` looks like one of the service's own URLs pasted in, or None.

    Such a URL is a feed's ``/recent``, its ``/entries`` or a page. It is not the URL the
    service is served at. Links are built by appending to it (``.../recent/pages/1``). Frozen
    pages keep those links for good.
    """
    try:
        segments = urlsplit(url).path.rstrip("/").split("/")
    except ValueError:  # Not a URL. base_url_problem says so.
        return None
    if segments[-1] in ("recent", "entries") or segments[-2:-1] == ["pages"]:
        return (
            "is one of the service's URLs (a recent document, the entries, a page), not the URL"
            " the service is served at"
        )
    return None


@dataclass(frozen=True)
class Limits:
    """Bounds on what one publish request may carry (each answered with a 413 or 422)."""

    max_body_bytes: int = 1024 * 1024
    max_batch: int = 1000
    max_title_chars: int = 1024
    max_summary_chars: int = 16 * 1024
    max_content_chars: int = 512 * 1024
    max_json_depth: int = 32
    max_categories: int = 32
    max_links: int = 32
    #: UTF-8 bytes of a producer's entry id. entries.entry_id is VARCHAR(1024). It sits in a
    #: unique index with the feed's id. 1,024 bytes keep the index row far under PostgreSQL's
    #: btree limit of about 2,700 bytes. The same bound holds on every backend. Ids are ASCII
    #: URIs in canonical form (simplefeed.door.uris), so bytes and characters count the same.
    max_id_bytes: int = 1024

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Limits:
        """The limits the environment sets, the defaults for the others."""
        return cls(
            max_body_bytes=_integer(
                env, "SIMPLEFEED_MAX_BODY_BYTES", cls.max_body_bytes, 1, MAX_BODY_BYTES_LIMIT
            ),
            max_batch=_integer(env, "SIMPLEFEED_MAX_BATCH", cls.max_batch, 1),
            max_title_chars=_integer(env, "SIMPLEFEED_MAX_TITLE_CHARS", cls.max_title_chars, 1),
            max_summary_chars=_integer(
                env, "SIMPLEFEED_MAX_SUMMARY_CHARS", cls.max_summary_chars, 1
            ),
            max_content_chars=_integer(
                env, "SIMPLEFEED_MAX_CONTENT_CHARS", cls.max_content_chars, 1
            ),
            max_json_depth=_integer(
                env, "SIMPLEFEED_MAX_JSON_DEPTH", cls.max_json_depth, 1, MAX_JSON_DEPTH_LIMIT
            ),
            max_categories=_integer(env, "SIMPLEFEED_MAX_CATEGORIES", cls.max_categories, 0),
            max_links=_integer(env, "SIMPLEFEED_MAX_LINKS", cls.max_links, 0),
            max_id_bytes=_integer(env, "SIMPLEFEED_MAX_ID_BYTES", cls.max_id_bytes, 16, 1024),
        )


#: The most SIMPLEFEED_MAX_JSON_DEPTH may be. Readers decode JSON content recursively.
#: Python's json, which the Simplefeed consumer uses, stops near 1,000 levels. The caller's own
#: stack takes some of those. Content accepted deeper would stop every such reader at its page
#: for good.
MAX_JSON_DEPTH_LIMIT = 256
#: The most characters of SIMPLEFEED_BASE_URL, and of a feed's title. The title bound holds
#: whatever SIMPLEFEED_MAX_TITLE_CHARS allows an entry's title. Each is in every document's
#: head. atom.MAX_DOCUMENT_BYTES leaves that head 64 KiB.
MAX_BASE_URL = 1024
MAX_FEED_TITLE = 1024
#: The most entries a page may hold (SIMPLEFEED_PAGE_SIZE, ``feed create --page-size``). A
#: live document holds up to a page and is rendered whole. 10,000 entries are megabytes.
MAX_PAGE_SIZE = 10_000
#: The most SIMPLEFEED_RECENT_MAX_AGE may be, which is a day. Caches, CDNs among them, keep
#: the live documents that long. Consumers poll no sooner. So a larger value, such as a few
#: zeros too many, hides every new event from readers for as long.
MAX_RECENT_MAX_AGE = 86400
#: The most SIMPLEFEED_MAX_WAIT may be. A waiting request then ends well within uwsgi.ini's
#: harakiri.
MAX_WAIT_LIMIT = 50
#: The most uWSGI worker processes (SIMPLEFEED_PROCESSES, ``serve --processes``). Each is a
#: Python with its own database connections, tens of MB. 10^9 is a typo, not a machine.
MAX_PROCESSES = 256
#: The most threads per worker (SIMPLEFEED_THREADS). Each holds a 64 KiB request buffer and a
#: stack. 10,000 per worker already take over a GiB of memory.
MAX_THREADS = 10_000
#: The most SIMPLEFEED_MAX_BODY_BYTES may be. A publish's body is read whole into memory. As
#: many requests as there are threads may do so at once.
MAX_BODY_BYTES_LIMIT = 64 * 1024 * 1024

#: Levels SIMPLEFEED_LOG_LEVEL accepts (the standard library's names).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class Settings:
    #: Relative SQLite paths are relative to the working directory of the command.
    database_url: str = "sqlite:///var/simplefeed.sqlite3"
    archive_dir: Path = Path("archive")
    #: SIMPLEFEED_ARCHIVE_URL (``s3://BUCKET/PREFIX``). Every archived page is put in this
    #: bucket too, besides the archive directory. None keeps pages in the directory alone.
    archive_url: str | None = None
    base_url: str = "http://localhost:8080"
    #: Whether SIMPLEFEED_BASE_URL was set (else ``serve --port N`` uses http://localhost:N).
    base_url_given: bool = False
    page_size: int = 100
    recent_max_age: int = 10
    #: The longest a request may wait for a feed to change (``Prefer: wait=N``, RFC 7240).
    #: 0 turns waiting off. At most 50, because uwsgi.ini's harakiri ends a request after 60 s.
    max_wait: int = 30
    default_feed: str = "events"
    #: The least severe level logged. INFO logs one access line per request.
    log_level: str = "INFO"
    #: Whether ``GET /metrics`` (Prometheus) is served. SIMPLEFEED_METRICS=off turns it off.
    metrics: bool = True
    #: The least free space the database's directory (SQLite) and the archive directory need.
    #: Below it, publishing refuses with a 503 and /healthz is unhealthy. So a full disk is met
    #: before a write fails halfway.
    min_free_bytes: int = 64 * 1024 * 1024
    #: uWSGI's worker processes and threads per worker. uwsgi.ini reads the variables. They
    #: are checked here, because uWSGI reads "abc" or "0" threads as none. It then serves one
    #: request at a time.
    processes: int = 4
    threads: int = 200
    limits: Limits = field(default_factory=Limits)
    #: Whether SIMPLEFEED_PAGE_SIZE was set. It only sizes feeds created after, because a
    #: feed's page size is fixed when it is created.
    page_size_given: bool = False
    #: SIMPLEFEED_HTTP_SOCKET (uwsgi.ini's HTTP address, ``host:port``) when it is set.
    http_socket: str | None = None
    #: SIMPLEFEED_UWSGI_SOCKET (uwsgi.ini's uwsgi-protocol socket, for nginx) when it is set.
    uwsgi_socket: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from ``environ``, by default the process's.

        Raises :class:`ConfigError` if one is wrong.
        """
        env = os.environ if environ is None else environ
        for name in _known_names():
            if name in env and not env[name].strip():
                raise ConfigError(f"{name} is set but empty: unset it or give a value")
        base_url = env.get("SIMPLEFEED_BASE_URL") or cls.base_url
        problem = base_url_problem(base_url)
        if problem is not None:
            raise ConfigError(f"SIMPLEFEED_BASE_URL {base_url!r} {problem}")
        # The store checks the database URL (simplefeed.runtime.load_settings).
        database_url = env.get("SIMPLEFEED_DATABASE_URL") or cls.database_url
        default_feed = env.get("SIMPLEFEED_DEFAULT_FEED") or cls.default_feed
        if not FEED_NAME_RE.match(default_feed):
            raise ConfigError(f"SIMPLEFEED_DEFAULT_FEED {default_feed!r} is not a valid feed name")
        log_level = (env.get("SIMPLEFEED_LOG_LEVEL") or cls.log_level).upper()
        if log_level not in LOG_LEVELS:
            raise ConfigError(
                f"SIMPLEFEED_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}"
            )
        metrics = (env.get("SIMPLEFEED_METRICS") or "on").lower()
        if metrics not in ("on", "off"):
            raise ConfigError(f"SIMPLEFEED_METRICS must be on or off, got {metrics!r}")
        http_socket, uwsgi_socket = _sockets(env)
        archive_url = env.get("SIMPLEFEED_ARCHIVE_URL") or None
        if archive_url is not None:
            archive_url_parts(archive_url)  # ConfigError if not s3://BUCKET/PREFIX.
        return cls(
            database_url=database_url,
            # Absolute from here on, so that every path a command prints says which directory
            # it is. A cron job run elsewhere would otherwise check another, empty, archive.
            archive_dir=Path(env.get("SIMPLEFEED_ARCHIVE_DIR") or "archive").absolute(),
            archive_url=archive_url,
            base_url=base_url.rstrip("/"),
            base_url_given=bool(env.get("SIMPLEFEED_BASE_URL")),
            page_size=_integer(env, "SIMPLEFEED_PAGE_SIZE", cls.page_size, 1, MAX_PAGE_SIZE),
            recent_max_age=_integer(
                env, "SIMPLEFEED_RECENT_MAX_AGE", cls.recent_max_age, 0, MAX_RECENT_MAX_AGE
            ),
            max_wait=_integer(env, "SIMPLEFEED_MAX_WAIT", cls.max_wait, 0, MAX_WAIT_LIMIT),
            default_feed=default_feed,
            log_level=log_level,
            metrics=metrics == "on",
            min_free_bytes=_integer(env, "SIMPLEFEED_MIN_FREE_BYTES", cls.min_free_bytes, 0),
            processes=_integer(env, "SIMPLEFEED_PROCESSES", cls.processes, 1, MAX_PROCESSES),
            threads=_integer(env, "SIMPLEFEED_THREADS", cls.threads, 1, MAX_THREADS),
            limits=Limits.from_env(env),
            page_size_given="SIMPLEFEED_PAGE_SIZE" in env,
            http_socket=http_socket,
            uwsgi_socket=uwsgi_socket,
        )

    def describe(self) -> dict[str, str | int | None]:
        """Return the effective settings by variable name, for ``simplefeed config --json``.

        Integers are numbers and passwords are masked. None means unset, with nothing in its
        place. uWSGI's sockets are included, because an operator looks for them here too.
        """
        limits = self.limits
        return {
            "SIMPLEFEED_DATABASE_URL": mask_url(self.database_url),
            "SIMPLEFEED_ARCHIVE_DIR": str(self.archive_dir.absolute()),
            "SIMPLEFEED_ARCHIVE_URL": self.archive_url,
            "SIMPLEFEED_BASE_URL": self.base_url,
            "SIMPLEFEED_DEFAULT_FEED": self.default_feed,
            "SIMPLEFEED_PAGE_SIZE": self.page_size,
            "SIMPLEFEED_RECENT_MAX_AGE": self.recent_max_age,
            "SIMPLEFEED_MAX_WAIT": self.max_wait,
            "SIMPLEFEED_LOG_LEVEL": self.log_level,
            "SIMPLEFEED_METRICS": "on" if self.metrics else "off",
            "SIMPLEFEED_MIN_FREE_BYTES": self.min_free_bytes,
            "SIMPLEFEED_PROCESSES": self.processes,
            "SIMPLEFEED_THREADS": self.threads,
            "SIMPLEFEED_HTTP_SOCKET": self.http_socket or DEFAULT_HTTP_SOCKET,
            "SIMPLEFEED_UWSGI_SOCKET": self.uwsgi_socket,
            "SIMPLEFEED_MAX_BODY_BYTES": limits.max_body_bytes,
            "SIMPLEFEED_MAX_BATCH": limits.max_batch,
            "SIMPLEFEED_MAX_TITLE_CHARS": limits.max_title_chars,
            "SIMPLEFEED_MAX_SUMMARY_CHARS": limits.max_summary_chars,
            "SIMPLEFEED_MAX_CONTENT_CHARS": limits.max_content_chars,
            "SIMPLEFEED_MAX_JSON_DEPTH": limits.max_json_depth,
            "SIMPLEFEED_MAX_CATEGORIES": limits.max_categories,
            "SIMPLEFEED_MAX_LINKS": limits.max_links,
            "SIMPLEFEED_MAX_ID_BYTES": limits.max_id_bytes,
        }

    def notes(self) -> dict[str, str]:
        """What ``simplefeed config`` says beside some values, such as a base URL nobody set.

        The store adds the file a database URL names (:func:`simplefeed.store.database_file`).
        """
        notes = {}
        if not self.base_url_given:
            notes["SIMPLEFEED_BASE_URL"] = "default"
        if self.http_socket is None:
            notes["SIMPLEFEED_HTTP_SOCKET"] = "default; `serve --host`/`--port` listen elsewhere"
        if self.uwsgi_socket is None:
            notes["SIMPLEFEED_UWSGI_SOCKET"] = "unset: no uwsgi-protocol socket"
        return notes


def _integer(
    env: Mapping[str, str], name: str, default: int, minimum: int, maximum: int | None = None
) -> int:
    """The integer variable ``name`` sets, within its bounds, or ``default`` if it is unset."""
    raw = env.get(name)
    if raw is None:
        return default
    # Decimal ASCII digits only. Python's int() also reads "2_00" and fullwidth digits as 200.
    # uWSGI reads those as 2 and 0. It reads SIMPLEFEED_THREADS and SIMPLEFEED_PROCESSES too.
    if not _DECIMAL.fullmatch(raw.strip()):
        raise ConfigError(f"{name} must be an integer, got {raw!r}")
    value = int(raw)
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum}, got {value}")
    return value


def _sockets(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """SIMPLEFEED_HTTP_SOCKET and SIMPLEFEED_UWSGI_SOCKET, checked."""
    http_socket = env.get("SIMPLEFEED_HTTP_SOCKET")
    if http_socket is not None:
        socket_address(http_socket)  # Checked here. `serve` and uWSGI's load use it.
    uwsgi_socket = env.get("SIMPLEFEED_UWSGI_SOCKET")
    if uwsgi_socket is not None and _spaced(uwsgi_socket):
        # uWSGI binds "/run/sf\nock" as /run/sf. nginx's uwsgi_pass does not look there.
        raise ConfigError(
            "SIMPLEFEED_UWSGI_SOCKET must be a socket's path or HOST:PORT, without spaces or"
            f" control characters, got {uwsgi_socket!r}"
        )
    return http_socket, uwsgi_socket


#: Variables uwsgi.ini reads besides the settings. ``simplefeed serve`` sets the first from its
#: options, and the last to the page plugin it built (simplefeed/runtime/plugin.py).
UWSGI_VARIABLES = ("SIMPLEFEED_HTTP_SOCKET", "SIMPLEFEED_UWSGI_SOCKET", "SIMPLEFEED_PAGE_PLUGIN")
#: Where uwsgi.ini listens without SIMPLEFEED_HTTP_SOCKET. It is uwsgi.ini's own default too,
#: and a test holds the two equal.
DEFAULT_HTTP_SOCKET = "127.0.0.1:8080"
_PREFIX = "SIMPLEFEED_"
#: The example base URL every message that asks for one gives.
BASE_URL_EXAMPLE = "SIMPLEFEED_BASE_URL=https://feeds.example.com"


def _known_names() -> tuple[str, ...]:
    """Every variable this project's server reads, the settings and uwsgi.ini's."""
    return tuple(Settings().describe())


def socket_address(value: str) -> tuple[str, int]:
    """The host and port of SIMPLEFEED_HTTP_SOCKET, or :class:`ConfigError`.

    It takes ``host:port``, ``[v6]:port`` or ``:port``. The last is every address, given as
    0.0.0.0.
    """
    host, sep, port = value.rpartition(":")
    if (
        not sep
        or not port.isascii()
        or not port.isdigit()
        or not 1 <= int(port) <= 65535
        or _spaced(host)
    ):
        raise ConfigError(
            f"SIMPLEFEED_HTTP_SOCKET must be HOST:PORT (as 127.0.0.1:8080), got {value!r}"
        )
    return host.removeprefix("[").removesuffix("]") or "0.0.0.0", int(port)


_DECIMAL = re.compile(r"-?[0-9]+")


def _spaced(text: str) -> bool:
    """Whether ``text`` holds a space or a control character, such as a newline, a tab or ESC.

    No socket address does. uWSGI cuts an address at a newline.
    """
    return any(c.isspace() or not c.isprintable() for c in text)


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` reaches this machine alone."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # A host name may be any of the machine's addresses.
        return False


def unset_base_url_problem(listening: str, host: str, base_url_given: bool) -> str | None:
    """Why the service may not listen on ``host`` without SIMPLEFEED_BASE_URL, or None.

    ``listening`` says where ``host`` came from. Without the base URL, the links would say
    http://localhost:PORT. Every reader elsewhere follows that to its own machine. Archived pages
    say it for good.
    """
    if base_url_given or is_loopback(host):
        return None
    return (
        f"{listening} listens beyond this machine, but SIMPLEFEED_BASE_URL is unset, so every"
        " link (archived pages' for good) would say http://localhost:...: set the URL readers"
        f" reach the service at, e.g. {BASE_URL_EXAMPLE}"
    )


def loopback_base_url_warning(listening: str, host: str, base_url: str) -> str | None:
    """A warning if the service listens beyond this machine on a loopback base URL, or None.

    The service listens on ``host``, and ``listening`` says where that came from.
    SIMPLEFEED_BASE_URL names this machine's loopback. This is not refused, because some
    readers follow such links rightly. They are readers on this machine, or readers reaching a
    container's published port as localhost. Readers elsewhere follow the links to their own
    machine.
    """
    if is_loopback(host):
        return None
    try:
        named = urlsplit(base_url).hostname or ""
    except ValueError:
        return None
    if not is_loopback(named):
        return None
    return (
        f"{listening} listens beyond this machine, but SIMPLEFEED_BASE_URL={base_url} links"
        " to its loopback: readers elsewhere follow every link (archived pages' for good) to"
        " their own machine; right only if every reader reaches the service as localhost"
        f" (a container's published port). Else set the URL readers reach it at, e.g."
        f" {BASE_URL_EXAMPLE} (`simplefeed archive rebase` moves archived pages' links)"
    )


def proxied_base_url_problem(uwsgi_socket: str | None, base_url_given: bool) -> str | None:
    """Why the service may not run behind a proxy without SIMPLEFEED_BASE_URL, or None.

    SIMPLEFEED_UWSGI_SOCKET puts it behind a proxy, such as nginx's ``uwsgi_pass``. Without
    the base URL, the links would say http://localhost:PORT. That is uWSGI's own HTTP port,
    which is never where a proxy's readers are. Archived pages say it for good.
    """
    if base_url_given or not uwsgi_socket:
        return None
    return (
        f"SIMPLEFEED_UWSGI_SOCKET={uwsgi_socket} puts the service behind a proxy, but"
        " SIMPLEFEED_BASE_URL is unset, so every link (archived pages' for good) would say"
        " http://localhost:..., uWSGI's own HTTP port: set the URL readers reach the proxy at,"
        f" e.g. {BASE_URL_EXAMPLE}"
    )


#: An S3 bucket name. It has 3 to 63 lowercase letters, digits, dots and hyphens. It starts
#: and ends with a letter or a digit.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
#: One segment of a key prefix. It holds only the characters a URL path carries as they are
#: (RFC 3986 "unreserved"). So a CDN can map a path onto the bucket without escaping.
_PREFIX_SEGMENT = re.compile(r"[A-Za-z0-9._~-]+\Z")


def archive_url_parts(url: str) -> tuple[str, str]:
    """The bucket and key prefix of SIMPLEFEED_ARCHIVE_URL (``s3://BUCKET/PREFIX``).

    The prefix may be empty. Raises :class:`ConfigError` for anything else, because a page
    written under a mistyped prefix would be at URLs that no one asks for.
    """
    example = "s3://BUCKET/PREFIX, e.g. s3://feeds-archive/simplefeed"
    scheme, sep, rest = url.partition("://")
    if scheme != "s3" or not sep:
        raise ConfigError(f"SIMPLEFEED_ARCHIVE_URL must be {example}, got {url!r}")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ConfigError(
            f"SIMPLEFEED_ARCHIVE_URL {url!r}: {bucket!r} is not an S3 bucket name (3 to 63"
            " lowercase letters, digits, dots and hyphens)"
        )
    prefix = prefix.removesuffix("/")
    segments = prefix.split("/") if prefix else []
    for segment in segments:
        if segment in (".", "..") or not _PREFIX_SEGMENT.match(segment):
            raise ConfigError(
                f"SIMPLEFEED_ARCHIVE_URL {url!r}: the key prefix {prefix!r} must be segments of"
                " letters, digits, '.', '_', '~' and '-' between single slashes, none . or .."
            )
    return bucket, prefix


def static_archive_problem(given: str | None, cwd: str) -> str | None:
    """Why uWSGI's static route (uwsgi.ini) cannot serve the archive directory, or None.

    The route takes SIMPLEFEED_ARCHIVE_DIR as ``given``, or ``archive`` in ``cwd``. uWSGI
    serves a file only when its real path starts with the path asked for. A relative path, a
    symbolic link or a trailing slash in it would leave every archived page without an answer.
    """
    path = given or os.path.join(cwd, "archive")
    real = os.path.realpath(os.path.join(cwd, path))
    if path == real:
        return None
    return (
        f"SIMPLEFEED_ARCHIVE_DIR={path} is not the archive directory's real path, so uWSGI's"
        f" static route would serve no archived page: set it to {real}"
        " (`simplefeed serve` does so itself)"
    )


#: Names taken for settings that no fuzzy match finds, or finds wrong. Each key is what
#: follows SIMPLEFEED_. Each value is the setting meant, or the command's option.
ALIASES = {
    "URL": "SIMPLEFEED_BASE_URL",
    "PUBLIC_URL": "SIMPLEFEED_BASE_URL",
    "EXTERNAL_URL": "SIMPLEFEED_BASE_URL",
    "ROOT_URL": "SIMPLEFEED_BASE_URL",
    "SERVER_URL": "SIMPLEFEED_BASE_URL",
    "DB_URL": "SIMPLEFEED_DATABASE_URL",
    "DB": "SIMPLEFEED_DATABASE_URL",
    "DSN": "SIMPLEFEED_DATABASE_URL",
    "DATABASE_PATH": "SIMPLEFEED_DATABASE_URL",
    "DB_PATH": "SIMPLEFEED_DATABASE_URL",
    "PORT": "`simplefeed serve --port` or SIMPLEFEED_HTTP_SOCKET",
    "HOST": "`simplefeed serve --host` or SIMPLEFEED_HTTP_SOCKET",
    "LISTEN": "SIMPLEFEED_HTTP_SOCKET",
    "BIND": "SIMPLEFEED_HTTP_SOCKET",
    "WORKERS": "SIMPLEFEED_PROCESSES",
    "ARCHIVE_PATH": "SIMPLEFEED_ARCHIVE_DIR",
    "ARCHIVE": "SIMPLEFEED_ARCHIVE_DIR",
    "MAX_AGE": "SIMPLEFEED_RECENT_MAX_AGE",
    "FEED": "SIMPLEFEED_DEFAULT_FEED",
    "FEED_NAME": "SIMPLEFEED_DEFAULT_FEED",
}
#: How alike a prefix must be to SIMPLEFEED, its underscores dropped. Then a variable whose
#: rest is a setting's name is taken for that setting. SIMPLFEED_BASE_URL scores 0.95 and
#: SIMPLE_FEED_BASE_URL scores 1.
_PREFIX_MISSPELT = 0.85
#: How alike a variable must be to a setting's name to be taken for a misspelling of it. This
#: is difflib's ratio of the names without their prefix. ``PAGESIZE`` is 0.94 of
#: ``PAGE_SIZE``. ``MAX_TITLE_LENGTH`` is 0.71 of ``MAX_TITLE_CHARS``. The project's other
#: ``SIMPLEFEED_*`` variables are at most 0.53 of any. Those are the tests', the benchmarks',
#: the deploy recipes' and the consumer's handler's.
_MISSPELT = 0.7


def misspelt_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """A warning for each variable set that is not a setting but looks like one's name.

    A misspelt setting is otherwise ignored without a word, and the service runs on the
    default. With ``SIMPLEFEED_PAGESIZE=10``, every new feed gets pages of 100.
    """
    env = os.environ if environ is None else environ
    known = {name.removeprefix(_PREFIX): name for name in _known_names()}
    warnings = []
    for name in sorted(env):
        meant = setting_meant(name, known)
        if meant is not None:
            warnings.append(
                f"{name} is set but is not a setting, so it is ignored: did you mean {meant}?"
            )
    return warnings


def setting_meant(name: str, known: Mapping[str, str]) -> str | None:
    """The setting or option that variable ``name`` was likely meant for, or None.

    ``name`` is not a setting itself. ``known`` maps each setting's name without SIMPLEFEED_
    to the name.
    """
    upper = name.upper()
    if upper.startswith(_PREFIX):
        rest = upper[len(_PREFIX) :]
        if name.removeprefix(_PREFIX) in known:
            return None
        if rest in ALIASES:
            return ALIASES[rest]
        close = difflib.get_close_matches(rest, list(known), n=1, cutoff=_MISSPELT)
        return known[close[0]] if close else None
    # A misspelt prefix (SIMPLFEED_, SIMPLE_FEED_) before a setting's name exactly.
    for at in (i for i, c in enumerate(upper) if c == "_"):
        head, rest = upper[:at].replace("_", ""), upper[at + 1 :]
        if rest in known or rest in ALIASES:
            ratio = difflib.SequenceMatcher(None, head, _PREFIX.rstrip("_")).ratio()
            if ratio >= _PREFIX_MISSPELT:
                return known.get(rest) or ALIASES[rest]
    return None


#: Query parameters of a database URL whose values are secrets.
_SECRET_PARAMS = frozenset({"password", "passwd", "pass", "secret", "token", "sslpassword"})


def mask_url(url: str) -> str:
    """Return ``url`` with its password and secret query parameters replaced by ``***``.

    Messages, ``simplefeed config`` and logs show a database URL this way.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    masked = url
    if parts.password is not None:
        userinfo, _, host = parts.netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        masked = masked.replace(parts.netloc, f"{user}:***@{host}", 1)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if any(k.lower() in _SECRET_PARAMS for k, _ in pairs):
        query = "&".join(
            f"{k}=***" if k.lower() in _SECRET_PARAMS else f"{k}={v}" for k, v in pairs
        )
        masked = masked.replace("?" + parts.query, "?" + query, 1)
    return masked
