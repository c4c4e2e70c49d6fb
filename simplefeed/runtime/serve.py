"""Start the service: check what it needs, then hand the process over to uWSGI.

``simplefeed serve`` parses its options and calls :func:`run`. The checks run before uWSGI
starts, because uWSGI reports a problem only after the command has said it serves.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import pwd
import socket
import sys
from pathlib import Path
from typing import NamedTuple

import click

from simplefeed.errors import DatabaseNotReady
from simplefeed.settings import (
    Settings,
    loopback_base_url_warning,
    proxied_base_url_problem,
    socket_address,
    unset_base_url_problem,
)


class Listen(NamedTuple):
    """Where the service listens, and which setting or option said so (for messages)."""

    host: str
    port: int
    said_by: str


def run(
    settings: Settings, listen: Listen, processes: int | None, ini: Path, user: str | None
) -> None:
    """Check the database, the archive and the address, then exec uWSGI. Never returns."""
    database = _database_answers(settings)
    _make_archive_directory(settings)
    base_url = settings.base_url if settings.base_url_given else f"http://localhost:{listen.port}"
    page_size = _check_service(settings, base_url) if database else None
    problem = (
        _listen_problem(listen.host, listen.port)
        or unset_base_url_problem(listen.said_by, listen.host, settings.base_url_given)
        or proxied_base_url_problem(settings.uwsgi_socket, settings.base_url_given)
    )
    if problem is not None:
        raise click.ClickException(problem)
    warnings = (
        page_size,
        loopback_base_url_warning(listen.said_by, listen.host, base_url)
        if settings.base_url_given
        else None,
    )
    for warning in warnings:  # Said once nothing stops it, because a refusal is one line.
        if warning is not None:
            click.echo(f"simplefeed: warning: {warning}", err=True)
    processes = processes or settings.processes
    env = dict(os.environ)
    env["SIMPLEFEED_BASE_URL"] = base_url
    env["SIMPLEFEED_HTTP_SOCKET"] = settings.http_socket or f"{listen.host}:{listen.port}"
    env["SIMPLEFEED_PROCESSES"] = str(processes)
    env["SIMPLEFEED_THREADS"] = str(settings.threads)
    env["SIMPLEFEED_ARCHIVE_DIR"] = str(settings.archive_dir.resolve())
    _page_plugin(env)
    argv = _uwsgi_argv(ini, user, env)
    click.echo(
        f"simplefeed: serving on http://{listen.host}:{listen.port} ({processes} processes of"
        f" {settings.threads} threads), links say {base_url}",
        err=True,
    )
    # Consumers must start at the links' own origin. One given http://127.0.0.1:PORT/recent
    # finds the pages' links at http://localhost:PORT, another origin, and stops there.
    click.echo(f"simplefeed: consumers: {base_url}/recent", err=True)
    os.execvpe(argv[0], argv, env)


def _database_answers(settings: Settings) -> bool:
    """Whether the database answers. A database that answers but is not ready stops the start."""
    from simplefeed.store import check_ready

    try:
        check_ready(settings.database_url)
    except DatabaseNotReady as exc:
        if exc.answered:
            raise
        # Archived pages need no database, so they answer through an outage and a restart.
        click.echo(
            f"simplefeed: warning: {exc}; serving anyway: archived pages are sent from their"
            " files, and the rest answers 503 until the database answers",
            err=True,
        )
        return False
    return True


def _make_archive_directory(settings: Settings) -> None:
    """Make the archive directory, or stop with one line that says why it cannot be made."""
    try:
        settings.archive_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.ClickException(
            f"cannot make the archive directory {settings.archive_dir}: {exc.strerror or exc}"
        ) from None


def _check_service(settings: Settings, base_url: str) -> str | None:
    """Check the base URL, the default feed and every page file; return a page-size warning.

    Without a database these checks wait. A freeze still checks the base URL and the default
    feed, and never writes over a page file that holds another page.
    """
    from simplefeed.service import Simplefeed

    core = Simplefeed(dataclasses.replace(settings, base_url=base_url))
    try:
        core.check_base_url()
        core.check_default_feed()
        core.check_archive(every_file=True)
        return core.default_feed_page_size_warning()
    finally:
        core.close()


def _page_plugin(env: dict[str, str]) -> None:
    """Build the plugin that serves archived pages, and name it to uwsgi.ini in ``env``.

    Without it the routing rules of uwsgi.ini serve them, for more CPU a page, so the start
    goes on and says why.
    """
    from simplefeed.runtime import plugin

    env.pop("SIMPLEFEED_PAGE_PLUGIN", None)
    try:
        built = plugin.built_here(env)
    except plugin.PluginUnavailable as exc:
        click.echo(
            f"simplefeed: warning: cannot build the page plugin ({exc}), so uWSGI's routing"
            " rules serve archived pages, for more CPU a page",
            err=True,
        )
        return
    env["SIMPLEFEED_PAGE_PLUGIN"] = str(built)


def _uwsgi_argv(ini: Path, user: str | None, env: dict[str, str]) -> list[str]:
    """uWSGI's command line, with a fresh metrics directory for this run's workers in ``env``."""
    from simplefeed import metrics

    # Prometheus counters of this run's workers. uWSGI removes them when it exits. When it was
    # killed, the next run's serve removes them.
    metrics_dir = metrics.new_run_directory()
    env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    uwsgi = Path(sys.executable).with_name("uwsgi")
    argv = [str(uwsgi) if uwsgi.exists() else "uwsgi", "--ini", str(ini)]
    if uwsgi.exists():
        # pyuwsgi's uwsgi is a script. On a reload (SIGHUP) uWSGI runs it again with the
        # interpreter it found under it, which lacks the venv's packages, so the service
        # ended. This runs it as it ran first: the script, then our arguments.
        argv += ["--binary-path", sys.executable]
    # uWSGI removes the directory when it exits, and so before a reload too. It is made again
    # after the reload and before the workers load the app, because they stop without it.
    owner = metrics_dir / metrics.RUN_OWNER
    argv += ["--hook-as-user-atexit", f"exec:rm -rf {metrics_dir}"]
    argv += ["--hook-as-user", f"exec:mkdir -p {metrics_dir} && echo {os.getpid()} > {owner}"]
    if user is not None:
        argv += _drop_privileges(user, metrics_dir)
    elif os.geteuid() == 0:
        click.echo(
            "simplefeed: started as root, so uWSGI runs as root and says so; pass --user NAME "
            "to run it as NAME (docs/how-to/run.md)",
            err=True,
        )
    return argv


def listen_address(
    host: str, host_given: bool, port: int, port_given: bool, http_socket: str | None
) -> tuple[str, int, str]:
    """Where ``serve`` listens, and what said so.

    SIMPLEFEED_HTTP_SOCKET wins when it is set, because an option's default must not override
    an explicit setting. An option given that says otherwise than the variable is a usage error.
    """
    if http_socket is None:
        return host, port, f"serve --host {host}"
    env_host, env_port = socket_address(http_socket)
    for option, value, given, setting in (
        ("--host", host, host_given, env_host),
        ("--port", port, port_given, env_port),
    ):
        if given and value != setting:
            raise click.UsageError(
                f"{option} {value} and SIMPLEFEED_HTTP_SOCKET={http_socket} disagree:"
                f" give one of them"
            )
    return env_host, env_port, f"SIMPLEFEED_HTTP_SOCKET={http_socket}"


def _listen_problem(host: str, port: int) -> str | None:
    """Why uWSGI could not listen on ``host:port``, or None.

    It is asked before uWSGI starts, because uWSGI says "Address already in use" only after
    this command said it was serving. It binds as uWSGI binds (SO_REUSEADDR), so a port whose
    last connections are still closing is not taken for one in use.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        return f"cannot listen on {host}:{port}: {host!r} is not an address here ({exc})"
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            taken = " (another server runs there?)" if exc.errno == errno.EADDRINUSE else ""
            return f"cannot listen on {host}:{port}: {exc.strerror}{taken}"
    return None


def _drop_privileges(user: str, metrics_dir: Path) -> list[str]:
    """uWSGI's options to run as ``user`` (with its primary group) once it has bound its port."""
    if os.geteuid() != 0:
        raise click.UsageError("--user needs serve to be started as root")
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise click.BadParameter(f"no user named {user!r}", param_hint="--user") from None
    os.chown(metrics_dir, entry.pw_uid, entry.pw_gid)
    return ["--uid", str(entry.pw_uid), "--gid", str(entry.pw_gid)]
