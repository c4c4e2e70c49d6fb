"""``simplefeed consumer``: working on a consumer's state file from the shell.

``parked``, ``retry`` and ``drop`` work on the entries parked with ``--on-error park``.
``status`` says where each consumer stands. ``reset`` moves a consumer's checkpoint, for
example after a server's restore lost entries it had read. None of them creates a state file.
A state file that does not exist is a usage error (exit 2). Errors exit as
``simplefeed consume`` says.
"""

from __future__ import annotations

import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from simplefeed.client.command import (
    _ALLOW_REDIRECT_ORIGIN,
    _MAX_PAGES,
    _TIMEOUT,
    EXIT_FEED,
    EXIT_HANDLER,
    EXIT_HTTP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STATE,
    FLAGS,
    _exec_handler,
    _interrupt,
    _place,
    internal_error,
)
from simplefeed.client.consumer import Consumer, Start, Status
from simplefeed.client.entry import json_text
from simplefeed.client.errors import FeedError, FetchError, NoSuchEntry, StateError
from simplefeed.client.fetch import url_problem
from simplefeed.client.state import Checkpoint, StateFile
from simplefeed.lines import escape_field, one_line

__all__ = ["consumer_group"]


_STATE = click.option(
    "--state",
    "state_path",
    required=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="The consumer's state file.",
)
_URL = click.option(
    "--url",
    help="The entry point (needed only when the state file holds several).",
)


