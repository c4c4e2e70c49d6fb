"""Archived pages' files, kept open per process and shared by the requests that send them
(simplefeed.app.caching.OpenFile): each request reads at its own offsets, the files stay
bounded in number, and a file changed on disk is seen within OPEN_FOR_S.

In process (falcon's test client reads the stream) and under uWSGI (its file_wrapper sends the
shared descriptor with sendfile), with real files.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import falcon.testing
import httpx
import pytest

from simplefeed import archive, codings
from simplefeed.app import caching
from simplefeed.service import Simplefeed
from tests.conftest import open_fds, shipped_with_entries
from tests.test_integrity import post

PAGE_SIZE = 5  # the `settings` fixture's


def test_two_streams_of_one_file_read_at_their_own_offsets(tmp_path: Path) -> None:
    path = tmp_path / "page"
    body = bytes(range(256)) * 40
    path.write_bytes(body)
    fd = os.open(path, os.O_RDONLY)
    shared = caching.OpenFile(fd, len(body), 0.0)
    first, second = caching.PageStream(shared), caching.PageStream(shared)
    got = {id(first): b"", id(second): b""}
    for _ in range(len(body) // 1000 + 1):
        for stream in (first, second):
            got[id(stream)] += stream.read(1000)
    assert got[id(first)] == got[id(second)] == body
    assert first.read() == b""
    assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # what a server asking the descriptor is told
    first.close()
    os.fstat(fd)  # closing a stream leaves the file open
    del first, second, stream, shared
    with pytest.raises(OSError):  # closed with the last holder
        os.fstat(fd)


def test_an_archived_page_is_opened_once_per_process_not_per_request(
    core: Simplefeed, client: falcon.testing.TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The point: a request for a page already sent makes no open, fstat or close of its own
    (each a system call, each letting another thread take the interpreter)."""
    post(client, 2 * PAGE_SIZE + 1, "batch")
    expected = core.page_path("events", 1).read_bytes()
    assert client.simulate_get("/pages/1").content == expected
    calls: list[str] = []
    for module, name in ((os, "open"), (io, "open"), (os, "fstat")):
        real = getattr(module, name)

        def counted(*args: Any, __name: str = name, __real: Any = real, **kwargs: Any) -> Any:
            calls.append(__name)
            return __real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    for _ in range(5):
        assert client.simulate_get("/pages/1").content == expected
        etag = client.simulate_get("/pages/1").headers["ETag"]
        assert client.simulate_get("/pages/1", headers={"If-None-Match": etag}).status_code == 304
        assert client.simulate_head("/pages/1").status_code == 200
    assert calls == []


