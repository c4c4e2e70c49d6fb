"""The WSGI entry point uWSGI loads (``module = simplefeed.runtime.wsgi:application``).

With ``lazy-apps`` each worker imports this after the fork. So each builds its own engine and
pool. Each sets up its own logging and metrics files too. The logs are JSON lines on standard
error, which is uWSGI's log.

A worker refuses to load the app in some cases. With ``need-app``, uWSGI then refuses to run.
The cases are these. uWSGI has no shared area (``sharedarea = 1``, see
:class:`NodeWaitingSlots`). The database answers, but is missing, empty or at an older schema
(:func:`check_ready`). A feed's archived pages link to another base URL than the configured
one (:meth:`Simplefeed.check_base_url`). The default feed does not exist. A feed's archived
pages are at other URLs than the configured default feed gives them
(:meth:`Simplefeed.check_default_feed`). The archive directory is not given by its real path,
which uWSGI's static route needs (:func:`static_archive_problem`).

The command ``simplefeed serve`` checks the same before it starts uWSGI. So uWSGI started
directly (``uwsgi --ini uwsgi.ini``) refuses what the command does. A database that does not
answer is not checked here. The service starts, and answers 503 until the database does. Each
time a page is archived, the base URL and the default feed are checked again.
"""

import logging
import math
import os
import re
import select
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, NoReturn

from simplefeed import logs, metrics
from simplefeed.app import StartResponse, WsgiApp, create_app, requests_only
from simplefeed.errors import ConfigError, DatabaseNotReady, StoreError
from simplefeed.runtime import load_settings
from simplefeed.service import Simplefeed
from simplefeed.service.changes import Bell, NodeBell
from simplefeed.settings import (
    Settings,
    misspelt_variables,
    proxied_base_url_problem,
    socket_address,
    static_archive_problem,
    unset_base_url_problem,
)
from simplefeed.store import check_ready

try:
    import uwsgi  # type: ignore[import-untyped]
except ImportError:  # Another WSGI server.
    uwsgi = None


#: The status with which a uWSGI worker says it could not load its app. uWSGI names it
#: UWSGI_FAILED_APP_CODE. With ``need-app`` (uwsgi.ini) the master then stops the other workers
#: and exits with it. A worker that exits otherwise is respawned.
UWSGI_FAILED_APP = 22


def refuse_to_start(reason: object) -> NoReturn:
    """Log why (CRITICAL), and stop this worker and so uWSGI.

    The exit status is that of a worker that failed to load its app. So there is no traceback,
    no respawn, and no status 0.
    """
    logging.getLogger("simplefeed").critical("not starting: %s", reason)
    if uwsgi is not None:
        logging.shutdown()  # Flush, because os._exit skips what the interpreter's exit does.
        os._exit(UWSGI_FAILED_APP)
    raise SystemExit(1) from None


try:
    settings = load_settings()
except ConfigError as exc:
    logs.configure(Settings.log_level)
    refuse_to_start(exc)
logs.configure(settings.log_level)
for warning in misspelt_variables():
    logging.getLogger("simplefeed").warning(warning)
if settings.http_socket is not None:  # `simplefeed serve` always sets SIMPLEFEED_BASE_URL.
    _problem = unset_base_url_problem(
        f"SIMPLEFEED_HTTP_SOCKET={settings.http_socket}",
        socket_address(settings.http_socket)[0],
        settings.base_url_given,
    )
    if _problem is not None:
        refuse_to_start(_problem)
_problem = proxied_base_url_problem(settings.uwsgi_socket, settings.base_url_given)
if _problem is not None:
    refuse_to_start(_problem)
if uwsgi is not None and not hasattr(uwsgi, "sharedarea_memoryview"):
    refuse_to_start(
        "uWSGI has no shared area, where the node counts its waiting long-polls: add"
        " `sharedarea = 1` to the uWSGI configuration (the shipped uwsgi.ini has it)"
    )

if uwsgi is not None:
    _problem = static_archive_problem(os.environ.get("SIMPLEFEED_ARCHIVE_DIR"), os.getcwd())
    if _problem is not None:
        refuse_to_start(_problem)


def node_bell() -> Bell | None:
    """Return the bell this worker's publishes ring for every worker of this uWSGI.

    The bell is named for the uWSGI master. None means it cannot be had, and the process uses
    its own bell.
    """
    if uwsgi is None:
        return None
    try:
        return NodeBell(str(uwsgi.masterpid()), uwsgi.worker_id(), uwsgi.numproc)
    except OSError as exc:
        logging.getLogger("simplefeed").warning(
            "long-polls of other workers learn of this worker's publishes at their next look"
            " for a commit, not at once: %s",
            exc,
        )
        return None


