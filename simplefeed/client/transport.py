"""The consumer's HTTP transport: the whole response within its time, and reads that stop.

Every socket read waits only for what is left of the response's time. So a server that drips
bytes is cut off at the deadline, whatever the socket timeout. Every wait lasts at most
:data:`STOP_CHECK_S` at a time, so an interrupt ends it soon.
"""

from __future__ import annotations

import ssl
import threading
import time
import typing

import httpcore
import httpx

__all__ = ["STOP_CHECK_S", "BoundedTransport", "Deadlines", "Interruption", "TrustOnUse"]

#: How long a wait of the fetcher goes on at most before it looks whether it was interrupted
#: (:meth:`Fetcher.interrupt`). Such a wait is a socket read, or a pause between attempts or polls.
STOP_CHECK_S = 0.25


class Interruption:
    """Whether the fetcher was asked to stop.

    Every wait reads it at least every :data:`STOP_CHECK_S`. It is a plain attribute, set from
    any thread or from a signal handler. A lock would not do, because a handler that waited for
    one its own thread held would never return.
    """

    requested = False


class Deadlines(threading.local):
    """The deadline of the response being read, per thread (None for none)."""

    at: float | None = None

    def set(self, at: float | None) -> None:
        self.at = at

    def clamp(self, timeout: float | None) -> float | None:
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the response's time is over")
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(
        self,
        inner: httpcore.NetworkStream,
        deadlines: Deadlines,
        interruption: Interruption,
    ) -> None:
        self._inner = inner
        self._deadlines = deadlines
        self._interruption = interruption

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """A read within the timeout and the response's deadline.

        It waits at most :data:`STOP_CHECK_S` at a time, so an interrupt ends it. A socket read
        that timed out has taken nothing, so it is simply made again.
        """
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._interruption.requested:
                raise httpcore.ReadError("the fetcher was interrupted")
            left = None if end is None else end - time.monotonic()
            limit = self._deadlines.clamp(left)
            if limit is not None and limit <= 0:
                raise httpcore.ReadTimeout("timed out")
            step = STOP_CHECK_S if limit is None else min(limit, STOP_CHECK_S)
            try:
                return self._inner.read(max_bytes, step)
            except httpcore.ReadTimeout:
                if limit is not None and limit <= STOP_CHECK_S:
                    raise

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadlines.clamp(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        if isinstance(ssl_context, TrustOnUse):
            ssl_context = ssl_context.loaded()
        inner = self._inner.start_tls(ssl_context, server_hostname, self._deadlines.clamp(timeout))
        return _Stream(inner, self._deadlines, self._interruption)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """httpcore's own socket backend, each stream's reads and writes clamped to the deadline."""

    def __init__(self, deadlines: Deadlines, interruption: Interruption) -> None:
        self._inner = httpcore.SyncBackend()
        self._deadlines = deadlines
        self._interruption = interruption

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(
            host, port, self._deadlines.clamp(timeout), local_address, socket_options
        )
        return _Stream(stream, self._deadlines, self._interruption)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_unix_socket(
            path, self._deadlines.clamp(timeout), socket_options
        )
        return _Stream(stream, self._deadlines, self._interruption)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class TrustOnUse(ssl.SSLContext):
    """Stands in for httpx's default TLS context, which :meth:`loaded` makes on first use.

    Loading the trust store costs 30-50 ms of CPU, a part of every start-up that a feed on
    ``http://`` never needs. The stand-in trusts no certificate, so a handshake through it
    fails. It records the ALPN protocols httpcore sets, for the context that replaces it.
    """

    def __new__(cls) -> TrustOnUse:
        return super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._alpn: list[str] | None = None

    @property
    def is_loaded(self) -> bool:
        return self._context is not None

    def set_alpn_protocols(self, alpn_protocols: typing.Iterable[str]) -> None:
        self._alpn = list(alpn_protocols)
        super().set_alpn_protocols(self._alpn)

    def loaded(self) -> ssl.SSLContext:
        """httpx's default context (``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` apply), made once."""
        with self._lock:
            if self._context is None:
                self._context = httpx.create_ssl_context()
            if self._alpn is not None:
                self._context.set_alpn_protocols(self._alpn)
            return self._context


class BoundedTransport(httpx.HTTPTransport):
    """httpx's transport over a connection pool whose sockets keep to the deadline.

    The pool is httpx's own, except for its network backend.
    """

    def __init__(self, deadlines: Deadlines, interruption: Interruption) -> None:
        # One TLS context, httpx's own default, loaded only when a connection needs it.
        self.tls = TrustOnUse()
        super().__init__(verify=self.tls)
        self._pool = httpcore.ConnectionPool(
            ssl_context=self.tls,
            keepalive_expiry=5.0,
            network_backend=_Backend(deadlines, interruption),
        )
