"""The ``simplefeed`` command, a thin layer from arguments to Settings to core functions.

Every command that uses the database first checks that it exists, answers and is migrated
(:func:`simplefeed.store.schema.check_ready`). Only ``db upgrade`` creates one. A project error
ends a command with one line on standard error and exit status 1, never a traceback. The
commands ``archive verify`` and ``archive rebuild`` end so with status 3
(:data:`COULD_NOT_CHECK`). They keep 1 for what they found.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import click

from simplefeed.errors import SimplefeedError
from simplefeed.lines import one_line
from simplefeed.runtime import load_settings
from simplefeed.settings import (
    MAX_PAGE_SIZE,
    MAX_PROCESSES,
    Settings,
    base_url_problem,
    misspelt_variables,
    service_url_problem,
)

#: The checkout this package runs from, where uwsgi.ini lives.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _settings() -> Settings:
    settings = load_settings()
    for warning in misspelt_variables():
        click.echo(f"simplefeed: warning: {warning}", err=True)
    return settings


@contextlib.contextmanager
def _core() -> Iterator[Any]:
    """Yield the core on the settings' database, checked ready first.

    The core is closed when the command is done with it. That closes its connections and its
    change watcher.
    """
    from simplefeed.service import Simplefeed
    from simplefeed.store import check_ready

    settings = _settings()
    check_ready(settings.database_url)
    core = Simplefeed(settings)
    try:
        yield core
    finally:
        core.close()


class _Commands(click.Group):
    """End project errors from any command as one line and exit status 1.

    Their control characters are escaped. The consumer's commands and the relay are loaded
    when asked for, as click's "lazily loading subcommands" describes. Their modules (httpx,
    feedparser, lxml) would add 0.3 s to every operator command's start.
    """

    _LAZY: ClassVar[dict[str, tuple[str, str]]] = {
        "consume": ("simplefeed.client.command", "consume"),
        "consumer": ("simplefeed.client.state_commands", "consumer_group"),
        "relay": ("simplefeed.runtime.relay", "relay"),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._LAZY:
            module, name = self._LAZY[cmd_name]
            command: click.Command = getattr(importlib.import_module(module), name)
            return command
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SimplefeedError as exc:
            raise click.ClickException(one_line(str(exc))) from None
        except click.ClickException as exc:
            # One line, whatever it quotes, such as a setting's value or a path. A newline in
            # one would forge a second line of the error. Click declares the attribute final
            # for its type checker, but it is a plain attribute.
            exc.message = one_line(exc.message)  # type: ignore[misc]
            raise


@click.group(cls=_Commands)
@click.version_option(package_name="simplefeed")
def main() -> None:
    """Simplefeed: RFC 5005 archived Atom event feeds.

    Configuration comes from SIMPLEFEED_* environment variables. See
    docs/reference/settings.md. The command `simplefeed config` shows the effective values.
    """


@main.command("config")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def config_command(as_json: bool) -> None:
    """Print the effective settings, passwords masked.

    The settings come from the environment and defaults. Beside them it prints the file a
    SQLite database is. It says whether the base URL is the default. The JSON leaves both out,
    because its values are the settings' alone.
    """
    settings = _settings()
    shown = settings.describe()
    if as_json:
        click.echo(json.dumps(shown, indent=2))
        return
    from simplefeed.store import database_file

    notes = settings.notes()
    path = database_file(settings.database_url)
    if path is not None:
        notes["SIMPLEFEED_DATABASE_URL"] = f"file {path}"
    width = max(map(len, shown))
    for name, value in shown.items():
        note = f"  ({notes[name]})" if name in notes else ""
        click.echo(f"{name:<{width}}  {'' if value is None else value}{note}".rstrip())


@main.command()
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8080,
    show_default=True,
    help="TCP port to listen on.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--processes",
    type=click.IntRange(1, MAX_PROCESSES),
    default=None,
    help="uWSGI workers  [default: SIMPLEFEED_PROCESSES, else 4]",
)
@click.option(
    "--ini",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=PROJECT_ROOT / "uwsgi.ini",
    show_default="uwsgi.ini of this checkout",
)
@click.option(
    "--user",
    help="Started as root: run uWSGI as this user (it must be able to write the database and "
    "the archive directory).",
)
@click.pass_context
def serve(
    ctx: click.Context, port: int, host: str, processes: int | None, ini: Path, user: str | None
) -> None:
    """Run the service under uWSGI (migrate first with `simplefeed db upgrade`).

    It listens on SIMPLEFEED_HTTP_SOCKET when that is set, and --host and --port may not say
    otherwise. Else it listens on HOST:PORT. Links in the documents use SIMPLEFEED_BASE_URL.
    When that is unset they use http://localhost:PORT, which only a service on loopback may
    do.
    """
    from simplefeed.runtime import serve as starting

    settings = _settings()
    given = {
        name: ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
        for name in ("host", "port")
    }
    host, port, listening = starting.listen_address(
        host, given["host"], port, given["port"], settings.http_socket
    )
    starting.run(settings, starting.Listen(host, port, listening), processes, ini, user)


@main.group()
def db() -> None:
    """Database schema (alembic)."""


@db.command()
def upgrade() -> None:
    """Create the database if need be, migrate it, and create the default feed.

    The migration goes to the newest schema. The default feed is not created if another feed's
    archived pages are at its URLs, so a mistyped name is not created. Then, if
    SIMPLEFEED_BASE_URL is set, it checks that no feed's archived pages link elsewhere.
    """
    from simplefeed.errors import FeedExists
    from simplefeed.service import Simplefeed
    from simplefeed.settings import mask_url
    from simplefeed.store import SCHEMA_REVISION
    from simplefeed.store import upgrade as upgrade_schema

    settings = _settings()
    before = upgrade_schema(settings.database_url)
    core = Simplefeed(settings)
    try:
        core.check_default_feed_pages()  # Before the default feed is created.
        try:
            core.create_feed(settings.default_feed)
            click.echo(f"created default feed {settings.default_feed!r}")
        except FeedExists:
            pass
        shown = mask_url(settings.database_url)
        if before == SCHEMA_REVISION:
            click.echo(f"database is at the newest schema ({before}), nothing migrated: {shown}")
        elif before is None:
            click.echo(f"database created at the newest schema ({SCHEMA_REVISION}): {shown}")
        else:
            click.echo(f"database migrated from schema {before} to {SCHEMA_REVISION}: {shown}")
        # Say at once if the database is older than the archive, as after a restore. Say so
        # too if part of the archive is lost.
        core.check_archive(every_file=True)
        # Without SIMPLEFEED_BASE_URL, `serve --port` decides the base URL, so serve checks.
        if settings.base_url_given:
            core.check_base_url()
        page_size = core.default_feed_page_size_warning()  # One line, after the checks.
    finally:
        core.close()
    if page_size is not None:
        click.echo(f"simplefeed: warning: {page_size}", err=True)


@main.group()
def feed() -> None:
    """Feeds."""


@feed.command("create")
@click.argument("name")
@click.option("--page-size", type=click.IntRange(1, MAX_PAGE_SIZE), help="Entries per page.")
@click.option("--title", help="Feed title (default: the name).")
def feed_create(name: str, page_size: int | None, title: str | None) -> None:
    """Create a feed named NAME, of lowercase letters, digits, - and _."""
    with _core() as core:
        f = core.create_feed(name, title=title, page_size=page_size)
    click.echo(f"created feed {f.name!r} ({f.atom_id}), {f.page_size} entries per page")


@feed.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of every feed's stats.")
def feed_list(as_json: bool) -> None:
    """List feeds.

    Each line gives the name, state (live or retired), head sequence number, pages, page size,
    last publish and title.
    """
    from simplefeed.lines import escape_field

    with _core() as core:
        stats = [core.stats(f) for f in core.feeds()]
    if as_json:
        click.echo(json.dumps([s.describe() for s in stats], indent=2))
        return
    rows: list[tuple[str, ...]] = [
        ("FEED", "STATE", "HEAD", "PAGES", "PAGE SIZE", "LAST PUBLISH (UTC)", "TITLE")
    ]
    for s in stats:
        shown = s.describe()
        rows.append(
            (
                s.feed.name,
                str(shown["state"]),
                str(s.feed.head_seq),
                str(s.pages),
                str(s.feed.page_size),
                str(shown["last_publish"] or "never"),
                escape_field(s.feed.title),
            )
        )
    _table(rows)


def _table(rows: list[tuple[str, ...]]) -> None:
    """Print columns separated by two spaces, each as wide as its widest cell.

    The last column is not padded.
    """
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        click.echo("  ".join([*cells, row[-1]]).rstrip())


@feed.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def feed_show(name: str, as_json: bool) -> None:
    """Show a feed's stats.

    They are its head, its pages (archived and working), the last publish, the base URL, and
    the URLs to read it from.
    """
    from simplefeed.lines import escape_field

    with _core() as core:
        shown = core.stats(core.feed(name)).describe()
    recorded = shown["archived_pages_base_url"]
    if recorded is not None and recorded != shown["base_url"]:
        # Without SIMPLEFEED_BASE_URL, `serve --port N` links to port N. A command run beside
        # it without the variable builds its URLs on the default.
        click.echo(
            f"simplefeed: warning: feed {name!r}'s pages link to {recorded}, but these URLs are"
            f" built on {shown['base_url']} (SIMPLEFEED_BASE_URL); set it to {recorded}",
            err=True,
        )
    if as_json:
        click.echo(json.dumps(shown, indent=2))
        return
    entry_points = shown.pop("entry_points")
    assert isinstance(entry_points, dict)
    absent = {"last_publish": "never", "retired": "no", "archived_pages_base_url": "none recorded"}
    lines = {k: absent.get(k, "") if v is None else escape_field(str(v)) for k, v in shown.items()}
    lines.update({f"url {k}": v for k, v in entry_points.items()})
    width = max(map(len, lines))
    for key, value in lines.items():
        click.echo(f"{key:<{width}}  {value}")


@feed.command("retire")
@click.argument("name")
def feed_retire(name: str) -> None:
    """Retire feed NAME, so that every publish to it is refused.

    Its documents are served as ever, and nothing is deleted. But every publish is refused
    with 410 Gone. The command `feed unretire NAME` undoes it.
    """
    from simplefeed.model import rfc3339

    with _core() as core:
        f = core.retire_feed(name)
    assert f.retired_us is not None
    click.echo(
        f"feed {name!r} retired at {rfc3339(f.retired_us)}: reads go on, publishes get 410 Gone"
    )


@feed.command("unretire")
@click.argument("name")
def feed_unretire(name: str) -> None:
    """Take retired feed NAME back into service, so that publishing works again."""
    with _core() as core:
        core.unretire_feed(name)
    click.echo(f"feed {name!r} takes events again")


@main.group()
def token() -> None:
    """Producer tokens. Publishing needs one, and reading does not."""


@token.command("create")
@click.option("--feed", "feed_name", help="Limit the token to this feed (default: every feed).")
@click.option(
    "--label", help="A note to recognise the token by in `token list` (one line, 200 characters)."
)
def token_create(feed_name: str | None, label: str | None) -> None:
    """Mint a token and print it once. Only its hash is stored."""
    with _core() as core:
        value = core.create_token(feed=feed_name, label=label)
    click.echo(value)
    click.echo("(shown once: store it now; publish with 'Authorization: Bearer <token>')", err=True)


@token.command("list")
def token_list() -> None:
    """List tokens, one a line, tab-separated, never with their secrets.

    Each line gives the id, the feed it may publish to (* for any), the state, the creation
    time and the label.
    """
    from simplefeed.lines import escape_field
    from simplefeed.model import rfc3339

    with _core() as core:
        tokens = core.tokens()
    for t in tokens:
        state = "revoked " + rfc3339(t.revoked_us) if t.revoked_us is not None else "active"
        click.echo(
            f"{t.id}\t{t.feed or '*'}\t{state}\tcreated {rfc3339(t.created_us)}"
            f"\t{escape_field(t.label or '')}"
        )


@token.command("revoke")
@click.argument("token_id", type=int)
def token_revoke(token_id: int) -> None:
    """Revoke token TOKEN_ID (see `token list`). It stops working at once."""
    with _core() as core:
        revoked = core.revoke_token(token_id)
    if not revoked:
        raise click.ClickException(f"no active token with id {token_id}")
    click.echo(f"revoked token {token_id}")


@token.command("rotate")
@click.argument("token_id", type=int)
def token_rotate(token_id: int) -> None:
    """Give token TOKEN_ID a new secret, and print the new token once.

    The old one stops working at once. Its id, feed and label stay. So `token list` and the
    logs still match.
    """
    with _core() as core:
        value = core.rotate_token(token_id)
    if value is None:
        raise click.ClickException(f"no active token with id {token_id}")
    click.echo(value)
    click.echo(
        "(shown once: store it now; the old token no longer works: update the producer)",
        err=True,
    )


@main.group()
def archive() -> None:
    """Static archive files."""


#: The exit status of ``archive verify`` and ``archive rebuild`` when they could not check the
#: archive at all. The cause lies in the database, the archive directory or the settings. They
#: give 1 for what they found, such as differences or files not written. So a cron job can
#: tell the two apart.
COULD_NOT_CHECK = 3


class _CouldNotCheck(click.ClickException):
    exit_code = COULD_NOT_CHECK


@contextlib.contextmanager
def _could_not_check() -> Iterator[None]:
    """End the command on a project error inside, with one line and :data:`COULD_NOT_CHECK`."""
    try:
        yield
    except SimplefeedError as exc:
        raise _CouldNotCheck(str(exc)) from None


@archive.command("rebuild")
@click.option("--feed", "feed_name", help="Only this feed.")
def archive_rebuild(feed_name: str | None) -> None:
    """Rewrite any missing or damaged static page from the database, byte-identically.

    \b
    Exit status:
      0  every page file is the database's (restored now, or already)
      1  page files that could not be written, each named on standard error
      2  usage: an option or argument it does not take
      3  nothing was checked, said in one line: the database (missing, not
         migrated, not answering), a setting (the default feed among them),
         or --feed naming no feed
    """
    with _could_not_check(), _core() as core:
        _report(_archive_and_database("rebuilding", "from", core.settings))
        report = core.rebuild_archive(feed_name)
    for path in report.restored:
        _report(f"restored {path}")
    for where in report.uploaded:
        _report(f"put {where}")
    for problem in report.unwritten:
        _report(problem, err=True)
    put = f", put {len(report.uploaded)} in the bucket" if core.settings.archive_url else ""
    click.echo(f"checked {report.checked} archived pages, restored {len(report.restored)}{put}")
    if report.unwritten:
        raise click.ClickException(f"{len(report.unwritten)} page files could not be written")


def _archive_and_database(doing: str, relation: str, settings: Settings) -> str:
    """Return the first line of ``archive rebuild`` and ``verify``.

    It names the directory and the database in absolute terms. A cron job run from another
    directory would otherwise check another archive unnoticed.
    """
    from simplefeed.store import database_shown

    return (
        f"{doing} archive {settings.archive_dir} {relation} database"
        f" {database_shown(settings.database_url)}"
    )


def _report(line: str, *, err: bool = False) -> None:
    """Print one line of an archive command's report, escaped as errors are.

    Its paths and problems name files. A newline in the archive directory's name would forge
    lines.
    """
    click.echo(one_line(line), err=err)


@archive.command("rebase")
@click.argument("new_base_url")
@click.option("--feed", "feed_name", help="Only this feed (default: every feed).")
def archive_rebase(new_base_url: str, feed_name: str | None) -> None:
    """Render every archived page again with NEW_BASE_URL, after the service moved.

    It records NEW_BASE_URL as the feed's, and replaces the page files. It prints the URLs a
    CDN must purge, one a line. Stop the service first. Start it again with
    SIMPLEFEED_BASE_URL=NEW_BASE_URL. Every changed page gets new bytes and a new ETag. So
    consumers and caches fetch them again.
    """
    from simplefeed.service import Simplefeed
    from simplefeed.store import check_ready

    problem = base_url_problem(new_base_url)
    if problem is not None:
        raise click.BadParameter(f"{new_base_url!r} {problem}", param_hint="NEW_BASE_URL")
    settings = load_settings({**os.environ, "SIMPLEFEED_BASE_URL": new_base_url})
    check_ready(settings.database_url)
    core = Simplefeed(settings)
    try:
        rebased = core.rebase_archive(feed_name)
    finally:
        core.close()
    for r in rebased:
        click.echo(
            f"feed {r.feed!r}: {r.changed} of {r.pages} archived pages rendered again with "
            f"{r.base_url} (they linked to {r.old_base_url or 'an unrecorded base URL'})",
            err=True,
        )
        for url in r.purge:
            click.echo(url)
        for recent in (url for url in r.purge if url.endswith("/recent")):
            click.echo(
                f"feed {r.feed!r}: also purge the entry locators, by prefix: "
                f"{recent.removesuffix('recent')}entries/",
                err=True,
            )
    unwritten = [problem for r in rebased for problem in r.unwritten]
    for problem in unwritten:
        _report(f"{problem} (`simplefeed archive rebuild` writes it)", err=True)
    if unwritten:
        raise click.ClickException(f"{len(unwritten)} page files could not be written")
    if os.environ.get("SIMPLEFEED_BASE_URL") != settings.base_url:
        click.echo(f"now start the service with SIMPLEFEED_BASE_URL={settings.base_url}", err=True)


@archive.command("recover")
@click.option("--feed", "feed_name", help="Only this feed.")
def archive_recover(feed_name: str | None) -> None:
    """Take back into the database the page files past its archived pages, with their entries.

    A database restored from a backup older than the archive lacks them. So does one lost and
    started anew. A page is taken back when its entries, read back, render to its bytes
    exactly. The next page's sf:sha256 must vouch for those bytes too. For the newest page, its
    .br and .gz copies vouch, when there are any. A damaged file whose copy passes is taken
    back from the copy and written again. It stops at the first page that cannot be taken
    back, and names it. A feed the database lacks is created again as its first page says.
    Run it with the service stopped and with its settings, SIMPLEFEED_BASE_URL among them.
    Then start the service, and each feed goes on after its pages.

    \b
    Exit status:
      0  every page file past the database's is taken back (or there is none)
      1  a page file that could not be taken back, or a copy (.br, .gz) that
         could not be written, each named on standard error
      2  usage: an option or argument it does not take
      3  nothing was done, said in one line: the database (missing, not
         migrated, not answering), a file that cannot be read, a setting (the
         base URL, the default feed), or --feed naming no feed
    """
    with _could_not_check(), _core() as core:
        _report(_archive_and_database("recovering", "into", core.settings))
        core.check_base_url()
        core.check_default_feed_pages()
        recovered = core.recover_archive(feed_name)
    failed = 0
    for r in recovered:
        if r.created:
            click.echo(f"feed {r.feed!r}: created again as its first page says")
        if r.pages:
            click.echo(
                f"feed {r.feed!r}: took back pages {r.pages.start}-{r.pages.stop - 1}"
                f" ({r.entries} entries)"
            )
        if r.problem is not None:
            failed += 1
            _report(
                f"feed {r.feed!r}: {r.problem}; it and the files after it stay in the archive,"
                " and the service does not start while they are there"
                " (docs/how-to/backup.md)",
                err=True,
            )
        for path in r.written:
            _report(f"wrote again {path} (taken back from a copy, or missing)")
        for problem in r.unwritten:
            failed += 1
            _report(f"{problem} (`simplefeed archive rebuild` writes it)", err=True)
    if not recovered:
        click.echo("no page file past the database's archived pages: nothing to take back")
    if failed:
        sys.exit(1)


@archive.command("verify")
@click.option("--feed", "feed_name", help="Only this feed.")
def archive_verify(feed_name: str | None) -> None:
    """Check every static page against the database, and name each difference.

    It checks the bytes, the ETag, and the chain of sf:sha256 digests. Run it after deploys and
    from cron.

    \b
    Exit status:
      0  all is well
      1  differences, each named on standard error (`archive rebuild` restores
         missing and damaged files)
      2  usage: an option or argument it does not take
      3  the check could not be made, said in one line: the database (missing,
         not migrated, not answering), the archive directory (not a directory,
         unreadable, or no page file at all while the database has archived
         pages), a setting, or --feed naming no feed
    """
    with _could_not_check(), _core() as core:
        _report(_archive_and_database("checking", "against", core.settings))
        # Another default feed than the pages were archived as would look for its pages at the
        # other feed's files. That shows eight false differences, not the one setting to mend.
        core.check_default_feed_pages()
        report = core.verify_archive(feed_name)
    for problem in report.problems:
        _report(problem, err=True)
    problems = len(report.problems)
    click.echo(
        f"checked {report.checked} archived pages, {problems} problem{'' if problems == 1 else 's'}"
    )
    if report.problems:
        sys.exit(1)


@main.command()
@click.option("--url", default=None, help="Service base URL (default: SIMPLEFEED_BASE_URL).")
@click.option("--feed", "feed_name", default=None, help="Named feed (default feed if omitted).")
@click.option("--title", help="Event title; without it, read JSON (event or array) from stdin.")
@click.option("--content", help="Event content (text).")
@click.option("--content-type", help="text, html, xhtml or a media type.")
@click.option("--id", "entry_id", help="Entry id (an IRI); without it, a UUIDv7 one is made.")
@click.option(
    "--token",
    envvar="SIMPLEFEED_TOKEN",
    help="Producer token [env SIMPLEFEED_TOKEN].",
)
@click.option(
    "--retry-for",
    type=click.FloatRange(0),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Retry network errors and 429, 502, 503 and 504 for this long (0: try once).",
)
def publish(
    url: str | None,
    feed_name: str | None,
    title: str | None,
    content: str | None,
    content_type: str | None,
    entry_id: str | None,
    token: str | None,
    retry_for: float,
) -> None:
    """Publish an event over HTTP, as a producer would.

    The event is the one that --title describes, with --content, --content-type and --id. Or it
    is the JSON event, or array of events, on standard input.

    Every event is checked with the server's rules before any request, so an invalid event
    sends nothing. Each event gets its id before the first try, so a retry never publishes it
    twice. It prints the server's JSON answer. It prints a refusal the same way, and exits 1.
    The checks take the limits that SIMPLEFEED_MAX_* set here, as the server does.
    """
    from simplefeed.producer import Publisher, PublishRefused
    from simplefeed.settings import Limits

    if not token:
        raise click.UsageError(
            "a producer token is needed: --token or SIMPLEFEED_TOKEN"
            " (`simplefeed token create` mints one)"
        )
    target = _entries_url(url, feed_name)
    if title is None and (content, content_type, entry_id) != (None, None, None):
        raise click.UsageError(
            "--content, --content-type and --id go with --title; without --title, publish"
            " reads the event as JSON from standard input"
        )
    if title is None and sys.stdin.isatty():
        raise click.UsageError("give --title, or the event as JSON on standard input")
    if title is None:
        payload = _stdin_events()
    else:
        payload = {"title": title}
        for key, value in (("content", content), ("content_type", content_type), ("id", entry_id)):
            if value is not None:
                payload[key] = value
    # The server's limits, where its SIMPLEFEED_MAX_* settings are in this environment too.
    limits = Limits.from_env(os.environ)
    with Publisher(target, token, limits=limits, retry_for=retry_for) as publisher:
        try:
            answer = _publish_payload(publisher, payload)
        except PublishRefused as exc:
            refused = dict(exc.body)
            if exc.index is not None:
                refused["index"] = exc.index  # In the array given, not in one request of it.
            click.echo(json.dumps(refused, ensure_ascii=False))
            sys.exit(1)
    click.echo(json.dumps(answer, ensure_ascii=False))


def _entries_url(url: str | None, feed_name: str | None) -> str:
    """The URL to post a feed's events to, on ``url`` or the configured base URL."""
    from simplefeed.settings import FEED_NAME_RE

    problem = None if url is None else base_url_problem(url)
    if problem is not None:
        if service_url_problem(url or ""):
            problem += " (name a feed with --feed)"
        raise click.BadParameter(f"{url!r} {problem}", param_hint="--url")
    if feed_name is not None and not FEED_NAME_RE.match(feed_name):
        raise click.BadParameter(f"{feed_name!r} is not a feed name", param_hint="--feed")
    base = (url or _settings().base_url).rstrip("/")
    return f"{base}/feeds/{feed_name}/entries" if feed_name else f"{base}/entries"