core = Simplefeed(settings, bell=node_bell())
try:
    check_ready(settings.database_url)
    core.check_base_url()
    core.check_default_feed()
    core.check_archive()
    _page_size = core.default_feed_page_size_warning()
    if _page_size is not None:
        logging.getLogger("simplefeed").warning(_page_size)
except ConfigError as exc:
    refuse_to_start(exc)
except DatabaseNotReady as exc:
    if exc.answered:
        refuse_to_start(exc)
    logging.getLogger("simplefeed").warning(
        "schema, base URL and default feed not checked: %s", exc
    )
except StoreError as exc:
    logging.getLogger("simplefeed").warning(
        "base URL and default feed not checked (database: %s)", exc
    )


class NodeWaitingSlots:
    """Room for long-polls to wait, counted for the whole node.

    The count lives in uWSGI's shared area (``sharedarea = 1`` in uwsgi.ini). Each worker keeps
    the number of its waiting requests at its own place there. The place is zeroed when the
    worker starts, so a worker that died takes its count with it. A long-poll waits only while
    the node's total is under seven eighths of the node's threads.

    Waiting requests hold threads. uWSGI hands connections unevenly, to whichever worker has a
    thread in ``accept``. Say every thread of the node waits. Then a producer's connection
    queues in the kernel until a wait ends, up to 30 s. A bound per worker would decline the
    consumers of the busiest worker long before the node is full
    (docs/explanation/decisions/long-poll.md). Two workers taking the last places at once may
    pass the bound by one each.

    The area is read and written as memory (``sharedarea_memoryview``). The calls
    ``sharedarea_read64`` and ``write64`` are not used. They release the interpreter lock
    around uWSGI's own lock, five times per long-poll. Then the threads of a publish's burst
    queue for this object's lock, while its holder waits to get the interpreter back
    (docs/explanation/decisions/long-poll.md). Each place is 8 aligned bytes, written by one
    worker only. A write is a single store, so a reader never sees half of one.
    """

    def __init__(self) -> None:
        self._places = uwsgi.sharedarea_memoryview(0).cast("q")
        self._mine = uwsgi.worker_id()
        self._workers = slice(1, uwsgi.numproc + 1)
        self.limit = max(1, uwsgi.numproc * uwsgi.cores * 7 // 8)
        self._count = 0
        self._lock = threading.Lock()
        self._places[self._mine] = 0

    def acquire(self) -> bool:
        with self._lock:
            if sum(self._places[self._workers]) >= self.limit:
                return False
            self._count += 1
            self._places[self._mine] = self._count
            return True

    def release(self) -> None:
        with self._lock:
            self._count -= 1
            self._places[self._mine] = self._count

    def waiting(self) -> int:
        return sum(self._places[self._workers])


def asks_to_close(env: dict[str, Any]) -> bool:
    """Tell whether an HTTP/1.1 request carries the ``close`` connection option (RFC 9112 9.6)."""
    options = env.get("HTTP_CONNECTION")
    return (
        options is not None
        and env.get("SERVER_PROTOCOL") == "HTTP/1.1"
        and "close" in (option.strip().lower() for option in options.split(","))
    )


class _ThenClose:
    """A response body, then the end of its connection.

    The connection is shut down both ways once uWSGI has sent the body and closes the response.
    A file body (``wsgi.file_wrapper``) is read here, so uWSGI does not send it with sendfile.
    That happens only for the requests that asked to close.
    """

    def __init__(self, body: Iterable[bytes], fd: int) -> None:
        self.body = body
        self.fd = fd

    def __iter__(self) -> Iterator[bytes]:
        read = getattr(self.body, "read", None)
        if read is None:
            yield from self.body
        else:
            while chunk := read(65536):
                yield chunk
        # uWSGI sends the head with the first chunk. With no chunk, as for a HEAD or a 304, it
        # sends the head after close(). An empty chunk sends it now, before close() shuts the
        # connection down.
        yield b""

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            _shut_down(self.fd)


def _shut_down(fd: int) -> None:
    """End a request's connection both ways.

    uWSGI closes its own descriptor after. The socket object is told the family and type, so
    that it asks the kernel nothing. It gives the descriptor back unclosed. So this takes one
    system call, not six. Each call lets another thread take the interpreter.
    """
    conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0, fd)
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        conn.detach()


