"""Real servers for the end-to-end tests and the benchmarks.

They are the shipped CLI and uWSGI on a free 127.0.0.1 port, and private PostgreSQL clusters.

The class :class:`UwsgiServer` migrates the database with ``simplefeed db upgrade``, unless it
is migrated already. It runs that in a subprocess, as an operator would. It mints a producer
token. Then it runs ``simplefeed serve``, which execs uWSGI with ``uwsgi.ini``. So the child's
pid is uWSGI's master. It waits for ``GET /healthz`` to answer 200. When stopped, it ends the
master with SIGTERM, and falls back to SIGKILL on its process group. Nothing is mocked.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

#: The checkout under test, where uwsgi.ini and alembic/ live.
PROJECT_ROOT = Path(__file__).resolve().parent.parent

HOST = "127.0.0.1"
#: What uWSGI's master logs when it is told to stop (SIGTERM or SIGINT).
SHUTDOWN_MARK = "SIGINT/SIGTERM received"


def simplefeed_command() -> list[str]:
    """Return the installed ``simplefeed`` console script of the interpreter running the tests."""
    script = Path(sys.executable).with_name("simplefeed")
    if script.exists():
        return [str(script)]
    found = shutil.which("simplefeed")
    if found is None:  # pragma: no cover - the package is installed in the test environment
        raise RuntimeError("the simplefeed console script is not installed")
    return [found]


def free_port() -> int:
    """Return a TCP port that was free on 127.0.0.1 a moment ago.

    The caller retries on a race.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def clean_environ() -> dict[str, str]:
    """Return the test process's environment, so no SIMPLEFEED_* setting leaks into the server."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SIMPLEFEED_")}


def _exited(pid: int) -> bool:
    """Tell whether our child ``pid`` has exited, without reaping it, so its pid stays reserved."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    return info is not None and info.si_pid == pid


def sqlite_backup(database: Path, backup: Path) -> None:
    """Make an online, consistent copy of a SQLite database, as docs/how-to/backup.md makes one.

    It uses the ``sqlite3`` backup API, and closes both connections after.
    """
    source, copy = sqlite3.connect(database), sqlite3.connect(backup)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()


class ServerError(RuntimeError):
    pass