def _stdin_events() -> dict[str, Any] | list[dict[str, Any]]:
    """Read standard input as the server reads a body: strict JSON, an event or an array."""
    from simplefeed.door.events import strict_json

    try:
        payload = strict_json(sys.stdin.buffer.read().decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError.
        raise click.ClickException(f"standard input is not JSON: {exc}") from None
    events = payload if isinstance(payload, list) else [payload]
    if not events:
        raise click.ClickException("standard input holds an empty array: nothing to publish")
    for i, event in enumerate(events):
        if not isinstance(event, dict):
            where = "standard input" if payload is event else f"event [{i}]"
            raise click.ClickException(f"{where} is not a JSON object, so not an event")
    return payload  # type: ignore[no-any-return]


def _publish_payload(publisher: Any, payload: dict[str, Any] | list[dict[str, Any]]) -> Any:
    """Publish one event or an array. Return the server's answer, as JSON values.

    An array past one request's limits goes in several requests, in order.
    """
    from dataclasses import asdict

    from simplefeed.errors import RequestError
    from simplefeed.producer import PublishUnavailable, prepare

    try:
        if isinstance(payload, dict):
            # Prepared alone, so that an error names the field, not the field of event 0.
            (published,) = publisher.send([prepare(payload, publisher.limits)])
            return asdict(published)
        return {"entries": [asdict(p) for p in publisher.publish_many(payload)]}
    except RequestError as exc:
        raise click.ClickException(
            f"nothing sent, because the server would refuse it: {exc.message}"
        ) from None
    except PublishUnavailable as exc:
        raise click.ClickException(f"{publisher.url}: {exc}") from None