def honour_close(app: WsgiApp) -> WsgiApp:
    """Wrap ``app`` so that uWSGI's http11-socket closes a connection that asked for it.

    The http11-socket of uWSGI keeps every HTTP/1.1 connection open after a response, with
    ``Connection: close`` or not. Its source says "Connection: close is not honoured"
    (proto/http.c). The connection stays open until the client closes it or ``socket-timeout``
    passes. Some clients ask to close and read to the end, HTTP/1.0-style, as urllib's
    ``Connection: close`` does. Such a client would wait 4 s for every request, and hold a
    worker's thread as long. RFC 9112 9.6 says a server that receives ``close`` MUST close the
    connection after its response. It SHOULD say ``Connection: close``.
    """

    def application(env: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if not asks_to_close(env):
            return app(env, start_response)

        def closing(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if not any(name.lower() == "connection" for name, _ in headers):
                headers = [*headers, ("Connection", "close")]
            return start_response(status, headers, exc_info)

        return _ThenClose(app(env, closing), uwsgi.connection_fd())

    return application


def say_close(app: WsgiApp) -> WsgiApp:
    """Wrap ``app`` so that each answer says ``Connection: close``, for uWSGI's http-socket.

    The http-socket closes each connection after its response. A client that is not told so
    sends its next request into the closed connection. The ``add-header`` line of uwsgi.ini says
    it for the files uWSGI sends. A request for the app drops add-header lines (uwsgi.ini,
    ``remheader``), so the app says it for its own answers.
    """

    def application(env: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        def closing(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if not any(name.lower() == "connection" for name, _ in headers):
                headers = [*headers, ("Connection", "close")]
            return start_response(status, headers, exc_info)

        return app(env, closing)

    return application


#: The HTTP versions a request may name. They are 1.0 and 1.1 (RFC 9112 2.3), and the 2.0 and
#: 3.0 that nginx passes on a uwsgi socket. Without the check, ``HTTP/9.9`` is answered
#: ``HTTP/9.9 200 OK``.
_HTTP_VERSION = re.compile(r"HTTP/(?:1\.[01]|[23]\.0)\Z")


def refuse_forged_protocol(app: WsgiApp) -> WsgiApp:
    """Wrap ``app`` so that a forged protocol in the request line gets no answer.

    The HTTP parser of uWSGI (http-socket, http11-socket) begins the status line of its
    response with the request line's protocol as it came. Say a request sends ``GET / X``, a
    bare LF, and then ``Set-Cookie: a=b``. It is answered ``X`` LF ``Set-Cookie: a=b 200 OK``.
    So the sender chooses a header for whatever passes the response on. A request whose
    protocol is not one of :data:`_HTTP_VERSION` gets no answer, and its connection is shut
    down. Whatever status the app gave, uWSGI would write that protocol.
    """

    def application(env: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        protocol = env.get("SERVER_PROTOCOL", "")
        if _HTTP_VERSION.match(protocol):
            return app(env, start_response)
        logging.getLogger("simplefeed").warning(
            "a request line whose protocol is not an HTTP version (%r): connection closed"
            " without an answer",
            protocol[:60],
        )
        _shut_down(uwsgi.connection_fd())
        return []

    return application


#: How long a worker looks for its threads' event queues after it loads the app.
EXCLUSIVE_WITHIN_S = 30.0
#: Each worker's turn to set one queue (:func:`_wait_for_turn`). A thread that wakes from its
#: sleep may wait 5 ms for the interpreter, Python's switch interval.
TURN_S = 0.01
#: The queues each worker sets in turns, in each round. The rest follow at once. A connection
#: goes to the first queue in the list whose thread waits, so the head of the list is what
#: matters.
TURNS = 32


def listening_queues(listening: list[int]) -> list[tuple[int, int, bool]]:
    """This worker's (event queue, socket, exclusive) for each queue watching ``listening``.

    The queues are found in /proc, in the order of their descriptors, which is the order of the
    threads. ``exclusive`` says whether the queue watches with EPOLLEXCLUSIVE.
    """
    found = []
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            if os.readlink(f"/proc/self/fd/{name}") != "anon_inode:[eventpoll]":
                continue
            with open(f"/proc/self/fdinfo/{name}") as info:
                watched = [line.split() for line in info if line.startswith("tfd:")]
        except OSError:
            continue  # Closed meanwhile.
        for fields in watched:
            fd, events = int(fields[1]), int(fields[3], 16)
            if fd in listening:
                found.append((int(name), fd, bool(events & select.EPOLLEXCLUSIVE)))
    return found


def _exclusive(queue: int, fd: int) -> int:
    """Watch ``fd`` in the epoll ``queue`` for reading with EPOLLEXCLUSIVE.

    Return 1 if so. Return 0 where the kernel refuses it, and leave the watch as it was.
    """
    epoll = select.epoll.fromfd(os.dup(queue))  # The same queue, closed apart.
    try:
        epoll.unregister(fd)
        try:
            epoll.register(fd, select.EPOLLIN | select.EPOLLEXCLUSIVE)
            return 1
        except OSError:
            epoll.register(fd, select.EPOLLIN)
            return 0
    finally:
        epoll.close()


def _wait_for_turn(worker: int, workers: int) -> None:
    """Sleep until the next turn of ``worker`` (1 to ``workers``).

    The turns are slots of :data:`TURN_S` on the system's monotonic clock, which every process
    reads alike. They go round the workers by id.
    """
    slot = int(time.monotonic() / TURN_S) + 1
    slot += (worker - 1 - slot) % workers
    time.sleep(max(0.0, slot * TURN_S - time.monotonic()))


def _exclusive_when_threads_wait(
    threads: int, worker: int, workers: int, started_on: float
) -> None:
    """Have each new connection wake one waiting thread of the node, going round the workers.

    Each uWSGI thread waits for connections in an epoll queue of its own. On http11-socket
    uWSGI takes no lock around accept. Its "thunder lock" is for the other sockets. So a
    connection would wake every idle thread of every worker, and all but one would find nothing
    to accept. Take 200 threads a worker. Then a client that opens a connection per request
    would get 0.09 of the rate of one that keeps it (docs/benchmarks.md, "Hot paths").
    EPOLLEXCLUSIVE (Linux 4.5) wakes one waiter, as nginx does for its workers. This sets it on
    each thread's queue, as the threads start to wait after the app is loaded.

    A connection wakes the first queue in the socket's list of waiters whose thread waits. A
    queue set goes to the end of that list. If each worker set its queues all at once, the
    first worker would take every connection while one of its 200 threads is idle. One
    interpreter would serve the node: four processes answered no faster than one
    (docs/benchmarks.md, "Hot paths"). So the workers take turns, one queue each
    (:func:`_wait_for_turn`), for their first :data:`TURNS` queues. Workers load the app at
    different times, so they set their queues again in rounds. The rounds begin at the same
    moments in every worker, counted from the master's start (``started_on``, in seconds since
    the epoch). The last is :data:`EXCLUSIVE_WITHIN_S` after it. After it the head of the list
    goes round the workers, and so do new connections. A worker started later puts its queues
    at the end.
    """
    deadline = time.monotonic() + EXCLUSIVE_WITHIN_S
    found = 0
    while found < threads and time.monotonic() < deadline:
        time.sleep(0.05)
        queues = listening_queues(list(uwsgi.sockets))
        for turn, (queue, fd, exclusive) in enumerate(queues):
            if exclusive:
                continue
            if turn < TURNS:
                _wait_for_turn(worker, workers)
            if not _exclusive(queue, fd):
                return  # The kernel refuses EPOLLEXCLUSIVE.
        found = len(queues)
    period = TURNS * workers * TURN_S + 1.0
    while True:
        now = time.time()
        round_at = started_on + math.ceil((now - started_on) / period) * period
        if round_at > started_on + EXCLUSIVE_WITHIN_S:
            return
        queues = listening_queues(list(uwsgi.sockets))  # Before the round: it takes a while.
        time.sleep(max(0.0, round_at - time.time()))
        for turn, (queue, fd, _) in enumerate(queues):
            if turn < TURNS:
                _wait_for_turn(worker, workers)
            _exclusive(queue, fd)


def _set_exclusive(threads: int, worker: int, workers: int, started_on: float) -> None:
    """Run :func:`_exclusive_when_threads_wait`, and log why if it cannot."""
    try:
        _exclusive_when_threads_wait(threads, worker, workers, started_on)
    except OSError as exc:
        logging.getLogger("simplefeed").warning(
            "each new connection wakes every idle thread (no EPOLLEXCLUSIVE): %s", exc
        )


# uWSGI's cores are the requests a worker serves at once, which are its threads.
application = requests_only(
    create_app(
        settings,
        core=core,
        threads=uwsgi.cores if uwsgi is not None else None,
        waits=NodeWaitingSlots() if uwsgi is not None else None,
    )
)
if uwsgi is not None and "http11-socket" in uwsgi.opt:
    application = honour_close(application)
if uwsgi is not None and "http-socket" in uwsgi.opt:
    application = say_close(application)
if uwsgi is not None:
    application = refuse_forged_protocol(application)
    if uwsgi.cores > 1 and hasattr(select, "EPOLLEXCLUSIVE"):
        threading.Thread(
            target=_set_exclusive,
            args=(uwsgi.cores, uwsgi.worker_id(), uwsgi.numproc, uwsgi.started_on),
            name="simplefeed-exclusive-accept",
            daemon=True,
        ).start()
    _pid = os.getpid()

    def _worker_exits() -> None:
        metrics.worker_exited(_pid)
        logging.shutdown()  # Write the access lines still waiting (simplefeed.logs).

    uwsgi.atexit = _worker_exits
