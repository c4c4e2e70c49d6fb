"""``simplefeed consume``: the consumer from the shell.

::

    simplefeed consume URL --state FILE [--from start|now] [--jsonl | --exec CMD] [--follow]
                           [--parser feedparser|lxml] [--checkpoint entry|page]

Prints (default: ``seq<TAB>id<TAB>title``), prints as JSON lines (``--jsonl``: one object per
entry with id, seq, title, updated, content, content_type, summary, links, page), or runs a
command per entry (``--exec``: the JSON object on its standard input, ``SIMPLEFEED_ENTRY_ID`` and
``SIMPLEFEED_ENTRY_SEQ`` in its environment; a non-zero exit stops processing at that entry).
Entries come oldest first, at least once (see :mod:`simplefeed.client.consumer`). Without
``--follow`` the command exits 0 once caught up; with it, it polls on until interrupted.

Exit codes:

===  ===========================================================================================
0    caught up (without ``--follow``)
2    usage error
3    the handler failed: ``--exec`` exited non-zero or could not be run, or output could not be
     written; the checkpoint is on the entry before
4    the feed broke the protocol: not Atom, a malformed page, a link loop, a sequence gap, the
     last processed entry gone; the checkpoint is untouched
5    HTTP: gave up after the retries (network errors, timeouts, 5xx), or an unexpected status
6    the state file cannot be used
130  interrupted (Ctrl-C)
===  ===========================================================================================

``--parser lxml`` reads the documents a Simplefeed server renders with lxml, more than ten times
faster than feedparser (the default), with equal results, and anything unusual with feedparser
still (see :mod:`simplefeed.client.parse`): worth it when catching up on a long history.

A progress bar is drawn on standard error while catching up over several pages, only when
standard error is a terminal. The lead wires this command into ``simplefeed.cli`` with
``main.add_command(consume)``.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import click

from simplefeed.client.consumer import CheckpointEvery, Consumer, Start
from simplefeed.client.errors import (
    FeedError,
    FetchError,
    HandlerError,
    StateError,
)
from simplefeed.client.fetch import RetryPolicy
from simplefeed.client.parse import PARSERS, FeedEntry, Parser
from simplefeed.client.poll import PollPolicy
from simplefeed.client.walk import Progress

__all__ = ["EXIT_CODES", "consume"]

EXIT_OK = 0
EXIT_HANDLER = 3
EXIT_FEED = 4
EXIT_HTTP = 5
EXIT_STATE = 6
EXIT_INTERRUPTED = 130

EXIT_CODES = {
    EXIT_OK: "caught up",
    2: "usage error",
    EXIT_HANDLER: "handler failed (--exec exited non-zero, or output failed)",
    EXIT_FEED: "feed broke the protocol (not Atom, link loop, sequence gap, entry gone)",
    EXIT_HTTP: "HTTP gave up after retries, or an unexpected status",
    EXIT_STATE: "state file unusable",
    EXIT_INTERRUPTED: "interrupted",
}


class ExecFailed(Exception):
    def __init__(self, command: str, detail: str) -> None:
        super().__init__(f"{command!r} {detail}")


def _print_line(entry: FeedEntry) -> None:
    click.echo(f"{entry.seq}\t{entry.id}\t{entry.title}")


def _print_json(entry: FeedEntry) -> None:
    click.echo(json.dumps(entry.to_json(), ensure_ascii=False, separators=(",", ":")))


def _exec_handler(command: str) -> Callable[[FeedEntry], None]:
    argv = shlex.split(command)
    if not argv:
        raise click.BadParameter("empty command", param_hint="--exec")

    def run(entry: FeedEntry) -> None:
        data = json.dumps(entry.to_json(), ensure_ascii=False).encode("utf-8") + b"\n"
        env = dict(os.environ)
        env["SIMPLEFEED_ENTRY_ID"] = entry.id
        env["SIMPLEFEED_ENTRY_SEQ"] = str(entry.seq)
        try:
            result = subprocess.run(argv, input=data, env=env, check=False)
        except OSError as exc:
            raise ExecFailed(command, f"could not be run: {exc}") from exc
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


@click.argument("url")
@click.option(
    "--state",
    "state_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="SQLite file for the checkpoint and the page cache (created if missing).",
)
@click.option(
    "--from",
    "start",
    type=click.Choice(["start", "now"]),
    default="start",
    show_default=True,
    help="Without a checkpoint: read the whole history, or only entries published from now on.",
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
    help="How entries are parsed: feedparser for everything, or lxml for the documents a "
    "Simplefeed server renders (much faster, same entries; feedparser for anything unusual).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds per HTTP request.",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Retries of a failing request (network error, timeout, 5xx) before giving up.",
)
@click.option(
    "--min-interval",
    type=click.FloatRange(min=0.1),
    default=1.0,
    show_default=True,
    help="Shortest polling interval with --follow, in seconds (never below max-age).",
)
@click.option(
    "--max-interval",
    type=click.FloatRange(min=0.1),
    default=300.0,
    show_default=True,
    help="Longest polling interval with --follow, in seconds.",
)
def _consume(
    url: str,
    state_path: Path,
    start: Start,
    jsonl: bool,
    exec_command: str | None,
    follow: bool,
    checkpoint_every: CheckpointEvery,
    parser: Parser,
    timeout: float,
    retries: int,
    min_interval: float,
    max_interval: float,
) -> None:
    """Read the feed at URL: new entries, oldest first, at least once.

    Walks back from URL (the entry point) to the last processed entry, then forward; stores the
    checkpoint in the --state file. Exits 0 once caught up, unless --follow.

    \b
    Exit codes:
      0    caught up
      2    usage error
      3    handler failed (--exec exited non-zero, or output failed);
           the checkpoint is on the entry before
      4    feed broke the protocol (not Atom, link loop, sequence gap,
           last processed entry gone); checkpoint untouched
      5    HTTP gave up after the retries, or an unexpected status
      6    state file unusable
      130  interrupted
    """
    if jsonl and exec_command is not None:
        raise click.UsageError("--jsonl and --exec are mutually exclusive")
    if max_interval < min_interval:
        raise click.BadParameter("must be at least --min-interval", param_hint="--max-interval")
    handler: Callable[[FeedEntry], None]
    if exec_command is not None:
        handler = _exec_handler(exec_command)
    elif jsonl:
        handler = _print_json
    else:
        handler = _print_line
    sys.exit(
        _run(
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
        )
    )


def _run(
    url: str,
    state_path: Path,
    handler: Callable[[FeedEntry], None],
    *,
    start: Start,
    follow: bool,
    checkpoint_every: CheckpointEvery,
    timeout: float,
    retry: RetryPolicy,
    poll: PollPolicy,
    parser: Parser = "feedparser",
) -> int:
    """Run the consumer; return the exit code. Errors are reported on standard error."""
    logger = logging.getLogger("simplefeed.client")
    log_handler = logging.StreamHandler(sys.stderr)
    log_handler.setFormatter(logging.Formatter("simplefeed consume: %(message)s"))
    logger.addHandler(log_handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    bars = _ProgressBars()
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
        ) as consumer:
            consumer.run(handler, follow=follow)
        return EXIT_OK
    except HandlerError as exc:
        return _fail(EXIT_HANDLER, str(exc), bars)
    except FeedError as exc:
        return _fail(EXIT_FEED, f"{exc} (checkpoint untouched)", bars)
    except FetchError as exc:
        return _fail(EXIT_HTTP, str(exc), bars)
    except StateError as exc:
        return _fail(EXIT_STATE, str(exc), bars)
    except KeyboardInterrupt:
        return _fail(EXIT_INTERRUPTED, "interrupted", bars)
    finally:
        bars.close()
        logger.removeHandler(log_handler)


def _fail(code: int, message: str, bars: _ProgressBars) -> int:
    bars.close()
    click.echo(f"simplefeed consume: error: {message}", err=True)
    return code


consume = click.command("consume")(_consume)

if __name__ == "__main__":  # pragma: no cover - `python -m simplefeed.client.command`
    consume()