class _ReportingGroup(click.Group):
    """A group whose commands report errors as ``consume`` does.

    That covers an unusable state file (exit 6) and an internal error (exit 70).
    """

    def invoke(self, ctx: click.Context) -> Any:
        # SIGTERM stops a retry or a reset as Ctrl-C does (exit 130), as for consume.
        terminate = signal.signal(signal.SIGTERM, _interrupt)
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except (StateError, FeedError, FetchError) as exc:
            code = {StateError: EXIT_STATE, FeedError: EXIT_FEED, FetchError: EXIT_HTTP}
            click.echo(f"simplefeed consumer: error: {one_line(exc.naming(FLAGS))}", err=True)
            sys.exit(next(c for kind, c in code.items() if isinstance(exc, kind)))
        except KeyboardInterrupt:
            # Without this, click would say "Aborted!" and exit 1, a status the group does not
            # document.
            click.echo("simplefeed consumer: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except Exception as exc:
            sys.exit(internal_error("simplefeed consumer", exc, debug=ctx.params["debug"]))
        finally:
            signal.signal(signal.SIGTERM, terminate)


@click.group("consumer", cls=_ReportingGroup)
@click.option("--debug", is_flag=True, help="On an internal error (exit 70), print the traceback.")
def consumer_group(debug: bool) -> None:
    """Work on a consumer's state file: parked entries, where it stands, moving it.

    \b
    Exit codes:
      0    done
      2    usage error (no such state file, an unknown entry id, an ambiguous
           state file, a number the feed does not hold)
      3    a retried handler failed again
      4    (reset) the feed broke the protocol, as for consume
      5    (reset) HTTP failed, as for consume
      6    state file unusable
      70   internal error
      130  interrupted (SIGINT or SIGTERM)
    """


def _entry_points(state: StateFile, url: str | None) -> list[str]:
    known = sorted(
        set(state.checkpoints()) | set(state.heads()) | {p.feed_url for p in state.parked()}
    )
    for entry_point in known:  # Recorded before entry points were checked.
        problem = url_problem(entry_point)
        if problem is not None:
            raise click.UsageError(
                f"an entry point of the state file {problem}, which the consumer no longer takes"
            )
    if url is not None:
        if not known:
            raise click.UsageError(_NO_CONSUMER_YET)
        if url not in known:
            raise click.UsageError(f"{url} is not in the state file (it has: {', '.join(known)})")
        return [url]
    return known


#: What a command that works on one entry point says of a state file no consumer has run on.
_NO_CONSUMER_YET = (
    "no consumer has run on this state file yet (it holds no entry point): run"
    " `simplefeed consume URL --state FILE` first"
)


def _one_entry_point(state_path: Path, url: str | None) -> str:
    """The entry point the state file holds, found in it read-only.

    ``url`` picks one when the file holds several. A command that cannot go on changes nothing,
    so an empty file stays empty.
    """
    with StateFile(state_path, read_only=True) as state:
        known = _entry_points(state, url)
    if not known:
        raise click.UsageError(_NO_CONSUMER_YET)
    if len(known) != 1:
        raise click.UsageError(
            f"the state file holds {len(known)} entry points; name one with --url"
        )
    return known[0]


@consumer_group.command("parked")
@_STATE
@_URL
@click.option("--json", "as_json", is_flag=True, help="One JSON object per parked entry.")
def _parked(state_path: Path, url: str | None, as_json: bool) -> None:
    """List parked entries, oldest first: seq, id, attempts, error (or JSON lines).

    With none, a line on standard error says so, and standard output stays empty. With --json,
    that means no lines, as JSON lines list nothing.
    """
    listed = 0
    with StateFile(state_path, read_only=True) as state:
        for feed_url in _entry_points(state, url):
            for parked in state.parked(feed_url):
                listed += 1
                if as_json:
                    record = {
                        "url": parked.feed_url,
                        "entry": parked.entry,
                        "error": parked.error,
                        "parked_at": parked.parked_at,
                        "attempts": parked.attempts,
                    }
                    click.echo(json_text(record))
                else:
                    fields = (str(parked.seq), parked.entry_id, str(parked.attempts), parked.error)
                    click.echo("\t".join(escape_field(f) for f in fields))
    if not listed:
        click.echo("no parked entries", err=True)


@consumer_group.command("retry")
@_STATE
@_URL
@click.option("--exec", "exec_command", required=True, metavar="CMD", help="As for consume.")
@click.argument("entry_ids", nargs=-1, metavar="[ID]...")
def _retry(
    state_path: Path, url: str | None, exec_command: str, entry_ids: tuple[str, ...]
) -> None:
    """Run CMD again on parked entries, oldest first, forgetting each that succeeds.

    It runs on all of them, or on the IDs given.
    """
    handler = _exec_handler(exec_command)
    feed_url = _one_entry_point(state_path, url)
    with StateFile(state_path) as state, Consumer(feed_url, state) as consumer:
        known = {p.entry_id for p in consumer.parked()}
        unknown = [i for i in entry_ids if i not in known]
        if unknown:
            raise click.UsageError(f"not parked: {', '.join(unknown)}")
        succeeded, failed = consumer.retry(handler, entry_ids)
    click.echo(f"{succeeded} succeeded, {failed} failed (still parked)", err=True)
    sys.exit(EXIT_HANDLER if failed else EXIT_OK)


@consumer_group.command("drop")
@_STATE
@_URL
@click.argument("entry_id", metavar="ID")
def _drop(state_path: Path, url: str | None, entry_id: str) -> None:
    """Forget one parked entry, so it will not be handled again."""
    feed_url = _one_entry_point(state_path, url)
    with StateFile(state_path) as state, Consumer(feed_url, state) as consumer:
        if not consumer.drop(entry_id):
            raise click.UsageError(f"not parked: {entry_id}")


@consumer_group.command("reset")
@_STATE
@_URL
@click.option(
    "--to",
    required=True,
    metavar="start|now|SEQ",
    callback=_place,
    help="start: every entry is new again; now: only what is published next; SEQ: the entries "
    "after sequence number SEQ.",
)
@_TIMEOUT
@_MAX_PAGES
@_ALLOW_REDIRECT_ORIGIN
def _reset(
    state_path: Path,
    url: str | None,
    to: Start | int,
    timeout: float,
    max_pages: int,
    redirect_origins: tuple[str, ...],
) -> None:
    """Move the checkpoint, back or forward: the next consume handles what --to says.

    It reads the feed, to check that it holds entry SEQ. Parked entries are kept.

    A server's database may be restored from a backup that lost entries this consumer had read.
    Then consume stops with exit 4: "the last processed entry ... is no longer in the feed".
    Give --to SEQ, the number of the last entry the restore kept. The consumer goes on with
    what was published since, each entry once.
    """
    feed_url = _one_entry_point(state_path, url)
    with (
        StateFile(state_path) as state,
        Consumer(
            feed_url,
            state,
            timeout=timeout,
            max_pages=max_pages,
            allow_redirect_origins=redirect_origins,
        ) as consumer,
    ):
        before = consumer.checkpoint
        try:
            after = consumer.reset(to)
        except NoSuchEntry as exc:
            raise click.BadParameter(str(exc), param_hint="--to") from None
        parked = consumer.status().parked
    click.echo(
        f"{escape_field(feed_url)}: the checkpoint moved from {_position(before)} to"
        f" {_position(after)}; {parked} parked {'entry' if parked == 1 else 'entries'} kept",
        err=True,
    )


def _position(checkpoint: Checkpoint | None) -> str:
    if checkpoint is None:
        return "none"
    if checkpoint.seq == 0:
        return "before the first entry"
    return f"seq {checkpoint.seq} ({escape_field(checkpoint.entry_id)})"


@consumer_group.command("status")
@_STATE
@_URL
@click.option("--json", "as_json", is_flag=True, help="One JSON object per entry point.")
def _status(state_path: Path, url: str | None, as_json: bool) -> None:
    """Where each consumer of the state file stands.

    It shows the checkpoint, the head as last seen, the lag (from sequence numbers) and the
    parked entries.
    """
    with StateFile(state_path, read_only=True) as state:
        known = _entry_points(state, url)
        if not known:
            click.echo(
                _NO_ENTRY_POINT_JSON
                if as_json
                else "no entry point yet: no consumer has run on this state file"
            )
        for feed_url in known:
            with Consumer(feed_url, state) as consumer:
                status = consumer.status()
            click.echo(_status_json(status) if as_json else _status_text(status))


def _status_json(status: Status) -> str:
    checkpoint, head = status.checkpoint, status.head
    record = {
        "url": status.url,
        "checkpoint": None
        if checkpoint is None
        else {"id": checkpoint.entry_id, "seq": checkpoint.seq, "page": checkpoint.page_url},
        "head": None if head is None else {"seq": head.seq, "seen_at": _iso(head.seen_at)},
        "lag": status.lag,
        "past_head": status.past_head,
        "parked": status.parked,
    }
    return json_text(record)


#: What ``status --json`` prints before any consumer ran: an entry point's object, with nothing
#: known. Printing nothing would read as a command that did nothing.
_NO_ENTRY_POINT_JSON = json_text(
    {"url": None, "checkpoint": None, "head": None, "lag": None, "past_head": False, "parked": 0}
)


def _status_text(status: Status) -> str:
    checkpoint, head = status.checkpoint, status.head
    lines = [escape_field(status.url)]
    if checkpoint is None:
        lines.append("  checkpoint  none")
    else:
        lines.append(
            f"  checkpoint  seq {checkpoint.seq}  {escape_field(checkpoint.entry_id)}  "
            f"{escape_field(checkpoint.page_url)}"  # The server chose it.
        )
    lines.append(
        "  head        never seen"
        if head is None
        else f"  head        seq {head.seq}  seen {_iso(head.seen_at)}"
    )
    lines.append(f"  lag         {'unknown' if status.lag is None else status.lag}")
    if status.past_head:
        lines.append(
            "  warning     the checkpoint is past the head: an older copy of the feed (a cache),"
            " or its server restored from a backup that lost entries read here (then"
            " `simplefeed consumer reset --to` its head)"
        )
    lines.append(f"  parked      {status.parked}")
    return "\n".join(lines)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
