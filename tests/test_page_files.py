"""Archived pages' files are kept open per process, and shared by the requests that send them.

simplefeed.app.caching.OpenFile does this. Each request reads at its own offsets. The files
stay bounded in number. A file changed on disk is seen within OPEN_FOR_S.

The tests use real files, in process and under uWSGI. In process, falcon's test client reads
the stream. uWSGI's file_wrapper sends the shared descriptor with sendfile.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import time
import types
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

PAGE_SIZE = 5  # As in the `settings` fixture.


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
    assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # What a server that asks the descriptor is told.
    first.close()
    os.fstat(fd)  # Closing a stream leaves the file open.
    del first, second, stream, shared
    with pytest.raises(OSError):  # Closed with the last holder.
        os.fstat(fd)


def test_an_archived_page_is_opened_once_per_process_not_per_request(
    core: Simplefeed, client: falcon.testing.TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archived page is opened once per process, not per request.

    A request for a page already sent makes no open, fstat or close of its own. Each is a
    system call, and each lets another thread take the interpreter.
    """
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
    """A page file changed on disk is seen once it is opened again.

    When the file is removed, the open file still holds the page's bytes. Once OPEN_FOR_S has
    passed, the file is opened again, found missing, and written back from the database. A
    precompressed copy cut short is found so when opened again, and written again.
    """
    post(client, 2 * PAGE_SIZE + 1, "batch")
    path = core.page_path("events", 1)
    expected = path.read_bytes()
    assert client.simulate_get("/pages/1").content == expected
    path.unlink()
    assert client.simulate_get("/pages/1").content == expected  # From the open file.
    assert not path.exists()
    monkeypatch.setattr(caching, "OPEN_FOR_S", 0.0)
    assert client.simulate_get("/pages/1").content == expected
    assert path.read_bytes() == expected  # Written back.
    copy = path.with_name(path.name + ".gz")
    gzip = {"Accept-Encoding": "gzip"}
    assert codings.decode(client.simulate_get("/pages/1", headers=gzip).content, "gzip") == expected
    with copy.open("r+b") as f:
        f.truncate(100)
    served = client.simulate_get("/pages/1", headers=gzip)  # The copy is written again.
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
    """A damaged page file is never served nor copied, and is written again.

    A page file may change on disk without changing its length, as with `sed -i` on a title.
    Served with the page's ETag, the wrong bytes would be cached for a year. Opened again, they
    would be made into the page's br and gzip copies. So the file is known by its inode and
    mtime too. A file read again is checked against the database's bytes, and written again
    from them.
    """
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
        if how.endswith("mtime put back"):  # `touch -r` keeps size, inode and mtime as they were.
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
    assert path.read_bytes() == expected  # Written again from the database.
    for coding in codings.CODINGS:
        assert codings.decode(archive.encoded_path(path, coding).read_bytes(), coding) == expected
    assert "does not hold its page's bytes (the database's)" in caplog.text


def test_a_page_whose_file_cannot_be_written_back_is_served_and_logged_once_a_minute(
    core: Simplefeed,
    client: falcon.testing.TestClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A page whose file cannot be written back is served, and logged once a minute.

    Take a damaged page file in an archive that cannot be written. Every request must not read
    the file, compare it, try to write it and read it again. That would log four lines a
    request, with a traceback. The database's bytes are served, and the file is tried again a
    minute later. The test makes it unwritable with the immutable attribute, because
    permissions bind no root.
    """
    from simplefeed.app import resources

    # The resource's clock, which the test moves on by a minute below.
    later = types.SimpleNamespace(offset=0.0)
    clock = types.SimpleNamespace(
        monotonic=lambda: time.monotonic() + later.offset,
        strftime=time.strftime,
        gmtime=time.gmtime,
    )
    monkeypatch.setattr(resources, "time", clock)
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
        assert caplog.text.count("does not hold its page's bytes") == 2  # Before and after a try.
        assert caplog.text.count("could not write archive file") == 1
    finally:
        subprocess.run(["chattr", "-i", str(path.parent)], check=True)
    later.offset = resources.UNFILED_RETRY_S  # A minute on: the file is tried again.
    assert client.simulate_get("/pages/1").content == expected
    assert path.read_bytes() == expected  # Written back now that it can be.


def test_the_files_kept_open_are_bounded(
    core: Simplefeed, client: falcon.testing.TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(caching, "OPEN_FILES", 4)
    post(client, 8 * PAGE_SIZE + 1, "batch")  # 8 archived pages.
    assert client.simulate_get("/pages/1").status_code == 200  # The database's connections.
    for n in range(2, 9):
        for coding in codings.CODINGS:
            result = client.simulate_get(f"/pages/{n}", headers={"Accept-Encoding": coding})
            assert result.status_code == 200
    assert open_fds(under=core.settings.archive_dir.resolve()) <= 4


def test_concurrent_requests_under_uwsgi_each_get_the_whole_page(tmp_path: Path) -> None:
    """Concurrent requests under uWSGI each get the whole page.

    uWSGI's threads send one shared descriptor with sendfile at once, in every coding.
    """
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
                raw = b"".join(r.iter_raw())  # As sent, not decoded.
                return (n, coding), hashlib.sha256(raw).hexdigest()

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(fetch, range(400)))
        assert all(digest == want[key] for key, digest in results)
        assert not s.problems()
