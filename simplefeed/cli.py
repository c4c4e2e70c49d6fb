"""The ``simplefeed`` command: thin, arguments -> Settings -> core functions."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from simplefeed.client.command import consume, consumer_group
from simplefeed.errors import SimplefeedError
from simplefeed.settings import FEED_NAME_RE, Settings

#: The checkout this package runs from: uwsgi.ini, alembic.ini and alembic/ live there.
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except SimplefeedError as exc:
        raise click.ClickException(str(exc)) from None


def _core() -> Any:
    from simplefeed.core import Simplefeed

    return Simplefeed(_settings())


@click.group()
@click.version_option(package_name="simplefeed")
def main() -> None:
    """Simplefeed: RFC 5005 archived Atom event feeds.

    Configuration comes from SIMPLEFEED_* environment variables (see README.md).
    """


main.add_command(consume)
main.add_command(consumer_group)


@main.command()
@click.option("--port", type=int, default=8080, show_default=True, help="TCP port to listen on.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--processes", type=int, default=4, show_default=True, help="uWSGI workers.")
@click.option(
    "--ini",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=PROJECT_ROOT / "uwsgi.ini",
    show_default="uwsgi.ini of this checkout",
)
def serve(port: int, host: str, processes: int, ini: Path) -> None:
    """Run the service under uWSGI (migrate first with `simplefeed db upgrade`)."""
    settings = _settings()
    env = dict(os.environ)
    env["SIMPLEFEED_HTTP_SOCKET"] = f"{host}:{port}"
    env["SIMPLEFEED_PROCESSES"] = str(processes)
    env["SIMPLEFEED_ARCHIVE_DIR"] = str(settings.archive_dir.resolve())
    settings.archive_dir.mkdir(parents=True, exist_ok=True)
    uwsgi = Path(sys.executable).with_name("uwsgi")
    argv = [str(uwsgi) if uwsgi.exists() else "uwsgi", "--ini", str(ini)]
    click.echo(f"simplefeed: serving {settings.base_url} on http://{host}:{port}", err=True)
    os.execvpe(argv[0], argv, env)


@main.group()
def db() -> None:
    """Database schema (alembic)."""


def alembic_config(database_url: str) -> Any:
    from alembic.config import Config

    cfg = Config(str(PROJECT_ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    return cfg


@db.command()
def upgrade() -> None:
    """Migrate the database to the newest schema and create the default feed."""
    from alembic import command
    from simplefeed.errors import FeedExists

    settings = _settings()
    command.upgrade(alembic_config(settings.database_url), "head")
    core = _core()
    try:
        core.create_feed(settings.default_feed)
        click.echo(f"created default feed {settings.default_feed!r}")
    except FeedExists:
        pass
    click.echo(f"database is at the newest schema: {settings.database_url}")


@main.group()
def feed() -> None:
    """Feeds."""


@feed.command("create")
@click.argument("name")
@click.option("--page-size", type=click.IntRange(1, 10_000), help="Entries per page.")
@click.option("--title", help="Feed title (default: the name).")
def feed_create(name: str, page_size: int | None, title: str | None) -> None:
    """Create a feed named NAME (lowercase letters, digits, - and _)."""
    if not FEED_NAME_RE.match(name):
        raise click.BadParameter("use 1-64 of a-z 0-9 - _, starting with a letter or digit")
    try:
        f = _core().create_feed(name, title=title, page_size=page_size)
    except SimplefeedError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"created feed {f.name!r} ({f.atom_id}), {f.page_size} entries per page")


@feed.command("list")
def feed_list() -> None:
    """List feeds with their head sequence number."""
    for f in _core().feeds():
        click.echo(f"{f.name}\t{f.head_seq} entries\t{f.page_size} per page\t{f.title}")


@main.group()
def token() -> None:
    """Producer tokens (publishing needs one; reading does not)."""


@token.command("create")
@click.option("--feed", "feed_name", help="Limit the token to this feed (default: every feed).")
@click.option("--label", help="A note to recognise the token by in `token list`.")
def token_create(feed_name: str | None, label: str | None) -> None:
    """Mint a token and print it once; only its hash is stored."""
    try:
        value = _core().create_token(feed=feed_name, label=label)
    except SimplefeedError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(value)
    click.echo("(shown once: store it now; publish with 'Authorization: Bearer <token>')", err=True)


@token.command("list")
def token_list() -> None:
    """List tokens: id, feed, state, label (never the secrets)."""
    from simplefeed.model import rfc3339

    for t in _core().tokens():
        state = "revoked " + rfc3339(t.revoked_us) if t.revoked_us is not None else "active"
        click.echo(
            f"{t.id}\t{t.feed or '*'}\t{state}\tcreated {rfc3339(t.created_us)}\t{t.label or ''}"
        )


@token.command("revoke")
@click.argument("token_id", type=int)
def token_revoke(token_id: int) -> None:
    """Revoke token TOKEN_ID (see `token list`); it stops working at once."""
    if not _core().revoke_token(token_id):
        raise click.ClickException(f"no active token with id {token_id}")
    click.echo(f"revoked token {token_id}")


@main.group()
def archive() -> None:
    """Static archive files."""


@archive.command("rebuild")
@click.option("--feed", "feed_name", help="Only this feed.")
def archive_rebuild(feed_name: str | None) -> None:
    """Rewrite any missing or damaged static page from the database, byte-identically."""
    try:
        report = _core().rebuild_archive(feed_name)
    except SimplefeedError as exc:
        raise click.ClickException(str(exc)) from None
    for path in report.restored:
        click.echo(f"restored {path}")
    click.echo(f"checked {report.checked} frozen pages, restored {len(report.restored)}")


@archive.command("verify")
@click.option("--feed", "feed_name", help="Only this feed.")
def archive_verify(feed_name: str | None) -> None:
    """Check every static page against the database (bytes, ETag, the chain of sf:sha256
    digests); exit 1 naming each difference. Run it after deploys and from cron."""
    core = _core()
    try:
        report = core.verify_archive(feed_name)
    except SimplefeedError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        core.store.close()
    for problem in report.problems:
        click.echo(problem, err=True)
    click.echo(f"checked {report.checked} frozen pages, {len(report.problems)} problems")
    if report.problems:
        sys.exit(1)


@main.command()
@click.option("--url", default=None, help="Service base URL (default: SIMPLEFEED_BASE_URL).")
@click.option("--feed", "feed_name", default=None, help="Named feed (default feed if omitted).")
@click.option("--title", help="Event title; without it, read JSON (event or array) from stdin.")
@click.option("--content", help="Event content (text).")
@click.option("--content-type", help="text, html, xhtml or a media type.")
@click.option("--id", "entry_id", help="Entry id (an IRI) for idempotent retries.")
@click.option(
    "--token",
    envvar="SIMPLEFEED_TOKEN",
    required=True,
    help="Producer token [env SIMPLEFEED_TOKEN].",
)
def publish(
    url: str | None,
    feed_name: str | None,
    title: str | None,
    content: str | None,
    content_type: str | None,
    entry_id: str | None,
    token: str,
) -> None:
    """Publish an event over HTTP, as a producer would."""
    import httpx

    base = (url or _settings().base_url).rstrip("/")
    target = f"{base}/feeds/{feed_name}/entries" if feed_name else f"{base}/entries"
    payload: Any
    if title is None:
        payload = json.load(sys.stdin)
    else:
        payload = {"title": title}
        for key, value in (("content", content), ("content_type", content_type), ("id", entry_id)):
            if value is not None:
                payload[key] = value
    try:
        response = httpx.post(
            target, json=payload, timeout=30, headers={"Authorization": f"Bearer {token}"}
        )
    except httpx.HTTPError as exc:
        raise click.ClickException(f"{target}: {exc}") from None
    click.echo(response.text)
    if response.status_code >= 400:
        sys.exit(1)
