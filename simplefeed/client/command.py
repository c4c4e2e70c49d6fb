"""``simplefeed consume``: the consumer from the shell.

::

    simplefeed consume URL --state FILE [--from start|now|SEQ] [--jsonl | --exec CMD] [--follow]
                           [--parser feedparser|lxml] [--checkpoint entry|page]
                           [--max-size BYTES] [--max-time SECONDS] [--max-pages N]
                           [--allow-redirect-origin ORIGIN]... [--wait SECONDS]

Prints (default: ``seq<TAB>id<TAB>title``, with backslash, tab, line breaks and other control
characters in the id and title backslash-escaped, so that one entry is always one line),
prints as JSON lines (``--jsonl``: one object per entry with every field the producer sent: id,
seq, title, updated, published, content (JSON content as its value), content_type, summary,
author, categories, links, and the page), or runs a
command per entry (``--exec``: the JSON object on its standard input, ``SIMPLEFEED_ENTRY_ID``
(escaped as printed; left out past 8,192 characters) and ``SIMPLEFEED_ENTRY_SEQ`` in its
environment; a non-zero exit stops processing at that entry).
Entries come oldest first, at least once (see :mod:`simplefeed.client.consumer`). Without
``--follow`` the command exits 0 once caught up; with it, it polls on until interrupted, each
poll after the first a long poll (``Prefer: wait``, ``--wait``) that a server saying
``Preference-Applied`` holds until the feed changes.

Exit codes:

===  ===========================================================================================
0    caught up (without ``--follow``)
2    usage error
3    the handler failed: ``--exec`` exited non-zero or could not be run, or output could not be
     written; the checkpoint is on the entry before
4    the feed broke the protocol: not Atom, a malformed page, a link loop, a link to another
     origin (not allowed by ``--allow-redirect-origin``), a sequence gap, an
     entry id repeated at another sequence number, a page whose SHA-256 is not the one the
     newer page's prev-archive link gives, the last processed entry gone; the checkpoint is
     untouched
5    HTTP: gave up after the retries (network errors, timeouts, 5xx, a response over
     ``--max-time``), an unexpected status (with the message of a JSON error body), a
     response over ``--max-size``, a redirect to another origin
6    the state file cannot be used (not a state file, its directory missing: the file is
     created, never its directory), or another consumer is processing from it
70   internal error: a bug in simplefeed (one line on standard error, the traceback too with
     ``--debug``); the checkpoint is on the last entry handled
130  interrupted (Ctrl-C, or SIGTERM: a service manager stopping it), the checkpoint on the
     last entry handled
===  ===========================================================================================

Entries are always read strictly by namespace with lxml, values exactly as published;
``--parser feedparser`` (the default) has feedparser check every document too (in a helper
process during a long catch-up where a CPU is to spare: :mod:`simplefeed.client.checker`),
``--parser lxml`` skips that check, several times faster (see :mod:`simplefeed.client.parse`):
worth it when catching up on a long history.

``simplefeed consumer parked|retry|drop|status|reset --state FILE`` work on the state file: the
entries parked with ``--on-error park`` (listed, handled again, forgotten), where each
consumer stands (checkpoint, head as last seen, lag, parked count), and moving its checkpoint
(``reset --to start|now|SEQ``: after a server's restore lost entries it had read). They never
create one: a state file that does not exist is a usage error (exit 2).

A progress bar is drawn on standard error while catching up over several pages, only when
standard error is a terminal. The lead wires this command into ``simplefeed.runtime.cli`` with
``main.add_command(consume)``.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import click

from simplefeed.client.consumer import CheckpointEvery, Consumer, OnError, Start, Status
from simplefeed.client.entry import json_text
from simplefeed.client.errors import (
    FeedError,
    FetchError,
    HandlerError,
    LastEntryVanished,
    NoSuchEntry,
    StateError,
)
from simplefeed.client.fetch import Bounds, RetryPolicy, url_problem
from simplefeed.client.parse import PARSERS, FeedEntry, Parser
from simplefeed.client.poll import PollPolicy
from simplefeed.client.state import Checkpoint, StateFile
from simplefeed.client.walk import MAX_PAGES, Progress
from simplefeed.lines import escape_field, one_line

__all__ = ["EXIT_CODES", "consume", "consumer_group"]

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_HANDLER = 3
EXIT_FEED = 4
EXIT_HTTP = 5
EXIT_STATE = 6
#: sysexits.h's EX_SOFTWARE.
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

EXIT_CODES = {
    EXIT_OK: "caught up",
    EXIT_USAGE: "usage error",
    EXIT_HANDLER: "handler failed (--exec exited non-zero, or output failed)",
    EXIT_FEED: "feed broke the protocol (not Atom, link loop, a link to another origin, sequence "
    "gap, repeated id, digest mismatch, entry gone)",
    EXIT_HTTP: "HTTP gave up after retries, an unexpected status, a response too large, or a "
    "redirect to another origin",
    EXIT_STATE: "state file unusable",
    EXIT_INTERNAL: "internal error (a bug; --debug shows the traceback)",
    EXIT_INTERRUPTED: "interrupted",
}


#: The flag of each :class:`~simplefeed.client.Consumer` parameter an error message names: the
#: command's messages name flags (:meth:`~simplefeed.client.ClientError.naming`).
FLAGS = {
    "allow_redirect_origins": "--allow-redirect-origin",
    "max_parked": "--max-parked",
    "max_pages": "--max-pages",
}


class ExecFailed(Exception):
    def __init__(self, command: str, detail: str) -> None:
        super().__init__(f"{command!r} {detail}")


class Seconds(click.FloatRange):
    """A number of seconds from ``min`` on, finite: ``float()`` reads "nan" and "inf", and
    ``--timeout nan`` ended the consumer with an internal error, ``--max-time nan`` lifted the
    bound on a response's time (every comparison with NaN is false)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


