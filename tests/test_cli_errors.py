"""The command line says what is wrong in one line, as an operator meets it.

A database may be missing, not migrated or unreachable. Each gets one line, never a
traceback, and no database is made on the way. ``simplefeed config`` shows the effective
settings with secrets masked.

Everything runs the installed ``simplefeed`` command in a subprocess, in a directory of its own.
"""

from __future__ import annotations

import json
import os
import pty
import re
import socket
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench.servers import PROJECT_ROOT, clean_environ, free_port, simplefeed_command
from simplefeed.client.state import StateFile
from simplefeed.errors import InvalidFeed
from simplefeed.service import Simplefeed
from simplefeed.settings import DEFAULT_HTTP_SOCKET, Settings, misspelt_variables
from simplefeed.store.schema import SCHEMA_REVISION, alembic_config

#: Every command that needs the database, with arguments that would otherwise succeed.
DATABASE_COMMANDS = [
    ["feed", "list"],
    ["feed", "create", "orders"],
    ["token", "list"],
    ["token", "create"],
    ["token", "revoke", "1"],
    ["archive", "rebuild"],
    ["archive", "verify"],
    ["serve", "--port", "1"],
]


def failed_status(args: list[str]) -> int:
    """Return the exit status of a DATABASE_COMMANDS command that could not use the database.

    It is 3 for the archive's checks, whose 1 means they found something. It is 1 for the
    others.
    """
    return 3 if args[0] == "archive" else 1