class UwsgiServer:
    """Run ``simplefeed serve`` on a free port, with its own database, archive directory and log.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. The ``stop`` method is
    idempotent, and always leaves no process behind::

        with UwsgiServer(database_url, archive_dir, workdir) as server:
            httpx.get(server.url("/recent"))
    """

    def __init__(
        self,
        database_url: str,
        archive_dir: Path,
        workdir: Path,
        *,
        page_size: int = 100,
        processes: int | None = 2,  # None runs `serve` without --processes, at its default.
        extra_env: Mapping[str, str] | None = None,
        startup_timeout: float = 20.0,
        stop_timeout: float = 10.0,
        ini: Path | None = None,
        base_url_env: bool = True,
    ) -> None:
        self.database_url = database_url
        self.archive_dir = archive_dir.resolve()
        self.workdir = workdir.resolve()
        self.page_size = page_size
        self.processes = processes
        self.extra_env = dict(extra_env or {})
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.ini = ini  # None takes the checkout's uwsgi.ini, as `simplefeed serve` picks it.
        #: False leaves SIMPLEFEED_BASE_URL unset, as an operator who only passes --port does.
        self.base_url_env = base_url_env
        self.log_path = self.workdir / "uwsgi.log"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.token = ""  # A producer token for every feed, minted by start().

    @classmethod
    def scratch(cls, workdir: Path, **options: Any) -> UwsgiServer:
        """Make a server on a SQLite database of its own in ``workdir`` (``simplefeed.sqlite3``).

        Its archive directory and log go there too. ``options`` are as for the constructor.
        """
        return cls(
            f"sqlite:///{workdir / 'simplefeed.sqlite3'}", workdir / "archive", workdir, **options
        )

    # -- configuration -------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def env(self) -> dict[str, str]:
        """Return the environment for every command on this server's database and archive."""
        env = clean_environ()
        # Import the checkout under test, whatever the working directory, and however the
        # package was installed. An editable install made before a package had its __init__.py
        # maps it as a namespace package. That only works from the checkout's own directory.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
        env.update(
            {
                "SIMPLEFEED_DATABASE_URL": self.database_url,
                "SIMPLEFEED_ARCHIVE_DIR": str(self.archive_dir),
                "SIMPLEFEED_PAGE_SIZE": str(self.page_size),
            }
        )
        if self.base_url_env and self.port:  # There is none before the port is chosen.
            env["SIMPLEFEED_BASE_URL"] = self.base_url
        env.update(self.extra_env)
        return env

    def cli(
        self, *args: str, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``simplefeed ARGS`` with this server's environment, and capture output as text."""
        result = subprocess.run(
            [*simplefeed_command(), *args],
            env=self.env(),
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise ServerError(
                f"simplefeed {' '.join(args)} exited {result.returncode}\n"
                f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
            )
        return result

    # -- lifecycle -----------------------------------------------------------------------

    def migrate(self) -> None:
        self.cli("db", "upgrade")

    def create_token(self, *args: str) -> str:
        """Mint a producer token with ``simplefeed token create ARGS``, which prints it."""
        return self.cli("token", "create", *args).stdout.strip()

    def publish(self, events: list[dict[str, Any]]) -> httpx.Response:
        """POST ``events`` to ``/entries`` as a producer does, with this server's token.

        Return the 201 answer. Else raise :class:`ServerError` with what the server said.
        """
        reply = httpx.post(
            self.url("/entries"),
            json=events,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        if reply.status_code != 201:
            raise ServerError(f"publishing answered {reply.status_code}: {reply.text}")
        return reply

    def _prepare(self) -> None:
        """Migrate the database with ``simplefeed db upgrade``, and mint the producer token.

        The migration is skipped when the database is at the newest schema already. Then it is
        a migrated copy of the tests' template. Both steps run in this process when they can.
        Each command is a Python starting and importing the package, about 1 s. The tests start
        dozens of servers. The commands themselves are tested as such in
        tests/test_operators_cli.py.
        """
        from simplefeed.errors import DatabaseNotReady
        from simplefeed.service import Simplefeed
        from simplefeed.settings import Settings
        from simplefeed.store import check_ready

        try:
            check_ready(self.database_url)
        except DatabaseNotReady:
            self.migrate()
        core = Simplefeed(Settings.from_env(self.env()))
        try:
            self.token = core.create_token(label="tests")
        finally:
            core.close()

    def start(self, *, attempts: int = 3, port: int | None = None) -> None:
        """Migrate, then start uWSGI and wait for /healthz.

        It retries if the port was taken. With ``port`` it starts once, on that port. That is
        a restart at the same base URL.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.archive_dir.mkdir(parents=True, exist_ok=True)
        self._prepare()
        for attempt in range(1, attempts + 1 if port is None else 2):
            self.port = port or free_port()
            self._spawn()
            try:
                self._wait_healthy()
                return
            except ServerError:
                log = self.log()
                self.stop()
                if "Address already in use" in log and attempt < attempts:
                    continue
                raise

    def _spawn(self) -> None:
        with self.log_path.open("ab") as log:
            log.write(f"\n=== simplefeed serve on {self.base_url} ===\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [
                    *simplefeed_command(),
                    "serve",
                    "--host",
                    HOST,
                    "--port",
                    str(self.port),
                    *(["--processes", str(self.processes)] if self.processes else []),
                    *(["--ini", str(self.ini)] if self.ini is not None else []),
                ],
                env=self.env(),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own process group, so the SIGKILL fallback reaches the workers too.
                start_new_session=True,
            )

    def _wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        last = "no answer yet"
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if _exited(self.process.pid):
                    raise ServerError(f"uWSGI exited before answering /healthz\n{self.log()}")
                try:
                    response = client.get(self.url("/healthz"))
                except httpx.TransportError as exc:
                    last = repr(exc)
                else:
                    if response.status_code == 200:
                        return
                    last = f"{response.status_code} {response.text}"
                time.sleep(0.1)
        raise ServerError(
            f"/healthz did not answer 200 within {self.startup_timeout} s (last: {last})\n"
            f"{self.log()}"
        )

    _APP_READY = re.compile(r"^WSGI app 0 \(mountpoint=''\) ready in .* pid: (\d+)", re.M)

    def wait_all_workers(self, timeout: float = 30.0) -> set[int]:
        """Wait until every worker has loaded the app, and return their pids.

        The /healthz route answers once one worker has, because uwsgi.ini has lazy-apps. Until
        the others have, that worker takes every request. So a test of what several workers do
        waits here.
        """
        if not self.processes:
            raise ServerError("wait_all_workers needs the server's --processes")
        deadline = time.monotonic() + timeout
        while True:
            this_run = self.log().rpartition("=== simplefeed serve on ")[2]
            pids = {int(pid) for pid in self._APP_READY.findall(this_run)}
            if len(pids) >= self.processes:
                return pids
            if time.monotonic() > deadline:
                raise ServerError(
                    f"{len(pids)} of {self.processes} workers loaded the app within {timeout} s"
                    f"\n{self.log()}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """Send SIGTERM to the master, and wait. SIGKILL the group if need be.

        The master dies on SIGTERM, because uwsgi.ini has die-on-term.
        """
        process = self.process
        if process is None:
            return
        self.process = None
        try:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
                self._wait_exit_unreaped(process.pid, self.stop_timeout)
        finally:
            # The master is a zombie (exited, not reaped) or still running. So its pid cannot have
            # been reused, nor the id of the process group it leads, which is the same. Ending
            # the group reaches only its workers. They could outlive a master that died
            # abnormally.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    @staticmethod
    def _wait_exit_unreaped(pid: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not _exited(pid):
            time.sleep(0.05)

    @property
    def running(self) -> bool:
        return self.process is not None and not _exited(self.process.pid)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no uWSGI log)"

    def problems(self) -> list[str]:
        """List server errors in the log, up to the moment the server was told to stop.

        They are each 5xx request line, a Python traceback, and a worker that died. uWSGI
        respawns such a worker. It died of a signal such as SIGBUS or SIGSEGV, or it exited.
        What follows the stop is shutdown. A worker still importing the app under `lazy-apps`
        on a busy machine is then interrupted with a traceback. That says nothing about any
        request.
        """
        log = self.log().split(SHUTDOWN_MARK, 1)[0]
        # A 501 answers a method the client made up (BREW), so it is no error of the server's.
        found = [line for line in log.splitlines() if re.search(r'"status":(?!501)5\d\d\b', line)]
        if "Traceback" in log:
            found.append("a Python traceback in the uWSGI log")
        found += re.findall(r"(?m)^DAMN ! worker \d+ .*$", log)
        return found

    def __enter__(self) -> UwsgiServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class S3Server:
    """Run moto's S3 API server on a free 127.0.0.1 port, a real S3 endpoint in memory.

    Use it as a context manager. :meth:`environ` gives the standard AWS variables that point a
    client at it, and :meth:`bucket` makes a bucket.
    """

    REGION = "us-east-1"

    def __init__(self, workdir: Path, *, startup_timeout: float = 30.0) -> None:
        self.workdir = workdir
        self.startup_timeout = startup_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "moto.log"

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def environ(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "simplefeed-tests",
            "AWS_SECRET_ACCESS_KEY": "simplefeed-tests",
            "AWS_DEFAULT_REGION": self.REGION,
        }

    def client(self) -> Any:
        """Return a boto3 S3 client of this server."""
        import boto3

        env = self.environ()
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.REGION,
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )

    def bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def public_read(self, bucket: str, prefix: str) -> None:
        """Let anyone read the keys under ``prefix``, as a bucket behind a CDN or nginx is."""
        import json

        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": "*",
                    "Action": "s3:GetObject",
                    "Resource": f"arn:aws:s3:::{bucket}/{prefix}/*",
                }
            ],
        }
        self.client().put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))

    def start(self, port: int | None = None) -> None:
        """Start the server, on ``port`` if given (a restart where clients expect it), else
        on a free port. It starts empty: moto keeps its buckets in memory."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        server = Path(sys.executable).with_name("moto_server")
        self.port = free_port() if port is None else port
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [str(server), "-H", HOST, "-p", str(self.port)],
                env=clean_environ(),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if _exited(self.process.pid):
                    break
                with contextlib.suppress(httpx.TransportError):
                    client.get(self.endpoint + "/")
                    return
                time.sleep(0.1)
        log_text = self.log_path.read_text(errors="replace")
        self.stop()
        raise ServerError(f"moto_server did not answer on {self.endpoint}\n{log_text}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        UwsgiServer._wait_exit_unreaped(process.pid, 10.0)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def __enter__(self) -> S3Server:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def ensure_debian_binary(package: str, find: Callable[[], str | None]) -> str:
    """Return the path ``find`` gives for a Debian package's binary.

    It installs the package when missing, if we are root with apt-get. Else it skips the test,
    saying why.
    """
    found = find()
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"{package} is not installed (apt-get install -y {package}) and cannot be here")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            pytest.skip(f"{package} could not be installed: {' '.join(argv)}: {done.stderr[-500:]}")
    found = find()
    if not found:
        pytest.skip(f"{package} was installed but its binary is not to be found")
    return found


def render_template(template: str, values: dict[str, str]) -> str:
    """Fill only ``${NAME}`` for the given names, as envsubst with a named list does.

    None may be left unfilled.
    """
    for key, value in values.items():
        template = template.replace("${" + key + "}", value)
    left = re.findall(r"\$\{SIMPLEFEED_[A-Z_]+\}", template)
    assert not left, f"placeholders not filled: {left}"
    return template


PG_ENV = "SIMPLEFEED_TEST_POSTGRES_URL"


@contextlib.contextmanager
def scratch_postgres_database(prefix: str) -> Iterator[str]:
    """Yield the URL of a fresh, empty database on ``SIMPLEFEED_TEST_POSTGRES_URL``'s server.

    The database is dropped afterwards. When the variable is unset, the test is skipped, saying
    why.
    """
    admin_url = os.environ.get(PG_ENV)
    if not admin_url:
        pytest.skip(f"PostgreSQL half skipped: set {PG_ENV} to run it")
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own, for tests that crash the database server.

    The shared server must not crash. The cluster is made by ``initdb`` in a temporary
    directory, and runs on a free 127.0.0.1 port. PostgreSQL refuses to run as root. So as root,
    the cluster runs as the ``postgres`` user (``runuser``). Use :func:`private_postgres`, which
    skips the test saying what is missing.
    """

    def __init__(self, bindir: Path, as_user: list[str]) -> None:
        self.bindir = bindir
        self.as_user = as_user
        self.root = Path(tempfile.mkdtemp(prefix="sf-pg-"))
        self.data = self.root / "data"
        self.log_path = self.root / "server.log"
        self.port = 0

    def _run(self, *argv: str, timeout: float = 120.0) -> None:
        done = subprocess.run(
            [*self.as_user, *argv], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise ServerError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")

    def create(self) -> None:
        if self.as_user:
            shutil.chown(self.root, user="postgres", group="postgres")
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
            "--no-sync",
        )  # fmt: skip
        self.port = free_port()

    def start(self, *settings: str) -> None:
        """Start the server, with ``settings`` (``name=value``) on its command line."""
        options = " ".join(
            [
                f"-p {self.port} -c listen_addresses={HOST} -k {self.data}",
                "-c shared_buffers=32MB -c max_connections=60 -c fsync=on",
                *(f"-c {setting}" for setting in settings),
            ]
        )
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log_path), "-w",
            "-t", "60", "-o", options, "start",
        )  # fmt: skip

    def crash(self) -> None:
        """Shut down at once, so every server process quits, writing or flushing nothing.

        What is in shared memory, WAL buffers included, is lost. The next start runs crash
        recovery from the WAL on disk.
        """
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@{HOST}:{self.port}/{database}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except (FileNotFoundError, PermissionError):
            return "(no server log)"

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            self.crash()
        shutil.rmtree(self.root, ignore_errors=True)


def _postgres_bindir() -> Path | None:
    found = shutil.which("pg_config")
    if found:
        done = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
        bindir = Path(done.stdout.strip())
        if (bindir / "initdb").exists():
            return bindir
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return candidates[-1].parent if candidates else None


@contextlib.contextmanager
def private_postgres(*settings: str) -> Iterator[PrivatePostgres]:
    """Yield a started :class:`PrivatePostgres`, and destroy it afterwards.

    ``settings`` are ``name=value``. It skips the test, saying why, without PostgreSQL's server
    binaries. As root, it skips without a ``postgres`` user and ``runuser`` too.
    """
    bindir = _postgres_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL's server binaries (initdb, pg_ctl) are not installed")
    as_user: list[str] = []
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root, and there is no postgres user to run PostgreSQL as")
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("running as root, and runuser is missing to run PostgreSQL as postgres")
        as_user = [runuser, "-u", "postgres", "--"]
    server = PrivatePostgres(bindir, as_user)
    try:
        server.create()
        server.start(*settings)
        yield server
    finally:
        server.destroy()