def test_a_page_file_changed_on_disk_is_seen_once_it_is_opened_again(
    core: Simplefeed, client: falcon.testing.TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removed: the open file still holds the page's bytes; once OPEN_FOR_S has passed the
    file is opened again, found missing, and written back from the database. A precompressed
    copy cut short is found so when opened again, and written again."""
    post(client, 2 * PAGE_SIZE + 1, "batch")
    path = core.page_path("events", 1)
    expected = path.read_bytes()
    assert client.simulate_get("/pages/1").content == expected
    path.unlink()
    assert client.simulate_get("/pages/1").content == expected  # from the open file
    assert not path.exists()
    monkeypatch.setattr(caching, "OPEN_FOR_S", 0.0)
    assert client.simulate_get("/pages/1").content == expected
    assert path.read_bytes() == expected  # written back
    copy = path.with_name(path.name + ".gz")
    gzip = {"Accept-Encoding": "gzip"}
    assert codings.decode(client.simulate_get("/pages/1", headers=gzip).content, "gzip") == expected
    with copy.open("r+b") as f:
        f.truncate(100)
    served = client.simulate_get("/pages/1", headers=gzip)  # the copy is written again
    assert served.status_code == 200 and codings.decode(served.content, "gzip") == expected
    assert codings.decode(copy.read_bytes(), "gzip") == expected


@pytest.mark.parametrize(
    "how", ["replaced", "written in place", "written in place, mtime put back"]
)
def test_a_damaged_page_file_is_never_served_nor_copied_and_is_written_again(
    core: Simplefeed,
    client: falcon.testing.TestClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    how: str,
) -> None:
    """A page file changed on disk without changing its length (`sed -i` on a title) was
    served with the page's ETag (a year of caching for the wrong bytes), and once opened again
    made into the page's br and gzip copies. The file is known by its inode and mtime too, a
    file read again is checked against the database's bytes, and written again from them."""
    post(client, 2 * PAGE_SIZE + 1, "batch")
    path = core.page_path("events", 1)
    expected = path.read_bytes()
    first = client.simulate_get("/pages/1")
    assert first.content == expected
    damaged = expected.replace(b"<title>batch 0</title>", b"<title>batch X</title>")
    assert damaged != expected and len(damaged) == len(expected)
    if how == "replaced":
        replacement = path.with_name("sed-tmp")
        replacement.write_bytes(damaged)
        os.replace(replacement, path)
    else:
        was = path.stat()
        with path.open("r+b") as f:
            f.write(damaged)
        if how.endswith("mtime put back"):  # `touch -r`: size, inode and mtime as they were
            os.utime(path, ns=(was.st_atime_ns, was.st_mtime_ns))
    monkeypatch.setattr(caching, "OPEN_FOR_S", 0.0)
    for coding in (codings.IDENTITY, *codings.CODINGS):
        served = client.simulate_get("/pages/1", headers={"Accept-Encoding": coding})
        assert served.status_code == 200 and served.headers["ETag"].startswith(
            first.headers["ETag"][:-1]
        )
        body = (
            served.content if coding == codings.IDENTITY else codings.decode(served.content, coding)
        )
        assert body == expected, coding
    assert path.read_bytes() == expected  # written again from the database
    for coding in codings.CODINGS:
        assert codings.decode(archive.encoded_path(path, coding).read_bytes(), coding) == expected
    assert "does not hold its page's bytes (the database's)" in caplog.text


def test_a_page_whose_file_cannot_be_written_back_is_served_and_logged_once_a_minute(
    core: Simplefeed,
    client: falcon.testing.TestClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A damaged page file in an archive that cannot be written: every request read the file,
    compared it, tried to write it (a traceback in the log) and read it again, four log lines
    a request. The database's bytes are served, and the file tried again a minute later (made
    unwritable with the immutable attribute: permissions bind no root)."""
    from simplefeed.app import resources

    monkeypatch.setattr(resources, "UNFILED_RETRY_S", 3.0)  # a minute, shortened
    post(client, 2 * PAGE_SIZE + 1, "batch")
    path = core.page_path("events", 1)
    expected = path.read_bytes()
    with path.open("r+b") as f:
        f.write(expected.replace(b"<title>batch 0</title>", b"<title>batch X</title>"))
    chattr = subprocess.run(["chattr", "+i", str(path.parent)], capture_output=True, text=True)
    if chattr.returncode != 0:
        pytest.skip(f"the directory cannot be made immutable here: {chattr.stderr.strip()}")
    try:
        for coding in (codings.IDENTITY, *codings.CODINGS) * 3:
            served = client.simulate_get("/pages/1", headers={"Accept-Encoding": coding})
            assert served.status_code == 200
            body = served.content
            assert (
                body if coding == codings.IDENTITY else codings.decode(body, coding)
            ) == expected
        assert caplog.text.count("does not hold its page's bytes") == 2  # one try: before, after
        assert caplog.text.count("could not write archive file") == 1
    finally:
        subprocess.run(["chattr", "-i", str(path.parent)], check=True)
    time.sleep(3.0)
    assert client.simulate_get("/pages/1").content == expected
    assert path.read_bytes() == expected  # written back now that it can be


def test_the_files_kept_open_are_bounded(
    core: Simplefeed, client: falcon.testing.TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(caching, "OPEN_FILES", 4)
    post(client, 8 * PAGE_SIZE + 1, "batch")  # 8 archived pages
    assert client.simulate_get("/pages/1").status_code == 200  # the database's connections
    for n in range(2, 9):
        for coding in codings.CODINGS:
            result = client.simulate_get(f"/pages/{n}", headers={"Accept-Encoding": coding})
            assert result.status_code == 200
    assert open_fds(under=core.settings.archive_dir.resolve()) <= 4


def test_concurrent_requests_under_uwsgi_each_get_the_whole_page(tmp_path: Path) -> None:
    """uWSGI's threads send one shared descriptor with sendfile at once, in every coding."""
    with shipped_with_entries(tmp_path, processes=2) as s:
        want = {}
        for n in (1, 2):
            path = s.archive_dir / "pages" / str(n)
            for coding in ("identity", *codings.CODINGS):
                suffix = "" if coding == "identity" else codings.SUFFIXES[coding]
                data = path.with_name(path.name + suffix).read_bytes()
                want[(n, coding)] = hashlib.sha256(data).hexdigest()

        def fetch(i: int) -> tuple[tuple[int, str], str]:
            n, coding = list(want)[i % len(want)]
            headers = {"Accept-Encoding": coding}
            with (
                httpx.Client(timeout=30) as client,
                client.stream("GET", s.url(f"/pages/{n}"), headers=headers) as r,
            ):
                assert r.status_code == 200
                assert r.headers.get("Content-Encoding", "identity") == coding
                raw = b"".join(r.iter_raw())  # as sent, not decoded
                return (n, coding), hashlib.sha256(raw).hexdigest()

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(fetch, range(400)))
        assert all(digest == want[key] for key, digest in results)
        assert not s.problems()
