"""The consumer over HTTPS, against a real TLS server on loopback.

The server's certificate is self-signed. The consumer trusts it through ``SSL_CERT_FILE``, as
httpx's default context does. The consumer loads that trust store only when a connection needs
it, because loading it is a noticeable part of each start-up.
"""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from simplefeed.client import Consumer
from simplefeed.client.command import EXIT_HTTP, consume
from simplefeed.client.transport import BoundedTransport
from simplefeed.settings import Settings
from tests.test_client_live import LiveServer

# SQLite only: these tests are about the connection, not the database.
pytestmark = pytest.mark.sqlite_only


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, and its key."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_live(settings: Settings, certificate: tuple[Path, Path]) -> Iterator[LiveServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    server = LiveServer(settings, tls=context)
    try:
        yield server
    finally:
        server.close()


def test_a_feed_over_https_is_read_with_the_trust_store_of_ssl_cert_file(
    tls_live: LiveServer, tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    tls_live.publish(12)
    argv = [tls_live.recent, "--state", str(tmp_path / "s.sqlite3"), "--jsonl"]
    result = CliRunner().invoke(consume, argv, env={"SSL_CERT_FILE": str(certificate[0])})
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == 12


def test_a_certificate_the_trust_store_lacks_is_refused(
    tls_live: LiveServer, tmp_path: Path
) -> None:
    tls_live.publish(3)
    argv = [tls_live.recent, "--state", str(tmp_path / "s.sqlite3"), "--jsonl", "--retries", "0"]
    result = CliRunner().invoke(consume, argv, env={"SSL_CERT_FILE": None, "SSL_CERT_DIR": None})
    assert result.exit_code == EXIT_HTTP
    assert "CERTIFICATE_VERIFY_FAILED" in result.stderr
    assert result.stdout == ""


def test_a_feed_over_http_never_loads_a_trust_store(tmp_path: Path, settings: Settings) -> None:
    server = LiveServer(settings)
    try:
        server.publish(3)
        with Consumer(server.recent, tmp_path / "s.sqlite3") as consumer:
            assert len(list(consumer.entries())) == 3
            transport = consumer.fetcher._transport
            assert isinstance(transport, BoundedTransport)
            assert not transport.tls.is_loaded
    finally:
        server.close()
