"""``simplefeed consume``: the consumer from the shell.

::

    simplefeed consume URL --state FILE [--from start|now|SEQ] [--follow]
                           [--jsonl | --exec CMD | --exec-stream CMD [--ack-timeout SECONDS]]
                           [--parser feedparser|lxml] [--checkpoint entry|page]
                           [--max-size BYTES] [--max-time SECONDS] [--max-pages N]
                           [--allow-redirect-origin ORIGIN]... [--wait SECONDS]

The command hands each entry to one of four outputs.

- By default it prints ``seq<TAB>id<TAB>title``. It escapes backslash, tab, line breaks and
  other control characters in the id and title with backslashes. So one entry is always one
  line.
- ``--jsonl`` prints one JSON object per entry. The object holds every field the producer
  sent: id, seq, title, updated, published, content, content_type, summary, author,
  categories, links, and the page. JSON content appears as its value.
- ``--exec`` runs a command per entry. The command reads the JSON object on its standard
  input. Its environment holds ``SIMPLEFEED_ENTRY_ID`` and ``SIMPLEFEED_ENTRY_SEQ``. The id
  is escaped as printed, and left out past 8,192 characters. A non-zero exit stops
  processing at that entry.
- ``--exec-stream`` feeds every entry to one long-lived command. The JSON objects go as lines
  to its standard input. The command answers one acknowledgement line per entry on its
  standard output: ``ok`` or the entry's error. The checkpoint moves only past acknowledged
  entries (see :mod:`simplefeed.client.exec_stream`).

Entries come oldest first, at least once (see :mod:`simplefeed.client.consumer`). Without
``--follow`` the command exits 0 once caught up. With it, the command polls on until
interrupted. Each poll after the first is a long poll (``Prefer: wait``, ``--wait``). A server
that says ``Preference-Applied`` holds it until the feed changes.

Exit codes:

===  ===========================================================================================
0    Caught up (without ``--follow``).
2    Usage error.
3    The handler failed. ``--exec`` exited non-zero or could not be run. Or ``--exec-stream``
     answered an entry with an error line, exited, closed its standard output or stopped
     reading. Or it acknowledged nothing for ``--ack-timeout``. Or output could not be
     written. The checkpoint is on the last entry handled (acknowledged).
4    The feed broke the protocol. It is not Atom, or a page is malformed, or links loop.
     Or a link goes to another origin that ``--allow-redirect-origin`` does not allow. Or
     sequence numbers skip, or an entry id repeats at another sequence number. Or a page's
     SHA-256 differs from the one the newer page's prev-archive link gives. Or the last
     processed entry is gone. The checkpoint is untouched.
5    HTTP failed. The command gave up after the retries on network errors, timeouts, 5xx or
     a response over ``--max-time``. Or the status was unexpected (the message quotes a
     JSON error body). Or a response was over ``--max-size``, or redirected to another
     origin.
6    The state file cannot be used. It is not a state file, or its directory is missing
     (the command creates the file, never its directory). Or another consumer is
     processing from it.
70   Internal error, a bug in simplefeed. It prints one line on standard error, and the
     traceback too with ``--debug``. The checkpoint is on the last entry handled.
130  Interrupted by Ctrl-C, or by SIGTERM from a service manager. The checkpoint is on the
     last entry handled.
===  ===========================================================================================

Entries are always read strictly by namespace with lxml, values exactly as published. With
``--parser feedparser`` (the default), feedparser checks every document too. During a long
catch-up with a CPU to spare, it checks them in another process
(:mod:`simplefeed.client.checker`). ``--parser lxml`` skips that check and runs several times
faster (see :mod:`simplefeed.client.parse`). That pays off when catching up on a long history.

``simplefeed consumer parked|retry|drop|status|reset --state FILE`` work on the state file
(:mod:`simplefeed.client.state_commands`).

While catching up over several pages, the command draws a progress bar on standard error. It
does so only when standard error is a terminal. ``simplefeed.runtime.cli`` loads this command
when it is asked for.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import click

from simplefeed.client.consumer import CheckpointEvery, Consumer, OnError, Start
from simplefeed.client.entry import entry_json
from simplefeed.client.errors import (
    FeedError,
    FetchError,
    HandlerError,
    LastEntryVanished,
    NoSuchEntry,
    StateError,
)
from simplefeed.client.exec_stream import ExecStream
from simplefeed.client.fetch import Bounds, RetryPolicy, url_problem
from simplefeed.client.jsonl import JsonLines, print_json
from simplefeed.client.parse import PARSERS, FeedEntry, Parser
from simplefeed.client.poll import PollPolicy
from simplefeed.client.walk import MAX_PAGES, Progress
from simplefeed.lines import escape_field, one_line

__all__ = ["EXIT_CODES", "FLAGS", "consume", "internal_error"]

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
    EXIT_HANDLER: "handler failed (--exec exited non-zero, --exec-stream answered an error, "
    "exited or timed out, or output failed)",
    EXIT_FEED: "feed broke the protocol (not Atom, link loop, a link to another origin, sequence "
    "gap, repeated id, digest mismatch, entry gone)",
    EXIT_HTTP: "HTTP gave up after retries, an unexpected status, a response too large, or a "
    "redirect to another origin",
    EXIT_STATE: "state file unusable",
    EXIT_INTERNAL: "internal error (a bug; --debug shows the traceback)",
    EXIT_INTERRUPTED: "interrupted",
}


#: The flag of each :class:`~simplefeed.client.Consumer` parameter an error message names.
#: The command's messages name flags (:meth:`~simplefeed.client.ClientError.naming`).
FLAGS = {
    "allow_redirect_origins": "--allow-redirect-origin",
    "max_parked": "--max-parked",
    "max_pages": "--max-pages",
}


class ExecFailed(Exception):
    def __init__(self, command: str, detail: str) -> None:
        super().__init__(f"{command!r} {detail}")


class Seconds(click.FloatRange):
    """A finite number of seconds, ``min`` or more.

    ``float()`` reads "nan" and "inf", so this type refuses them. Every comparison with NaN is
    false. So ``--timeout nan`` would end the consumer with an internal error. And
    ``--max-time nan`` would lift the bound on a response's time.
    """

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


def _place(ctx: click.Context, param: click.Parameter, value: str) -> str | int:
    """Read a place in a feed (``--from``, ``--to``).

    A place is ``start``, ``now`` or a sequence number. The number must be ASCII digits,
    because ``int`` also takes other scripts' digits and ``1_0``.
    """
    if value in ("start", "now"):
        return value
    if value.isascii() and value.isdigit():
        return int(value)
    raise click.BadParameter(f"{value!r}: start, now, or a sequence number (0 or more)")


def _http_urls(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Check the URL argument, or each of an option's URLs.

    A bad URL is a usage error (exit 2) that says what is wrong. The message never quotes the
    URL itself, because it may hold a password.
    """
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
    """Format each message on one line, with controls escaped.

    Messages quote URLs a server chose, so :func:`~simplefeed.lines.one_line` escapes them. A
    traceback (``--debug``) follows on lines of its own.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(super().formatMessage(record))


def _print_line(entry: FeedEntry) -> None:
    click.echo(f"{entry.seq}\t{escape_field(entry.id)}\t{escape_field(entry.title)}")


#: The longest id ``--exec`` passes in ``SIMPLEFEED_ENTRY_ID``. Longer ones are left out,
#: because a huge id (200,000 characters) fails every run with "Argument list too long".
MAX_ENV_ID_CHARS = 8192


def _argv(command: str, flag: str) -> list[str]:
    """Split ``command`` as a shell would.

    If it names no program that can be found and run, this is a usage error (exit 2). It comes
    before any request.
    """
    argv = shlex.split(command)
    if not argv:
        raise click.BadParameter("empty command", param_hint=flag)
    if shutil.which(argv[0]) is None:
        where = "" if os.sep in argv[0] else " on PATH"
        raise click.BadParameter(
            f"{argv[0]!r}: no such program{where}, or it is not executable", param_hint=flag
        )
    return argv


@dataclass(frozen=True)
class _Streamed:
    """``--exec-stream``: one process for every entry (:mod:`simplefeed.client.exec_stream`)."""

    command: str
    argv: list[str]
    ack_timeout: float | None


class _Gathered:
    """``--jsonl`` with checkpoints per page: lines written together (:class:`JsonLines`)."""


_Handler = Callable[[FeedEntry], None] | _Streamed | _Gathered


def _process(consumer: Consumer, handler: _Handler, follow: bool) -> None:
    """Hand the new entries to ``handler``, or through the process it names."""
    if isinstance(handler, _Gathered):
        consumer.run_acknowledged(JsonLines(), follow=follow)
        return
    if not isinstance(handler, _Streamed):
        consumer.run(handler, follow=follow)
        return
    try:
        stream = ExecStream(handler.argv, handler.command, ack_timeout=handler.ack_timeout)
    except OSError as exc:
        raise ExecFailed(handler.command, f"could not be run: {exc}") from exc
    with stream:
        consumer.run_acknowledged(stream, follow=follow)


def _exec_handler(command: str) -> Callable[[FeedEntry], None]:
    """Return the handler that runs ``command`` per entry.

    A program that cannot be found or run is a usage error (exit 2) before any request. Later
    it may fail to run, because it was removed or is not a program. That stops the consumer
    whatever ``--on-error`` says. Otherwise, with park, a misspelt ``--exec ./handle-entyr``
    would park every entry of the feed and exit 0.
    """
    argv = _argv(command, "--exec")

    def run(entry: FeedEntry) -> None:
        data = entry_json(entry).encode("utf-8") + b"\n"
        env = dict(os.environ)
        entry_id = escape_field(entry.id)  # Escaped. The raw id goes on standard input.
        if len(entry_id) <= MAX_ENV_ID_CHARS:
            env["SIMPLEFEED_ENTRY_ID"] = entry_id
        else:  # Because execve refuses an environment string over 128 KiB.
            env.pop("SIMPLEFEED_ENTRY_ID", None)
        env["SIMPLEFEED_ENTRY_SEQ"] = str(entry.seq)
        try:
            result = subprocess.run(argv, input=data, env=env, check=False)
        except OSError as exc:  # Not the entry's failure, because no entry can be handled.
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
@click.option(
    "--exec-stream",
    "stream_command",
    metavar="CMD",
    help="Start CMD once; write each entry to its stdin as a JSON line, and read one line per "
    "entry from its stdout: ok, or the entry's error. The checkpoint moves only past entries "
    "acknowledged ok (or parked).",
)
@click.option(
    "--ack-timeout",
    type=Seconds(min=0.1),
    default=None,
    help="With --exec-stream: stop (exit 3) when CMD acknowledges nothing for this many "
    "seconds while entries await. Default: wait as long as it takes.",
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
    stream_command: str | None,
    ack_timeout: float | None,
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

    Walks back from URL (the entry point) to the last processed entry, then forward. Stores
    the checkpoint in the --state file. Exits 0 once caught up, unless --follow.

    \b
    Exit codes:
      0    caught up
      2    usage error
      3    handler failed (--exec exited non-zero; --exec-stream answered
           an error, exited, or passed --ack-timeout; output failed),
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
    if jsonl + (exec_command is not None) + (stream_command is not None) > 1:
        raise click.UsageError("--jsonl, --exec and --exec-stream are mutually exclusive")
    if max_parked is not None and on_error != "park":
        # Taken silently, it would read as a bound that --on-error stop never applies.
        raise click.UsageError("--max-parked applies only with --on-error park")
    if ack_timeout is not None and stream_command is None:
        raise click.UsageError("--ack-timeout applies only with --exec-stream")
    if max_interval < min_interval:
        raise click.BadParameter("must be at least --min-interval", param_hint="--max-interval")
    handler: _Handler
    if exec_command is not None:
        handler = _exec_handler(exec_command)
    elif stream_command is not None:
        handler = _Streamed(stream_command, _argv(stream_command, "--exec-stream"), ack_timeout)
    elif jsonl:
        handler = _Gathered() if checkpoint_every == "page" else print_json
    else:
        handler = _print_line
    # Everything loaded so far (the modules) stays while the command runs. So the cyclic
    # garbage collector need not walk it again at each full collection. A catch-up's pages
    # make full collections frequent. They cost 7-10 % of a catch-up's time with lxml, and
    # 2-4 % with feedparser. bench/consume.py measures this, both parsers reading ahead on a
    # thread. The command unfreezes after, so a run in-process (by tests) leaves the
    # collector as it found it. The library leaves the collector to the application.
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
    handler: _Handler,
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
    """Run the consumer and return the exit code. Report errors on standard error."""
    logger = logging.getLogger("simplefeed.client")
    log_handler = logging.StreamHandler(sys.stderr)
    log_handler.setFormatter(_OneLine("simplefeed consume: %(message)s"))
    logger.addHandler(log_handler)
    level = logger.level  # Restored after, for a command run in-process by tests.
    if debug:
        logger.setLevel(logging.DEBUG)
    elif logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    bars = _ProgressBars()
    # SIGTERM (systemd, Kubernetes, `kill`) stops it as Ctrl-C does. The checkpoint is stored
    # on the last entry handled, the state file's lock is let go, and the exit is 130. Ending
    # at once would lose the work since the last checkpoint, up to a page.
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
            _process(consumer, handler, follow)
        return EXIT_OK
    except HandlerError as exc:
        return _fail(EXIT_HANDLER, exc.naming(FLAGS), bars)
    except ExecFailed as exc:
        return _fail(EXIT_HANDLER, str(exc), bars)
    except NoSuchEntry as exc:  # Only the feed itself can tell that --from SEQ is missing.
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
    """Report an exception that no error of ours describes (a bug).

    The report is one line, and the traceback comes only with ``--debug``. Returns
    :data:`EXIT_INTERNAL`. The checkpoint is where the last handled entry left it, because the
    consumer stores it only after an entry or page is done.
    """
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


if __name__ == "__main__":  # pragma: no cover - `python -m simplefeed.client.command`
    consume()