def run(
    cwd: Path, *args: str, stdin: int | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``simplefeed ARGS`` in ``cwd``, with ``env`` added to a clean environment.

    ``stdin`` is a file descriptor for its standard input. By default it is this process's.
    """
    return _on_checkout(cwd, [*simplefeed_command(), *args], stdin, env)


def _on_checkout(
    cwd: Path, argv: list[str], stdin: int | None, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` on this checkout, in ``cwd``, with ``env`` added to a clean environment.

    The output is captured as text.
    """
    environ = clean_environ()
    environ["PYTHONPATH"] = str(PROJECT_ROOT)
    environ.update(env)
    return subprocess.run(
        argv,
        cwd=cwd,
        env=environ,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_line_error(done: subprocess.CompletedProcess[str], status: int = 1) -> str:
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def python(cwd: Path, program: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -c PROGRAM`` on this checkout, in ``cwd``, with ``env`` added.

    The environment is otherwise clean. The output is captured as text.
    """
    return _on_checkout(cwd, [sys.executable, "-c", program], None, env)


def wsgi_loaded(cwd: Path, **env: str) -> tuple[int, list[dict[str, Any]]]:
    """Import ``simplefeed.runtime.wsgi`` as a uWSGI worker loads it, but outside uWSGI.

    It runs in ``cwd``, with ``env`` added to a clean environment. Return its exit status, and
    the JSON lines it logged on standard error (simplefeed.logs).
    """
    done = python(cwd, "import simplefeed.runtime.wsgi", **env)
    return done.returncode, [json.loads(line) for line in done.stderr.strip().splitlines()]


def wsgi_refusal(cwd: Path, **env: str) -> str:
    """Return the message of the one CRITICAL line that refuses the load of the WSGI module.

    The load of ``simplefeed.runtime.wsgi`` exits with status 1. Under uWSGI, that is a worker
    that could not load its app.
    """
    status, logged = wsgi_loaded(cwd, **env)
    assert status == 1, logged
    (line,) = logged
    assert line["level"] == "CRITICAL", line
    return str(line["message"])


@pytest.mark.parametrize("args", DATABASE_COMMANDS, ids=lambda a: " ".join(a))
def test_missing_default_database_is_one_line_and_creates_nothing(
    tmp_path: Path, args: list[str]
) -> None:
    done = run(tmp_path, *args)
    line = one_line_error(done, failed_status(args))
    expected = tmp_path / "var" / "simplefeed.sqlite3"
    assert "sqlite:///var/simplefeed.sqlite3" in line
    assert str(expected) in line
    assert "simplefeed db upgrade" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # No var/, no archive/.


def test_unmigrated_sqlite_file_is_named_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite3"
    sqlite3.connect(path).close()
    line = one_line_error(
        run(tmp_path, "feed", "list", SIMPLEFEED_DATABASE_URL=f"sqlite:///{path}")
    )
    assert f"sqlite:///{path}" in line
    assert "no Simplefeed tables" in line
    assert "simplefeed db upgrade" in line


def test_db_upgrade_says_which_schema_it_migrated_from(tmp_path: Path) -> None:
    """`db upgrade` says which schema it migrated from, or that it did nothing.

    The upgrade guide (docs/how-to/upgrade.md) relies on telling the two apart.
    """
    from alembic import command

    url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
    command.upgrade(alembic_config(url), "0002")
    done = run(tmp_path, "db", "upgrade", SIMPLEFEED_DATABASE_URL=url)
    assert done.returncode == 0, done.stderr
    assert f"database migrated from schema 0002 to {SCHEMA_REVISION}: {url}" in done.stdout


def test_a_consumers_state_file_is_not_taken_for_the_service_database(tmp_path: Path) -> None:
    """A consumer's state file is not taken for the service's database.

    Otherwise ``feed list`` on a state file says to run ``db upgrade``. That fills the file with
    the service's tables, and every consumer command then refuses it.
    """
    path = tmp_path / "consumer.sqlite3"
    StateFile(path).close()
    url = f"sqlite:///{path}"
    for args in (["feed", "list"], ["db", "upgrade"]):
        line = one_line_error(run(tmp_path, *args, SIMPLEFEED_DATABASE_URL=url))
        assert "is a Simplefeed consumer's state file" in line, line
        assert "give SIMPLEFEED_DATABASE_URL a SQLite file of the service's own" in line
    with sqlite3.connect(path) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert "alembic_version" not in tables and "checkpoints" in tables
    StateFile(path).close()  # Still the consumer's.


def test_a_database_url_naming_a_directory_says_so(tmp_path: Path) -> None:
    """A database URL that names a directory says so.

    It must not say the file "does not exist; run `simplefeed db upgrade`". That command would
    then fail with "unable to open database file".
    """
    (tmp_path / "dir").mkdir()
    url = f"sqlite:///{tmp_path / 'dir'}"
    for args in (["feed", "list"], ["db", "upgrade"]):
        line = one_line_error(run(tmp_path, *args, SIMPLEFEED_DATABASE_URL=url))
        assert "is a directory, not a SQLite file" in line, line


def test_a_relative_database_path_not_found_says_where_it_was_looked_for(tmp_path: Path) -> None:
    """A relative database path not found says where it was looked for.

    From another directory than the service's, such as cron's or a home directory, the default
    relative URL names no file. If the only fix given were `db upgrade`, it would make an empty
    database there. `archive verify` would then pass it. So the message says the path is
    relative to where the command runs.
    """
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for args in (["feed", "list"], ["archive", "verify"]):
        done = run(elsewhere, *args)  # The default SIMPLEFEED_DATABASE_URL, relative.
        line = one_line_error(done, failed_status(args))
        assert f"({elsewhere / 'var' / 'simplefeed.sqlite3'}) does not exist" in line, line
        assert "its path is relative to the directory the command runs in" in line, line
        assert not (elsewhere / "var" / "simplefeed.sqlite3").exists()
    absolute = f"sqlite:///{tmp_path / 'none.sqlite3'}"
    line = one_line_error(run(elsewhere, "feed", "list", SIMPLEFEED_DATABASE_URL=absolute))
    assert line.endswith("does not exist; run `simplefeed db upgrade`"), line


def test_unreachable_postgres_is_one_line_with_the_password_masked(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://operator:hunter2@127.0.0.1:{free_port()}/simplefeed"
    line = one_line_error(run(tmp_path, "token", "list", SIMPLEFEED_DATABASE_URL=url))
    assert "hunter2" not in line
    assert "postgresql+psycopg://operator:***@127.0.0.1" in line
    assert "does not answer" in line


def test_db_upgrade_creates_the_database_then_commands_work(tmp_path: Path) -> None:
    done = run(tmp_path, "db", "upgrade")
    assert done.returncode == 0, done.stderr
    assert f"database created at the newest schema ({SCHEMA_REVISION})" in done.stdout
    again = run(tmp_path, "db", "upgrade")
    assert f"database is at the newest schema ({SCHEMA_REVISION}), nothing migrated" in (
        again.stdout
    )
    assert (tmp_path / "var" / "simplefeed.sqlite3").is_file()
    listed = run(tmp_path, "feed", "list")
    assert listed.returncode == 0, listed.stderr
    assert "events" in listed.stdout


def test_config_shows_effective_settings_with_secrets_masked(tmp_path: Path) -> None:
    done = run(tmp_path, "config", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    # The JSON holds the values alone, as the environment gives them. It has no "(default)"
    # after a value, and numbers are numbers.
    assert shown["SIMPLEFEED_DATABASE_URL"] == "sqlite:///var/simplefeed.sqlite3"
    assert shown["SIMPLEFEED_ARCHIVE_DIR"] == str(tmp_path / "archive")
    assert shown["SIMPLEFEED_BASE_URL"] == "http://localhost:8080"
    assert shown["SIMPLEFEED_METRICS"] == "on"
    assert shown["SIMPLEFEED_PAGE_SIZE"] == 100
    assert not list(tmp_path.iterdir())  # Config looks. It creates nothing.
    text = run(tmp_path, "config").stdout
    database = tmp_path / "var" / "simplefeed.sqlite3"
    assert re.search(
        rf"^SIMPLEFEED_DATABASE_URL +sqlite:///var/simplefeed.sqlite3  \(file {database}\)$",
        text,
        re.MULTILINE,
    ), text
    assert re.search(r"^SIMPLEFEED_BASE_URL +http://localhost:8080  \(default\)$", text, re.M)
    given = run(tmp_path, "config", SIMPLEFEED_BASE_URL="https://feeds.example").stdout
    assert re.search(r"^SIMPLEFEED_BASE_URL +https://feeds.example$", given, re.MULTILINE)

    url = "postgresql+psycopg://operator:hunter2@db.internal:5432/feeds?password=again"
    text = run(tmp_path, "config", SIMPLEFEED_DATABASE_URL=url, SIMPLEFEED_METRICS="off")
    assert text.returncode == 0, text.stderr
    assert "hunter2" not in text.stdout and "again" not in text.stdout
    assert "postgresql+psycopg://operator:***@db.internal:5432/feeds?password=***" in text.stdout
    assert "SIMPLEFEED_METRICS" in text.stdout and "off" in text.stdout


def test_config_shows_uwsgi_ini_s_sockets(tmp_path: Path) -> None:
    """``config`` shows the two variables that uwsgi.ini reads."""
    shown = json.loads(run(tmp_path, "config", "--json").stdout)
    assert shown["SIMPLEFEED_HTTP_SOCKET"] == DEFAULT_HTTP_SOCKET
    assert shown["SIMPLEFEED_UWSGI_SOCKET"] is None
    assert f"set-ph = sf_http={DEFAULT_HTTP_SOCKET}\n" in (PROJECT_ROOT / "uwsgi.ini").read_text()
    text = run(tmp_path, "config").stdout
    assert re.search(rf"^SIMPLEFEED_HTTP_SOCKET +{DEFAULT_HTTP_SOCKET}  \(default;", text, re.M)
    assert re.search(r"^SIMPLEFEED_UWSGI_SOCKET +\(unset", text, re.M), text
    env = {"SIMPLEFEED_HTTP_SOCKET": "127.0.0.1:9", "SIMPLEFEED_UWSGI_SOCKET": "127.0.0.1:10"}
    shown = json.loads(run(tmp_path, "config", "--json", **env).stdout)
    assert shown["SIMPLEFEED_HTTP_SOCKET"] == "127.0.0.1:9"
    assert shown["SIMPLEFEED_UWSGI_SOCKET"] == "127.0.0.1:10"


def test_bad_setting_is_one_line(tmp_path: Path) -> None:
    line = one_line_error(run(tmp_path, "feed", "list", SIMPLEFEED_LOG_LEVEL="chatty"))
    assert "SIMPLEFEED_LOG_LEVEL" in line


@pytest.mark.parametrize(
    ("base_url", "says"),
    [
        ("HTTP://LOCALHOST:18180", "has its scheme in capitals: write http:// or https://"),
        ("https://feeds.example/" + "x" * 1010, "is longer than 1024 characters"),
        # Each of these would be built into every link, as in .../recent/pages/1.
        ("http://localhost:18180/recent", "is one of the service's URLs"),
        ("http://localhost:18180/feeds/x/entries/", "is one of the service's URLs"),
        ("https://feeds.example/sf/pages/3", "is one of the service's URLs"),
    ],
)
def test_a_base_url_in_capitals_or_too_long_is_said(
    tmp_path: Path, base_url: str, says: str
) -> None:
    """A base URL in capitals, or too long, is refused with a message that says so.

    A scheme in capitals gets a message that says so, not "not an absolute http(s) URL".
    Every document's head holds the base URL. The head is bounded, since a page holds at most
    48 MiB.
    """
    line = one_line_error(run(tmp_path, "config", SIMPLEFEED_BASE_URL=base_url))
    assert says in line, line


@pytest.mark.parametrize("max_title_chars", [100_000, 5])
def test_a_feed_title_is_within_the_documents_head_whatever_entries_may_have(
    settings: Settings, max_title_chars: int
) -> None:
    """A feed title is bounded by the document's head, whatever entries may have.

    SIMPLEFEED_MAX_TITLE_CHARS bounds entries' titles, not the operator's feed titles. If it
    bounded both, then at 5, `db upgrade` could not create the default feed. It would say
    "feed title 'events' is longer than 5 characters", and not name the setting.
    """
    limited = replace(settings, limits=replace(settings.limits, max_title_chars=max_title_chars))
    core = Simplefeed(limited)
    try:
        with pytest.raises(InvalidFeed, match="feed title"):
            core.create_feed("long", title="t" * 1025)
        assert core.create_feed("long", title="t" * 1024).title == "t" * 1024
    finally:
        core.close()


def test_a_live_document_is_not_cached_for_longer_than_a_day(tmp_path: Path) -> None:
    """A live document is not cached for longer than a day.

    `SIMPLEFEED_RECENT_MAX_AGE=1000000` has a few zeros too many. Taken as it is, every cache
    keeps /recent for 11 days, and every consumer waits that long to see a new event.
    """
    line = one_line_error(run(tmp_path, "config", SIMPLEFEED_RECENT_MAX_AGE="86401"))
    assert line == "Error: SIMPLEFEED_RECENT_MAX_AGE must be at most 86400, got 86401"
    done = run(tmp_path, "config", "--json", SIMPLEFEED_RECENT_MAX_AGE="86400")
    assert json.loads(done.stdout)["SIMPLEFEED_RECENT_MAX_AGE"] == 86400


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("SIMPLEFEED_PAGESIZE", "SIMPLEFEED_PAGE_SIZE"),
        ("SIMPLEFEED_BASEURL", "SIMPLEFEED_BASE_URL"),
        ("SIMPLEFEED_BASE_URI", "SIMPLEFEED_BASE_URL"),
        ("SIMPLEFEED_DATABASE", "SIMPLEFEED_DATABASE_URL"),
        ("SIMPLEFEED_MAX_TITLE_LENGTH", "SIMPLEFEED_MAX_TITLE_CHARS"),
        ("SIMPLEFEED_MAX_CONTENT_BYTES", "SIMPLEFEED_MAX_CONTENT_CHARS"),
        ("SIMPLEFEED_ARCHIVE_DIRECTORY", "SIMPLEFEED_ARCHIVE_DIR"),
        ("SIMPLEFEED_THREAD", "SIMPLEFEED_THREADS"),
        ("SIMPLEFEED_log_level", "SIMPLEFEED_LOG_LEVEL"),
        # Names that no fuzzy match finds, or finds wrong. ALIASES maps them.
        ("SIMPLEFEED_URL", "SIMPLEFEED_BASE_URL"),
        ("SIMPLEFEED_PUBLIC_URL", "SIMPLEFEED_BASE_URL"),
        ("SIMPLEFEED_DB_URL", "SIMPLEFEED_DATABASE_URL"),
        ("SIMPLEFEED_WORKERS", "SIMPLEFEED_PROCESSES"),
        ("SIMPLEFEED_ARCHIVE_PATH", "SIMPLEFEED_ARCHIVE_DIR"),
        ("SIMPLEFEED_MAX_AGE", "SIMPLEFEED_RECENT_MAX_AGE"),
        ("SIMPLEFEED_FEED", "SIMPLEFEED_DEFAULT_FEED"),
        ("SIMPLEFEED_PORT", "`simplefeed serve --port` or SIMPLEFEED_HTTP_SOCKET"),
        ("SIMPLEFEED_HOST", "`simplefeed serve --host` or SIMPLEFEED_HTTP_SOCKET"),
        # A misspelt prefix before a setting's name.
        ("SIMPLFEED_BASE_URL", "SIMPLEFEED_BASE_URL"),
        ("SIMPLE_FEED_BASE_URL", "SIMPLEFEED_BASE_URL"),
        ("SIMPLEFEEDS_PAGE_SIZE", "SIMPLEFEED_PAGE_SIZE"),
        ("SIMPLEFED_PORT", "`simplefeed serve --port` or SIMPLEFEED_HTTP_SOCKET"),
    ],
)
def test_a_misspelt_setting_is_named_with_the_one_meant(name: str, meant: str) -> None:
    assert misspelt_variables({name: "1", meant: "2", "HOME": "/root"}) == [
        f"{name} is set but is not a setting, so it is ignored: did you mean {meant}?"
    ]


def test_the_projects_other_variables_are_not_taken_for_misspellings() -> None:
    """The project's other variables are not taken for misspellings.

    The tests, benchmarks, deploy recipes and the consumer's handlers have variables of their
    own. They may be in a server's environment, and they draw no warning. Nor do the settings
    themselves.
    """
    others = [
        "SIMPLEFEED_TEST_POSTGRES_URL",
        "SIMPLEFEED_BENCH_POSTGRES_URL",
        "SIMPLEFEED_BENCH_BODY",
        "SIMPLEFEED_ENTRY_ID",
        "SIMPLEFEED_ENTRY_SEQ",
        "SIMPLEFEED_TOKEN",
        "SIMPLEFEED_UPSTREAM",
        "SIMPLEFEED_SERVER_NAME",
        "SIMPLEFEED_BACKEND_HOST",
        "SIMPLEFEED_BACKEND_PORT",
        "SIMPLEFEED_SCREENSHOT_DIR",
        "SIMPLEFEED_REGEN_GOLDEN",
        "SIMPLEFEED_PROCESSES",
        "SIMPLEFEED_HTTP_SOCKET",
        "SIMPLEFEED_PAGE_SIZE",
        "SIMPLEFEED_MAX_ID_BYTES",
        # Not this project's, however much their ends look like a setting.
        "PORT",
        "HOST",
        "DATABASE_URL",
        "BASE_URL",
        "MY_BASE_URL",
        "SIMPLE_URL",
    ]
    assert misspelt_variables(dict.fromkeys(others, "1")) == []


def test_a_variable_named_for_an_option_is_a_warning_like_any_misspelling(tmp_path: Path) -> None:
    """A variable named for an option warns like any misspelling.

    Otherwise `SIMPLEFEED_PORT=9000` is ignored without a word. Unknown names still warn.
    """
    done = run(tmp_path, "config", "--json", SIMPLEFEED_PORT="9000", SIMPLFEED_BASE_URL="http://x")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "simplefeed: warning: SIMPLEFEED_PORT is set but is not a setting, so it is ignored:"
        " did you mean `simplefeed serve --port` or SIMPLEFEED_HTTP_SOCKET?",
        "simplefeed: warning: SIMPLFEED_BASE_URL is set but is not a setting, so it is ignored:"
        " did you mean SIMPLEFEED_BASE_URL?",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "SIMPLEFEED_BASE_URL",
        "SIMPLEFEED_DATABASE_URL",
        "SIMPLEFEED_PAGE_SIZE",
        "SIMPLEFEED_HTTP_SOCKET",
    ],
)
def test_a_setting_set_but_empty_is_refused_naming_it(tmp_path: Path, name: str) -> None:
    """A setting that is set but empty is refused, naming it.

    A deploy recipe may leave `SIMPLEFEED_BASE_URL=` blank. Taken for unset, the service would
    run on the default. Every archived page would then link to http://localhost:8080.
    """
    assert one_line_error(run(tmp_path, "config", **{name: ""})) == (
        f"Error: {name} is set but empty: unset it or give a value"
    )
    assert one_line_error(run(tmp_path, "serve", **{name: " "})) == (
        f"Error: {name} is set but empty: unset it or give a value"
    )


@pytest.mark.parametrize(
    "value",
    ["127.0.0.1\n:8080", "127.0.0.1\t:8080", "bad\x1bhost:8080", "a b:80", "h:\uff18\uff10"],
)
def test_an_http_socket_whose_host_holds_a_control_or_a_space_is_refused(
    tmp_path: Path, value: str
) -> None:
    """An HTTP socket whose host holds a control or a space is refused.

    A space is not the only danger. A newline, a tab or ESC in the host would go through to
    uWSGI's configuration. So would a port of non-ASCII digits.
    """
    assert one_line_error(run(tmp_path, "config", SIMPLEFEED_HTTP_SOCKET=value)) == (
        f"Error: SIMPLEFEED_HTTP_SOCKET must be HOST:PORT (as 127.0.0.1:8080), got {value!r}"
    )


def test_a_uwsgi_socket_with_a_control_or_a_space_is_refused(tmp_path: Path) -> None:
    """A uWSGI socket with a control or a space is refused.

    uWSGI binds SIMPLEFEED_UWSGI_SOCKET="/tmp/s<newline>ock" as /tmp/s, without a word. That is
    where nginx's uwsgi_pass would not look.
    """
    done = run(
        tmp_path, "serve", SIMPLEFEED_UWSGI_SOCKET="/tmp/s\nock", SIMPLEFEED_BASE_URL="http://x"
    )
    assert one_line_error(done) == (
        "Error: SIMPLEFEED_UWSGI_SOCKET must be a socket's path or HOST:PORT, without spaces or"
        " control characters, got '/tmp/s\\nock'"
    )


def test_uwsgi_s_load_refuses_an_empty_setting_in_one_critical_line(tmp_path: Path) -> None:
    assert wsgi_refusal(tmp_path, SIMPLEFEED_BASE_URL="") == (
        "not starting: SIMPLEFEED_BASE_URL is set but empty: unset it or give a value"
    )


@pytest.mark.parametrize(
    ("name", "most"),
    [
        ("SIMPLEFEED_THREADS", 10_000),
        ("SIMPLEFEED_PROCESSES", 256),
        ("SIMPLEFEED_MAX_BODY_BYTES", 64 * 1024 * 1024),
    ],
)
def test_absurd_thread_process_and_body_sizes_are_refused(
    tmp_path: Path, name: str, most: int
) -> None:
    """Absurd thread, process and body sizes are refused.

    With 10^9 threads or processes, uWSGI fails to allocate. With 10^9 body bytes, a publish
    could hold the machine's memory.
    """
    line = one_line_error(run(tmp_path, "config", **{name: "1000000000"}))
    assert line == f"Error: {name} must be at most {most}, got 1000000000"
    done = run(tmp_path, "config", "--json", **{name: str(most)})
    assert json.loads(done.stdout)[name] == most


@pytest.mark.parametrize("value", ["2_00", "\uff12\uff10\uff10", "0x10", "1e3", "20.0"])
def test_a_number_setting_is_decimal_digits_as_uwsgi_reads_it(tmp_path: Path, value: str) -> None:
    """A number setting is decimal digits, as uWSGI reads it.

    Python's int() takes SIMPLEFEED_THREADS=2_00 as 200, and fullwidth digits as 200 too. But
    uWSGI reads the variable itself, and runs 2 threads, or none.
    """
    for name in ("SIMPLEFEED_THREADS", "SIMPLEFEED_PAGE_SIZE"):
        line = one_line_error(run(tmp_path, "config", **{name: value}))
        assert line == f"Error: {name} must be an integer, got {value!r}"
    done = run(tmp_path, "config", "--json", SIMPLEFEED_THREADS=" 16 ")
    assert json.loads(done.stdout)["SIMPLEFEED_THREADS"] == 16


def test_commands_warn_of_a_misspelt_setting_and_run_on_the_default(tmp_path: Path) -> None:
    """Commands warn of a misspelt setting and run on the default.

    Otherwise `SIMPLEFEED_PAGESIZE=10` is ignored without a word, and every new feed gets pages
    of 100.
    """
    done = run(tmp_path, "config", "--json", SIMPLEFEED_PAGESIZE="10")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "simplefeed: warning: SIMPLEFEED_PAGESIZE is set but is not a setting, so it is ignored:"
        " did you mean SIMPLEFEED_PAGE_SIZE?"
    ]
    assert json.loads(done.stdout)["SIMPLEFEED_PAGE_SIZE"] == 100
    assert run(tmp_path, "config", SIMPLEFEED_PAGE_SIZE="10").stderr == ""


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--processes", "0"], "'--processes': 0 is not in the range 1<=x<=256"),
        (["--processes", "257"], "'--processes': 257 is not in the range 1<=x<=256"),
        (["--port", "70000"], "'--port': 70000 is not in the range 1<=x<=65535"),
        (["--port", "0"], "'--port': 0 is not in the range 1<=x<=65535"),
    ],
)
def test_serve_refuses_a_port_or_process_count_uwsgi_cannot_have(
    tmp_path: Path, args: list[str], words: str
) -> None:
    """`serve` refuses a port or process count that uWSGI cannot have.

    Otherwise `serve --port 70000` says "serving on http://127.0.0.1:70000". It then hands
    uWSGI a socket it cannot bind. And `--port 0` gives links to port 0.
    """
    done = run(tmp_path, "serve", *args)
    assert done.returncode == 2 and words in done.stderr, (done.returncode, done.stderr)
    assert "serving on" not in done.stderr


def test_serve_says_the_port_is_taken_before_it_says_it_serves(tmp_path: Path) -> None:
    """`serve` says the port is taken before it says it serves.

    With another server on the port, it must not print "serving on http://127.0.0.1:PORT".
    That line would come before uWSGI's "bind(): Address already in use", and the stop.
    """
    assert run(tmp_path, "db", "upgrade").returncode == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_error(run(tmp_path, "serve", "--port", str(port)))
    assert line == (
        f"Error: cannot listen on 127.0.0.1:{port}: Address already in use"
        " (another server runs there?)"
    )
    line = one_line_error(run(tmp_path, "serve", "--port", str(port), "--host", "192.0.2.1"))
    assert line == f"Error: cannot listen on 192.0.2.1:{port}: Cannot assign requested address"
    line = one_line_error(run(tmp_path, "serve", "--host", "no-such-host.invalid"))
    assert line.startswith("Error: cannot listen on no-such-host.invalid:8080: ")


def test_serve_beyond_loopback_needs_the_base_url(tmp_path: Path) -> None:
    """`serve` beyond loopback needs the base URL.

    Without SIMPLEFEED_BASE_URL, `serve --host 0.0.0.0` would archive pages whose links say
    http://localhost:PORT. Every remote reader would follow them to its own machine, for good.
    """
    assert run(tmp_path, "db", "upgrade").returncode == 0
    port = free_port()
    advice = (
        " listens beyond this machine, but SIMPLEFEED_BASE_URL is unset, so every link (archived"
        " pages' for good) would say http://localhost:...: set the URL readers reach the"
        " service at, e.g. SIMPLEFEED_BASE_URL=https://feeds.example.com"
    )
    done = run(tmp_path, "serve", "--host", "0.0.0.0", "--port", str(port))
    assert one_line_error(done) == "Error: serve --host 0.0.0.0" + advice
    done = run(tmp_path, "serve", SIMPLEFEED_HTTP_SOCKET=f":{port}")
    assert one_line_error(done) == f"Error: SIMPLEFEED_HTTP_SOCKET=:{port}" + advice
    assert "serving on" not in done.stderr


def test_serve_beyond_loopback_with_links_to_loopback_is_warned_of() -> None:
    """`serve` beyond loopback, with links to loopback, is warned of.

    Refused an unset base URL, an operator may set the localhost one that the pages would
    have. The service then listens beyond the machine with links to it. This is a warning, not
    a refusal. Readers that reach a container's published port as localhost follow the links
    rightly.
    """
    from simplefeed.settings import loopback_base_url_warning

    for base in ("http://localhost:8080", "http://127.0.0.1:8080/sf", "http://[::1]:8080"):
        said = loopback_base_url_warning("serve --host 0.0.0.0", "0.0.0.0", base)
        assert said is not None and said.startswith(
            f"serve --host 0.0.0.0 listens beyond this machine, but SIMPLEFEED_BASE_URL={base}"
            " links to its loopback"
        )
    assert loopback_base_url_warning("x", "127.0.0.1", "http://localhost:8080") is None
    assert loopback_base_url_warning("x", "0.0.0.0", "https://feeds.example.com") is None


def test_uwsgi_s_load_refuses_listening_beyond_loopback_without_the_base_url(
    tmp_path: Path,
) -> None:
    assert wsgi_refusal(tmp_path, SIMPLEFEED_HTTP_SOCKET="0.0.0.0:8080").startswith(
        "not starting: SIMPLEFEED_HTTP_SOCKET=0.0.0.0:8080 listens beyond this machine, but"
        " SIMPLEFEED_BASE_URL is unset"
    )


def test_behind_a_proxy_the_base_url_is_needed(tmp_path: Path) -> None:
    """Behind a proxy, the base URL is needed.

    SIMPLEFEED_UWSGI_SOCKET is what nginx's uwsgi_pass reaches. Without SIMPLEFEED_BASE_URL,
    archived pages would link to uWSGI's own http://localhost:PORT. No reader behind the proxy
    can reach that. So `serve` and uWSGI's load refuse it, in one line.
    """
    assert run(tmp_path, "db", "upgrade").returncode == 0
    upstream = f"127.0.0.1:{free_port()}"
    advice = (
        f"SIMPLEFEED_UWSGI_SOCKET={upstream} puts the service behind a proxy, but"
        " SIMPLEFEED_BASE_URL is unset, so every link (archived pages' for good) would say"
        " http://localhost:..., uWSGI's own HTTP port: set the URL readers reach the proxy at,"
        " e.g. SIMPLEFEED_BASE_URL=https://feeds.example.com"
    )
    done = run(tmp_path, "serve", "--port", str(free_port()), SIMPLEFEED_UWSGI_SOCKET=upstream)
    assert one_line_error(done) == "Error: " + advice
    assert wsgi_refusal(tmp_path, SIMPLEFEED_UWSGI_SOCKET=upstream) == "not starting: " + advice


def test_a_value_that_would_forge_a_second_line_of_an_error_is_escaped(tmp_path: Path) -> None:
    """A value that would forge a second line of an error is escaped.

    Every operator command's error is one line, whatever it quotes. A newline in a setting
    must not forge a second `Error:` line. The report's first line is one line too. An archive
    directory that cannot be made must not end `serve` with a traceback.
    """
    assert run(tmp_path, "db", "upgrade").returncode == 0
    forged = "/dev/null/x\nError: forged"
    done = run(tmp_path, "serve", "--port", str(free_port()), SIMPLEFEED_ARCHIVE_DIR=forged)
    assert one_line_error(done) == (
        "Error: cannot make the archive directory /dev/null/x\\nError: forged: Not a directory"
    )
    verified = run(tmp_path, "archive", "verify", SIMPLEFEED_ARCHIVE_DIR=forged)
    assert verified.stdout.splitlines()[0].startswith(
        "checking archive /dev/null/x\\nError: forged against database"
    )
    assert len(verified.stdout.splitlines()) == 1 and len(verified.stderr.splitlines()) == 1


def test_serve_listens_where_simplefeed_http_socket_says_unless_told_otherwise(
    tmp_path: Path,
) -> None:
    """`serve` listens where SIMPLEFEED_HTTP_SOCKET says, unless told otherwise.

    The variable wins over `serve`'s default --port (8080). An option given that says
    otherwise is a usage error.
    """
    assert run(tmp_path, "db", "upgrade").returncode == 0
    with socket.socket() as taken:  # Taken, so that serve stops where it would listen.
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        there = f"127.0.0.1:{port}"
        expected = f"Error: cannot listen on {there}: Address already in use"
        for args in ([], ["--port", str(port)], ["--host", "127.0.0.1"]):
            done = run(tmp_path, "serve", *args, SIMPLEFEED_HTTP_SOCKET=there)
            assert one_line_error(done).startswith(expected), args
    done = run(tmp_path, "serve", "--port", "9000", SIMPLEFEED_HTTP_SOCKET=there)
    assert done.returncode == 2, done.stderr
    assert f"--port 9000 and SIMPLEFEED_HTTP_SOCKET={there} disagree: give one of them" in (
        done.stderr
    )
    done = run(tmp_path, "serve", "--host", "::1", SIMPLEFEED_HTTP_SOCKET=there)
    assert done.returncode == 2 and "--host ::1 and SIMPLEFEED_HTTP_SOCKET" in done.stderr


def test_a_page_size_the_default_feed_does_not_have_is_said_at_start(tmp_path: Path) -> None:
    """A page size that the default feed does not have is said at start.

    A feed's page size is fixed when it is created. So SIMPLEFEED_PAGE_SIZE=50, on a default
    feed made with pages of 10, does nothing. The commands say so.
    """
    assert run(tmp_path, "db", "upgrade", SIMPLEFEED_PAGE_SIZE="10").returncode == 0
    warning = (
        "simplefeed: warning: SIMPLEFEED_PAGE_SIZE=50 does not change feed 'events', whose pages"
        " hold 10 entries (fixed when a feed is created): it sizes only feeds created from now"
        " on; unset it or set it to 10"
    )
    done = run(tmp_path, "db", "upgrade", SIMPLEFEED_PAGE_SIZE="50")
    assert done.returncode == 0 and done.stderr.splitlines() == [warning], done.stderr
    for same in ({"SIMPLEFEED_PAGE_SIZE": "10"}, {}):
        assert run(tmp_path, "db", "upgrade", **same).stderr == ""
    # A refusal stays one line. Once started, serve warns. Then uWSGI stops at an ini it
    # refuses.
    done = run(tmp_path, "serve", "--host", "no-such-host.invalid", SIMPLEFEED_PAGE_SIZE="50")
    assert one_line_error(done).startswith("Error: cannot listen on")
    ini = tmp_path / "refused.ini"
    ini.write_text("[uwsgi]\nstrict = true\nno-such-directive = 1\n")
    port = str(free_port())
    done = run(tmp_path, "serve", "--port", port, "--ini", str(ini), SIMPLEFEED_PAGE_SIZE="50")
    lines = done.stderr.splitlines()
    assert warning in lines, done.stderr
    assert lines.index(warning) < next(i for i, x in enumerate(lines) if "serving on" in x)
    status, logged = wsgi_loaded(tmp_path, SIMPLEFEED_PAGE_SIZE="50")
    assert status == 0, logged
    assert [(x["level"], x["message"]) for x in logged] == [
        ("WARNING", warning.removeprefix("simplefeed: warning: "))
    ]


def test_archive_verify_and_rebuild_name_the_archive_and_database_absolutely(
    tmp_path: Path,
) -> None:
    """`archive verify` and `archive rebuild` name the archive and database absolutely.

    Take a cron job run from $HOME, with the database's URL absolute and SIMPLEFEED_ARCHIVE_DIR
    relative. It checks a second, empty archive. With relative paths in every line, nothing
    would say which directory that was.
    """
    from simplefeed.model import Event
    from simplefeed.service import Simplefeed
    from simplefeed.settings import Settings

    install, home = tmp_path / "install", tmp_path / "home"
    install.mkdir()
    home.mkdir()
    assert run(install, "db", "upgrade", SIMPLEFEED_PAGE_SIZE="2").returncode == 0
    database = install / "var" / "simplefeed.sqlite3"
    url = f"sqlite:///{database}"
    core = Simplefeed(
        Settings.from_env(
            {"SIMPLEFEED_DATABASE_URL": url, "SIMPLEFEED_ARCHIVE_DIR": str(install / "archive")}
        )
    )
    try:
        core.publish("events", [Event(title=f"e{i}") for i in range(5)])  # Archives pages 1-2.
    finally:
        core.close()
    done = run(install, "archive", "verify")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"checking archive {install / 'archive'} against database {database}",
        "checked 2 archived pages, 0 problems",
    ]
    for archive in (home / "archive", None):  # An empty directory, and none at all.
        if archive is not None:
            (archive / "pages").mkdir(parents=True)
        done = run(home, "archive", "verify", SIMPLEFEED_DATABASE_URL=url)
        assert done.returncode == 3, done.stderr  # Not checked, rather than differences.
        assert done.stdout.splitlines() == [
            f"checking archive {home / 'archive'} against database {database}"
        ]
        assert done.stderr.splitlines() == [
            f"Error: {home / 'archive'}: no page files at all, but the database has 2 archived"
            " pages: is this the service's archive? (SIMPLEFEED_ARCHIVE_DIR, relative to the"
            " directory the command runs in; `simplefeed archive rebuild` writes the files)"
        ]
        if archive is not None:
            (archive / "pages").rmdir()
            archive.rmdir()
    (install / "archive" / "pages" / "1").unlink()
    done = run(install, "archive", "rebuild")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"rebuilding archive {install / 'archive'} from database {database}"
    assert f"restored {install / 'archive' / 'pages' / '1'}" in lines, lines


@pytest.mark.parametrize(
    ("args", "stdin", "words"),
    [
        (["--url", "http://[::1", "--title", "t"], "", "'http://[::1' is not a URL"),
        (["--url", "ftp://x", "--title", "t"], "", "is not an absolute http(s) URL"),
        (["--feed", "../x", "--title", "t"], "", "'../x' is not a feed name"),
        ([], "{bad", "standard input is not JSON: Expecting property name"),
        ([], "\udcff", "standard input is not JSON"),
        # Without --title, the event is read from standard input. So these would wait there.
        (["--content", "hi"], "", "--content, --content-type and --id go with --title"),
        (["--id", "urn:x:1"], "", "--content, --content-type and --id go with --title"),
        # A feed's own URL pasted as the base URL would post to .../recent/entries, a 404.
        (
            ["--url", "http://127.0.0.1:9/recent", "--title", "t"],
            "",
            "not the URL the service is served at (name a feed with --feed)",
        ),
        (["--url", "http://127.0.0.1:9/feeds/o/entries", "--title", "t"], "", "service's URLs"),
        (["--url", "http://127.0.0.1:9/pages/3", "--title", "t"], "", "service's URLs"),
    ],
)
def test_publish_says_what_is_wrong_with_its_input_in_one_line(
    tmp_path: Path, args: list[str], stdin: str, words: str
) -> None:
    """`publish` says what is wrong with its input in one line.

    `--url http://[::1` and JSON that does not parse must not end in a traceback. `--feed
    ../x` must not post to another path of the service.
    """
    environ = clean_environ()
    environ.update(PYTHONPATH=str(PROJECT_ROOT), SIMPLEFEED_TOKEN="sft_1_x")
    done = subprocess.run(
        [*simplefeed_command(), "publish", "--url", "http://127.0.0.1:9", *args],
        cwd=tmp_path,
        env=environ,
        input=stdin.encode("utf-8", "surrogateescape"),
        capture_output=True,
        timeout=60,
        check=False,
    )
    stderr = done.stderr.decode()
    assert done.returncode in (1, 2) and "Traceback" not in stderr, stderr
    assert words in stderr, stderr


def test_publish_says_how_to_give_its_token_and_its_event(tmp_path: Path) -> None:
    """`publish` says how to give its token and its event.

    Without a token, "Missing option '--token'" alone does not say how. Without --title, on a
    terminal, it would wait for a JSON event that nobody knew to type.
    """
    publish = ("publish", "--url", "http://127.0.0.1:9")
    done = run(tmp_path, *publish, "--title", "t")
    assert done.returncode == 2, done.stderr
    assert "a producer token is needed: --token or SIMPLEFEED_TOKEN" in done.stderr
    terminal, other_end = pty.openpty()
    try:
        done = run(tmp_path, *publish, "--token", "sft_1_x", stdin=other_end)
    finally:
        os.close(terminal)
        os.close(other_end)
    assert done.returncode == 2, done.stderr
    assert "give --title, or the event as JSON on standard input" in done.stderr


def test_the_consumer_refuses_the_services_database_as_its_state_file(tmp_path: Path) -> None:
    """The consumer refuses the service's database as its state file.

    Otherwise `simplefeed consume --state var/simplefeed.sqlite3` writes the consumer's tables
    into the service's database. It exits 6, and the database stays as it was.
    """
    assert run(tmp_path, "db", "upgrade").returncode == 0
    database = tmp_path / "var" / "simplefeed.sqlite3"
    with sqlite3.connect(database) as db:
        tables = sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master"))
    db.close()
    for args in (
        ["consume", "http://127.0.0.1:9/recent", "--retries", "0"],
        ["consumer", "status"],
    ):
        done = run(tmp_path, *args, "--state", str(database))
        assert done.returncode == 6, (args, done.returncode, done.stderr)
        assert "not a simplefeed state file but another application's SQLite" in done.stderr
    with sqlite3.connect(database) as db:
        assert sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master")) == tables
    db.close()


def test_a_page_size_past_what_feed_create_takes_is_refused_from_the_environment(
    tmp_path: Path,
) -> None:
    """A page size past what `feed create` takes is refused from the environment too.

    `feed create --page-size` stops at 10,000. `db upgrade`, and `feed create` without the
    option, use SIMPLEFEED_PAGE_SIZE. If it took any size, the default feed could have pages
    of a million entries. Each /recent would be rendered whole from all of them.
    """
    line = one_line_error(run(tmp_path, "config", SIMPLEFEED_PAGE_SIZE="10001"))
    assert line == "Error: SIMPLEFEED_PAGE_SIZE must be at most 10000, got 10001"


def test_a_database_a_newer_release_migrated_says_so_in_one_line(tmp_path: Path) -> None:
    """A database that a newer release migrated says so in one line.

    An operator who rolls back meets a schema revision this release does not know. `db
    upgrade` must not end in alembic's traceback ("Can't locate revision"). The other commands
    must not say to run `db upgrade`.
    """
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    assert run(tmp_path, "db", "upgrade", SIMPLEFEED_DATABASE_URL=url).returncode == 0
    with sqlite3.connect(tmp_path / "db.sqlite3") as db:
        db.execute("UPDATE alembic_version SET version_num = '0099_newer'")
    said = (
        f"Error: database {url} is at schema 0099_newer, which this release does not know (its"
        " newest is "
    )
    fix = (
        "run the release that migrated it, or restore the backup made before its `db upgrade`"
        " (docs/how-to/upgrade.md)"
    )
    for args in (["db", "upgrade"], *DATABASE_COMMANDS):
        done = run(tmp_path, *args, SIMPLEFEED_DATABASE_URL=url)
        line = one_line_error(done, failed_status(args))
        assert line.startswith(said) and line.endswith(fix), (args, line)


def test_the_schema_a_database_is_checked_against_is_the_newest_migration() -> None:
    """The schema a database is checked against is the newest migration.

    ``check_ready`` compares a database's revision with ``SCHEMA_REVISION``, not with alembic's
    reading of the migration scripts. So a new migration must move it too.
    """
    from alembic.script import ScriptDirectory

    from simplefeed.store.schema import SCHEMA_REVISION, alembic_config

    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert scripts.get_current_head() == SCHEMA_REVISION


def test_commands_on_a_ready_database_import_neither_alembic_nor_pydantic(tmp_path: Path) -> None:
    """Commands on a ready database import neither alembic nor pydantic.

    A command's start is mostly imports, and the tests and operators start many commands.
    Alembic (0.15-0.35 s) is for migrating. Pydantic (0.1 s) is for reading events at the door.
    Checking a database and listing its feeds need neither (docs/benchmarks.md, "Starting").
    """
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    assert run(tmp_path, "db", "upgrade", SIMPLEFEED_DATABASE_URL=url).returncode == 0
    program = (
        "import sys\n"
        "from simplefeed.runtime.cli import main\n"
        "try:\n"
        "    main(['feed', 'list'])\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "print(sorted(m for m in ('alembic', 'pydantic') if m in sys.modules), file=sys.stderr)\n"
    )
    done = python(tmp_path, program, SIMPLEFEED_DATABASE_URL=url)
    assert done.returncode == 0, done.stderr
    assert "events" in done.stdout
    assert done.stderr.splitlines()[-1] == "[]"
