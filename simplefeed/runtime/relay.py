"""``simplefeed relay``: ship a producer app's outbox to the service (:class:`Relay`).

Loaded only when asked for, like the consumer's commands: SQLAlchemy's engine and httpx would
slow every other command's start.
"""

from __future__ import annotations

import json
import re
import signal
import threading
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

import click

from simplefeed.outbox import Outbox, Relay, RelayBusy, backlog
from simplefeed.producer import Publisher
from simplefeed.settings import FEED_NAME_RE

__all__ = ["relay"]

_NAMED_FEED = re.compile(r"/feeds/([^/]+)/entries/?\Z")


def _feed(feed: str | None, url: str | None) -> str:
    """The outbox's feed: ``--feed``, or the feed the entries URL names."""
    if feed is None and url is not None:
        named = _NAMED_FEED.search(urlsplit(url).path)
        feed = named.group(1) if named else None
    if feed is None:
        raise click.UsageError(
            "name the outbox's feed with --feed (--to names none: it is the default feed's URL)"
        )
    if not FEED_NAME_RE.match(feed):
        raise click.BadParameter(f"{feed!r} is not a feed name", param_hint="--feed")
    return feed


def _token(path: Path | None) -> str:
    if path is None:
        raise click.UsageError("--token-file is needed to ship: it holds the producer token")
    token = path.read_text().strip()
    if not token:
        raise click.BadParameter(f"{path} is empty", param_hint="--token-file")
    return token


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: follow mode ends after the batch under way."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


@click.command("relay")
@click.option(
    "--outbox",
    "database",
    required=True,
    help="The producer app's database, as a SQLAlchemy URL (sqlite:///app.db,"
    " postgresql+psycopg://...).",
)
@click.option(
    "--to", "url", help="The feed's entries URL: https://feeds.example/feeds/orders/entries."
)
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file that holds the producer token.",
)
@click.option("--feed", help="The outbox's feed (default: the feed --to names).")
@click.option("--table", help="The outbox's table (default: simplefeed_outbox_FEED).")
@click.option("--follow", is_flag=True, help="Keep shipping new rows until SIGTERM or SIGINT.")
@click.option(
    "--status", is_flag=True, help="Print the backlog (rows, age of the oldest), ship nothing."
)
@click.option("--json", "as_json", is_flag=True, help="--status as one JSON object.")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1))
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    help="Serve the relay's metrics on 127.0.0.1:PORT/metrics.",
)
def relay(
    database: str,
    url: str | None,
    token_file: Path | None,
    feed: str | None,
    table: str | None,
    follow: bool,
    status: bool,
    as_json: bool,
    batch_size: int,
    metrics_port: int | None,
) -> None:
    """Ship the events an app committed to its outbox to the service, in commit order.

    Each batch is deleted from the outbox once the server has acknowledged it. Without
    --follow, it ships what is committed now and exits. Another relay shipping the same
    outbox makes it wait (--follow) or exit at once, saying so.
    """
    outbox = Outbox(_feed(feed, url), table_name=table)
    if status:
        found = backlog(outbox, database)
        if as_json:
            click.echo(json.dumps({"rows": found.rows, "oldest_age_s": found.oldest_age_s}))
        else:
            click.echo(f"{found.rows} rows, the oldest {found.oldest_age_s:.3f} s old")
        return
    if url is None:
        raise click.UsageError("--to is needed to ship: the feed's entries URL")
    if metrics_port is not None:
        from simplefeed import metrics

        metrics.serve_relay(metrics_port)
    with Publisher(url, _token(token_file)) as publisher:
        shipper = Relay(outbox, database, publisher, batch_size=batch_size)
        try:
            if follow:
                shipper.follow(_stop_on_signals())
                return
            try:
                shipped = shipper.ship()
            except RelayBusy as exc:
                click.echo(f"simplefeed relay: {exc}; it ships these rows", err=True)
                return
            click.echo(f"shipped {shipped} events")
        finally:
            shipper.close()