def _place(ctx: click.Context, param: click.Parameter, value: str) -> str | int:
    """A place in a feed (``--from``, ``--to``): ``start``, ``now`` or a sequence number, in
    ASCII digits (``int`` also takes other scripts' digits and ``1_0``)."""
    if value in ("start", "now"):
        return value
    if value.isascii() and value.isdigit():
        return int(value)
    raise click.BadParameter(f"{value!r}: start, now, or a sequence number (0 or more)")


def _http_urls(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """The URL argument (or each of an option's URLs), checked: a usage error (exit 2) saying
    what is wrong, never the URL itself (it may hold a password)."""
    for url in value if isinstance(value, tuple) else (value,):
        problem = url_problem(url)
        if problem is not None:
            raise click.BadParameter(problem)
    return value


_TIMEOUT = click.option(
    "--timeout",
    type=Seconds(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds per HTTP request.",
)
_MAX_PAGES = click.option(
    "--max-pages",
    type=click.IntRange(min=1),
    default=MAX_PAGES,
    show_default=True,
    help="Most pages one pass walks back (and so fetches and caches): a longer history stops "
    "with exit 4 until this is raised.",
)
_ALLOW_REDIRECT_ORIGIN = click.option(
    "--allow-redirect-origin",
    "redirect_origins",
    multiple=True,
    callback=_http_urls,
    metavar="ORIGIN",
    help="Follow redirects and links to this origin (scheme://host[:port]) too; by default only "
    "within URL's origin. Repeatable.",
)


class _OneLine(logging.Formatter):
    """Each message on one line, controls escaped (:func:`~simplefeed.lines.one_line`): they
    quote URLs a server chose. A traceback (``--debug``) follows on lines of its own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(super().formatMessage(record))


def _print_line(entry: FeedEntry) -> None:
    click.echo(f"{entry.seq}\t{escape_field(entry.id)}\t{escape_field(entry.title)}")


def _print_json(entry: FeedEntry) -> None:
    click.echo(json_text(entry.to_json()))


#: The longest id ``--exec`` passes in ``SIMPLEFEED_ENTRY_ID`` (longer ones are left out: a
#: 200,000-character id from a server made every run fail with "Argument list too long").
MAX_ENV_ID_CHARS = 8192


def _exec_handler(command: str) -> Callable[[FeedEntry], None]:
    """The handler running ``command`` per entry. A program that cannot be found or run is a
    usage error (exit 2) before any request; one that cannot be run later (removed, or not a
    program) stops the consumer whatever ``--on-error`` says: with park, a misspelt
    ``--exec ./handle-entyr`` parked every entry of the feed and exited 0."""
    argv = shlex.split(command)
    if not argv:
        raise click.BadParameter("empty command", param_hint="--exec")
    if shutil.which(argv[0]) is None:
        where = "" if os.sep in argv[0] else " on PATH"
        raise click.BadParameter(
            f"{argv[0]!r}: no such program{where}, or it is not executable", param_hint="--exec"
        )

    def run(entry: FeedEntry) -> None:
        data = json_text(entry.to_json()).encode("utf-8") + b"\n"
        env = dict(os.environ)
        entry_id = escape_field(entry.id)  # the id itself: on standard input
        if len(entry_id) <= MAX_ENV_ID_CHARS:
            env["SIMPLEFEED_ENTRY_ID"] = entry_id
        else:  # execve refuses a string of the environment over 128 KiB
            env.pop("SIMPLEFEED_ENTRY_ID", None)
        env["SIMPLEFEED_ENTRY_SEQ"] = str(entry.seq)
        try:
            result = subprocess.run(argv, input=data, env=env, check=False)
        except OSError as exc:  # not the entry's failure: no entry can be handled so
            raise HandlerError(entry, ExecFailed(command, f"could not be run: {exc}")) from exc
        if result.returncode != 0:
            raise ExecFailed(command, f"exited with status {result.returncode}")

    return run


class _ProgressBars:
    """One click progress bar per phase, on standard error, hidden unless it is a terminal."""

    LABELS: ClassVar[dict[str, str]] = {
        "locate": "walking back",
        "process": "catching up",
    }

    def __init__(self) -> None:
        self.stream = sys.stderr
        self.hidden = not self.stream.isatty()
        self.phase: str | None = None
        self.bar: Any = None

    def __call__(self, progress: Progress) -> None:
        if progress.total is None or self.hidden:
            return
        if progress.phase != self.phase:
            self.close()
            self.phase = progress.phase
            self.bar = click.progressbar(
                length=max(progress.total, 1),
                label=self.LABELS[progress.phase],
                file=self.stream,
                show_pos=True,
            )
            self.bar.__enter__()
        step = progress.done - self.bar.pos
        if step > 0:
            self.bar.update(step)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
            self.phase = None


@click.argument("url", callback=_http_urls)
@click.option(
    "--state",
    "state_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="SQLite file for the checkpoint and the page cache (created if missing, in a "
    "directory that exists).",
)
@click.option(
    "--from",
    "start",
    default="start",
    show_default=True,
    metavar="start|now|SEQ",
    callback=_place,
    help="Without a checkpoint: read the whole history, only entries published from now on, or "
    "the entries after sequence number SEQ (exit 2 if the feed does not hold it).",
)
@click.option("--jsonl", is_flag=True, help="Print one JSON object per entry.")
@click.option(
    "--exec",
    "exec_command",
    metavar="CMD",
    help="Run CMD per entry (split like a shell would, not run by one), entry JSON on stdin.",
)
@click.option("--follow", is_flag=True, help="Keep polling for new entries.")
@click.option(
    "--checkpoint",
    "checkpoint_every",
    type=click.Choice(["entry", "page"]),
    default="entry",
    show_default=True,
    help="Store the checkpoint after each entry, or after each page.",
)
@click.option(
    "--parser",
    type=click.Choice(PARSERS),
    default="feedparser",
    show_default=True,
    help="feedparser: every document is also checked by feedparser; lxml: the strict lxml "
    "reading alone (several times faster). Both give the same entries.",
)
@_TIMEOUT
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Retries of a failing request (network error, timeout, 5xx) before giving up.",
)
@click.option(
    "--on-error",
    type=click.Choice(["stop", "park"]),
    default="stop",
    show_default=True,
    help="When the handler fails: stop at that entry, or park it in the state file (see "
    "`simplefeed consumer`) and go on.",
)
@click.option(
    "--max-parked",
    type=click.IntRange(min=0),
    default=None,
    help="With --on-error park (a usage error without it): stop (exit 3) rather than park "
    "more than this many entries.",
)
@click.option(
    "--max-size",
    type=click.IntRange(min=1024),
    default=Bounds.max_bytes,
    show_default=True,
    help="Largest response body in bytes, as received and once decompressed.",
)
@click.option(
    "--max-time",
    type=Seconds(min=0.1),
    default=Bounds.max_seconds,
    show_default=True,
    help="Seconds for a whole response, headers and body (each read waits only for what is "
    "left of it).",
)
@_MAX_PAGES
@_ALLOW_REDIRECT_ORIGIN
@click.option(
    "--min-interval",
    type=Seconds(min=0.1),
    default=1.0,
    show_default=True,
    help="Shortest polling interval with --follow, in seconds (never below max-age).",
)
@click.option(
    "--max-interval",
    type=Seconds(min=0.1),
    default=300.0,
    show_default=True,
    help="Longest polling interval with --follow, in seconds.",
)
@click.option(
    "--wait",
    type=Seconds(min=0),
    default=30.0,
    show_default=True,
    help="With --follow: ask the server to hold each poll up to this many seconds until the "
    "feed changes (Prefer: wait, RFC 7240); 0: never. A server that does not say "
    "Preference-Applied is polled as without it, never faster than max-age.",
)
@click.option(
    "--debug",
    is_flag=True,
    help="On an internal error (exit 70), print the traceback too; log at debug level.",
)
def _consume(
    url: str,
    state_path: Path,
    start: Start | int,
    jsonl: bool,
    exec_command: str | None,
    follow: bool,
    checkpoint_every: CheckpointEvery,
    parser: Parser,
    timeout: float,
    retries: int,
    on_error: OnError,
    max_parked: int | None,
    max_size: int,
    max_time: float,
    max_pages: int,
    redirect_origins: tuple[str, ...],
    min_interval: float,
    wait: float,
    debug: bool,
    max_interval: float,
) -> None:
    """Read the feed at URL: new entries, oldest first, at least once.

    Walks back from URL (the entry point) to the last processed entry, then forward; stores the
    checkpoint in the --state file. Exits 0 once caught up, unless --follow.

    \b
    Exit codes:
      0    caught up
      2    usage error
      3    handler failed (--exec exited non-zero, or output failed),
           or --max-parked reached; the checkpoint is on the entry before
      4    feed broke the protocol (not Atom, link loop, sequence gap,
           repeated id, digest mismatch, last processed entry gone,
           over --max-pages to walk back); checkpoint untouched
      5    HTTP gave up after the retries (or --max-time), an unexpected
           status, a body over --max-size, a redirect to another origin
      6    state file unusable (its directory missing...), or in use
           by another consumer
      70   internal error (a bug; --debug shows the traceback)
      130  interrupted (SIGINT or SIGTERM)
    """
    if jsonl and exec_command is not None:
        raise click.UsageError("--jsonl and --exec are mutually exclusive")
    if max_parked is not None and on_error != "park":
        # Taken silently, it read as a bound on failures that --on-error stop never applies.
        raise click.UsageError("--max-parked applies only with --on-error park")
    if max_interval < min_interval:
        raise click.BadParameter("must be at least --min-interval", param_hint="--max-interval")
    handler: Callable[[FeedEntry], None]
    if exec_command is not None:
        handler = _exec_handler(exec_command)
    elif jsonl:
        handler = _print_json
    else:
        handler = _print_line
    # Everything loaded so far (the modules) stays while the command runs: the cyclic garbage
    # collector need not walk it again at each full collection, which a catch-up's pages make
    # frequent: 7-10 % of a catch-up's time with lxml, 2-4 % with feedparser (measured with
    # bench/consume.py, when both read every page ahead on a thread). Given back
    # after (a command run in-process, by tests, leaves the collector as it found it); the
    # library leaves the collector to the application.
    gc.freeze()
    try:
        code = _run(
            url,
            state_path,
            handler,
            start=start,
            follow=follow,
            checkpoint_every=checkpoint_every,
            parser=parser,
            timeout=timeout,
            retry=RetryPolicy(attempts=retries + 1),
            poll=PollPolicy(min_interval=min_interval, max_interval=max_interval),
            bounds=Bounds(max_bytes=max_size, max_seconds=max_time),
            allow_redirect_origins=redirect_origins,
            on_error=on_error,
            max_parked=max_parked,
            max_pages=max_pages,
            wait=wait,
            debug=debug,
        )
    finally:
        gc.unfreeze()
    sys.exit(code)


def _run(
    url: str,
    state_path: Path,
    handler: Callable[[FeedEntry], None],
    *,
    start: Start | int,
    follow: bool,
    checkpoint_every: CheckpointEvery,
    timeout: float,
    retry: RetryPolicy,
    poll: PollPolicy,
    parser: Parser = "feedparser",
    bounds: Bounds | None = None,
    allow_redirect_origins: tuple[str, ...] = (),
    on_error: OnError = "stop",
    max_parked: int | None = None,
    max_pages: int = MAX_PAGES,
    wait: float = 30.0,
    debug: bool = False,
) -> int:
    """Run the consumer; return the exit code. Errors are reported on standard error."""
    logger = logging.getLogger("simplefeed.client")
    log_handler = logging.StreamHandler(sys.stderr)
    log_handler.setFormatter(_OneLine("simplefeed consume: %(message)s"))
    logger.addHandler(log_handler)
    level = logger.level  # given back after (a command run in-process, by tests)
    if debug:
        logger.setLevel(logging.DEBUG)
    elif logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    bars = _ProgressBars()
    # SIGTERM (systemd, Kubernetes, `kill`) stops it as Ctrl-C does: the checkpoint stored on
    # the last entry handled, the state file's lock let go, exit 130. It ended the process at
    # once, and with checkpoints per page the next run handled up to a page again.
    terminate = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with Consumer(
            url,
            state_path,
            start=start,
            checkpoint_every=checkpoint_every,
            timeout=timeout,
            retry=retry,
            poll=poll,
            progress=bars,
            parser=parser,
            bounds=bounds,
            allow_redirect_origins=allow_redirect_origins,
            on_error=on_error,
            max_parked=max_parked,
            max_pages=max_pages,
            wait=wait,
        ) as consumer:
            consumer.run(handler, follow=follow)
        return EXIT_OK
    except HandlerError as exc:
        return _fail(EXIT_HANDLER, exc.naming(FLAGS), bars)
    except NoSuchEntry as exc:  # --from SEQ: found out only by reading the feed
        return _fail(EXIT_USAGE, f"--from {exc.seq}: {exc}", bars)
    except LastEntryVanished as exc:
        reset = f"simplefeed consumer reset --state {shlex.quote(str(state_path))} --to"
        agreed = None if exc.parting is None else exc.parting.agreed
        return _fail(
            EXIT_FEED,
            f"{exc.naming(FLAGS)} (checkpoint untouched; if the server's database was restored"
            + (
                f" from a backup, `{reset} SEQ` moves it to SEQ, the last entry the restore"
                " kept: the entries after it are read next)"
                if agreed is None
                else f" from a backup that lost them, `{reset} {agreed}` goes on after the"
                " last entry it kept, with what was published since)"
            ),
            bars,
        )
    except FeedError as exc:
        return _fail(EXIT_FEED, f"{exc.naming(FLAGS)} (checkpoint untouched)", bars)
    except FetchError as exc:
        return _fail(EXIT_HTTP, exc.naming(FLAGS), bars)
    except StateError as exc:
        return _fail(EXIT_STATE, exc.naming(FLAGS), bars)
    except KeyboardInterrupt:
        return _fail(EXIT_INTERRUPTED, "interrupted", bars)
    except Exception as exc:
        bars.close()
        return internal_error("simplefeed consume", exc, debug=debug)
    finally:
        signal.signal(signal.SIGTERM, terminate)
        bars.close()
        logger.removeHandler(log_handler)
        logger.setLevel(level)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _fail(code: int, message: str, bars: _ProgressBars) -> int:
    bars.close()
    click.echo(f"simplefeed consume: error: {one_line(message)}", err=True)
    return code


def internal_error(prog: str, exc: Exception, *, debug: bool) -> int:
    """Report an exception no error of ours describes (a bug): one line, the traceback only
    with ``--debug``; return :data:`EXIT_INTERNAL`. The checkpoint is where the last handled
    entry left it (the consumer stores it only after an entry or page is done)."""
    if debug:
        click.echo("".join(traceback.format_exception(exc)).rstrip("\n"), err=True)
    detail = one_line(" ".join(str(exc).split()))[:200]
    hint = "" if debug else "; --debug shows the traceback"
    click.echo(
        f"{prog}: internal error (a bug, please report it): {type(exc).__name__}"
        f"{': ' + detail if detail else ''}{hint}; the checkpoint is on the last entry handled",
        err=True,
    )
    return EXIT_INTERNAL


consume = click.command("consume")(_consume)


# -- simplefeed consumer: parked entries and status, from the state file -------------------

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
    """A group whose commands report an unusable state file (exit 6) and an internal error
    (exit 70) as ``consume`` does."""

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
            # click said "Aborted!" and exited 1, a status the group does not document.
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
    Exit codes: 0 done; 2 usage (no such state file, an unknown entry id, an ambiguous
    state file, a number the feed does not hold); 3 a retried handler failed again; 4 and 5
    (reset) as for consume: the feed broke the protocol, HTTP failed; 6 state file unusable;
    70 internal error; 130 interrupted (SIGINT or SIGTERM).
    """


def _entry_points(state: StateFile, url: str | None) -> list[str]:
    known = sorted(
        set(state.checkpoints()) | set(state.heads()) | {p.feed_url for p in state.parked()}
    )
    for entry_point in known:  # recorded before entry points were checked
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
    """The entry point the state file holds (``url``, when it holds several), found in it
    read-only: a command that cannot go on changes nothing (an empty file stays empty)."""
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
    """List parked entries, oldest first: seq, id, attempts, error (or JSON lines). With
    none, a line on standard error says so; standard output stays empty (for --json: no
    lines, as JSON lines list nothing)."""
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
    """Run CMD again on parked entries (all, or the IDs given), oldest first, forgetting each
    that succeeds."""
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
    """Forget one parked entry (it will not be handled again)."""
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
    """Move the checkpoint, back or forward: the next consume handles what --to says. Reads
    the feed (to check that it holds entry SEQ). Parked entries are kept.

    After a server's database was restored from a backup that lost entries this consumer had
    read (consume stops, exit 4: "the last processed entry ... is no longer in the feed"),
    --to SEQ, the number of the last entry the restore kept, goes on with what was published
    since, each entry once."""
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
    """Where each consumer of the state file stands: checkpoint, head as last seen, lag (from
    sequence numbers), parked entries."""
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


#: ``status --json`` before any consumer ran: an entry point's object, nothing known (printing
#: nothing read as a command that did nothing).
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
            f"{escape_field(checkpoint.page_url)}"  # the server chose it
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


if __name__ == "__main__":  # pragma: no cover - `python -m simplefeed.client.command`
    consume()
