"""The archive's two stores behind one interface: a directory, and an S3 API on loopback (moto's
server, started here). The same tests run against both: a page is written once with its
compressed copies, read back, listed and checked.
"""

from __future__ import annotations

import gzip
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from bench.servers import S3Server, free_port
from simplefeed import codings
from simplefeed.archive.directory import DirectoryStore
from simplefeed.archive.s3 import S3Store
from simplefeed.archive.store import (
    ATOM_MEDIA_TYPE,
    CACHE_CONTROL,
    PageStore,
    copy_key,
    feed_pages,
    page_key,
)
from simplefeed.errors import ArchiveUnavailable, ConfigError, PageConflict
from simplefeed.settings import archive_url_parts

BUCKET = "simplefeed-archive"
PAGE = (
    b'<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom">'
    + (b"<entry><id>urn:x:1</id></entry>" * 40)
    + b"</feed>\n"
)
OTHER = PAGE.replace(b"urn:x:1", b"urn:x:2")
FROZEN_US = 1_700_000_000_123_456


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with S3Server(tmp_path_factory.mktemp("moto")) as server:
        server.bucket(BUCKET)
        yield server


def s3_store(s3: S3Server, prefix: str | None = None) -> S3Store:
    prefix = prefix if prefix is not None else f"run-{uuid.uuid4().hex[:8]}"
    return S3Store.from_url(f"s3://{BUCKET}/{prefix}", s3.environ())


@pytest.fixture(params=["directory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> PageStore:
    if request.param == "directory":
        return DirectoryStore(tmp_path / "archive")
    return s3_store(request.getfixturevalue("s3"))


def raw(store: PageStore, key: str) -> bytes | None:
    """The stored bytes of ``key`` as they are (a copy not decoded)."""
    if isinstance(store, DirectoryStore):
        path = store.path(key)
        return path.read_bytes() if path.exists() else None
    assert isinstance(store, S3Store)
    try:
        answer = store.client.get_object(Bucket=BUCKET, Key=store.object_key(key))
    except store.client.exceptions.NoSuchKey:
        return None
    return answer["Body"].read()


def remove(store: PageStore, key: str) -> None:
    if isinstance(store, DirectoryStore):
        store.path(key).unlink()
    else:
        assert isinstance(store, S3Store)
        store.client.delete_object(Bucket=BUCKET, Key=store.object_key(key))


def test_keys_mirror_the_url_paths() -> None:
    assert page_key("events", "events", 7) == "pages/7"
    assert page_key("orders", "events", 7) == "feeds/orders/pages/7"
    assert feed_pages("orders", "events") == "feeds/orders/pages"
    assert copy_key("pages/7", "gzip") == "pages/7.gz"
    assert copy_key("pages/7", "br") == "pages/7.br"


def test_a_page_is_written_with_its_copies_and_read_back(store: PageStore) -> None:
    key = page_key("orders", "events", 3)
    assert store.get(key) is None
    store.put(key, PAGE, FROZEN_US)
    assert store.get(key) == PAGE
    for coding in codings.CODINGS:
        copy = raw(store, copy_key(key, coding))
        assert copy is not None and codings.decode(copy, coding) == PAGE
    assert store.problems(key, PAGE) == []
    assert store.numbers("feeds/orders/pages") == [3]


def test_the_same_bytes_again_are_fine_and_other_bytes_are_refused(store: PageStore) -> None:
    key = "pages/1"
    store.put(key, PAGE, FROZEN_US)
    store.put(key, PAGE, FROZEN_US)
    with pytest.raises(PageConflict) as refused:
        store.put(key, OTHER, FROZEN_US)
    assert store.where(key) in str(refused.value)
    assert "SHA-256" in str(refused.value)
    # Never an overwrite: the first bytes stay, and so do the copies.
    assert store.get(key) == PAGE
    assert store.problems(key, PAGE) == []


def test_a_copy_of_other_bytes_is_refused(store: PageStore) -> None:
    """A copy is checked by what it decodes to, so a copy holding another page is a
    conflict in a bucket (where objects are written whole) and is repaired in a directory."""
    key = "pages/2"
    store.put(key, PAGE, FROZEN_US)
    gz = copy_key(key, "gzip")
    remove(store, gz)
    if isinstance(store, DirectoryStore):
        store.path(gz).write_bytes(gzip.compress(OTHER))
        store.put(key, PAGE, FROZEN_US)
        assert store.problems(key, PAGE) == []
        return
    assert isinstance(store, S3Store)
    store.client.put_object(Bucket=BUCKET, Key=store.object_key(gz), Body=gzip.compress(OTHER))
    with pytest.raises(PageConflict):
        store.put(key, PAGE, FROZEN_US)


def test_a_missing_copy_is_written_again(store: PageStore) -> None:
    key = "pages/4"
    store.put(key, PAGE, FROZEN_US)
    remove(store, copy_key(key, "br"))
    problems = store.problems(key, PAGE)
    assert len(problems) == 1 and "missing" in problems[0], problems
    assert copy_key(key, "br") in problems[0]
    store.put(key, PAGE, FROZEN_US)
    assert store.problems(key, PAGE) == []


def test_problems_name_what_is_missing_or_different(store: PageStore) -> None:
    key = "pages/5"
    problems = store.problems(key, PAGE)
    assert len(problems) == 1 and "missing" in problems[0], problems
    assert problems[0].startswith(store.where(key) + ": ")
    store.put(key, PAGE, FROZEN_US)
    problems = store.problems(key, OTHER)
    assert len(problems) == 3, problems
    assert problems[0].startswith(store.where(key) + ": ") and "SHA-256" in problems[0]
    assert {p.split(": ")[0] for p in problems[1:]} == {
        store.where(copy_key(key, coding)) for coding in codings.CODINGS
    }


def test_numbers_lists_pages_and_copies_only(store: PageStore) -> None:
    for number in (1, 2, 10):
        store.put(f"pages/{number}", PAGE, FROZEN_US)
    remove(store, "pages/10")  # only its copies are left: still listed
    store.put("feeds/orders/pages/7", PAGE, FROZEN_US)
    for junk in ("pages/07", "pages/x", "pages/3.tmp", "pages/.4.abc.tmp", "pages/5/6"):
        if isinstance(store, DirectoryStore):
            store.path(junk).parent.mkdir(parents=True, exist_ok=True)
            store.path(junk).write_bytes(b"junk")
        else:
            assert isinstance(store, S3Store)
            store.client.put_object(Bucket=BUCKET, Key=store.object_key(junk), Body=b"junk")
    assert store.numbers("pages") == [1, 2, 10]
    assert store.numbers("feeds/orders/pages") == [7]
    assert store.numbers("feeds/none/pages") == []


def test_page_files_keep_the_freeze_time_and_are_readable_by_all(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    store.put("pages/1", PAGE, FROZEN_US)
    for key in ("pages/1", "pages/1.gz", "pages/1.br"):
        st = os.stat(store.path(key))
        assert st.st_mtime_ns == FROZEN_US * 1000
        assert stat.S_IMODE(st.st_mode) == 0o644


def test_objects_carry_the_headers_a_cdn_passes_on(s3: S3Server) -> None:
    store = s3_store(s3)
    store.put("pages/1", PAGE, FROZEN_US)
    for key, coding in (("pages/1", None), ("pages/1.gz", "gzip"), ("pages/1.br", "br")):
        head = store.client.head_object(Bucket=BUCKET, Key=store.object_key(key))
        assert head["ContentType"] == ATOM_MEDIA_TYPE
        assert head["CacheControl"] == CACHE_CONTROL
        assert head.get("ContentEncoding") == coding
    # An object written without them is a problem `archive verify` reports.
    store.client.put_object(Bucket=BUCKET, Key=store.object_key("pages/2"), Body=PAGE)
    store.put("pages/2", PAGE, FROZEN_US)  # the same bytes: accepted as they are
    problems = store.problems("pages/2", PAGE)
    assert len(problems) == 1 and "Content-Type" in problems[0] and "Cache-Control" in problems[0]


def test_keys_are_under_the_prefix(s3: S3Server) -> None:
    for prefix, expected in (("a/b", "a/b/feeds/orders/pages/1"), ("", "feeds/orders/pages/1")):
        store = s3_store(s3, prefix)
        store.put("feeds/orders/pages/1", PAGE, FROZEN_US)
        assert store.where("feeds/orders/pages/1") == f"s3://{BUCKET}/{expected}"
        listed = store.client.list_objects_v2(Bucket=BUCKET, Prefix=expected)
        assert sorted(o["Key"] for o in listed["Contents"]) == [
            expected,
            expected + ".br",
            expected + ".gz",
        ]


def test_a_store_that_does_not_answer_is_unavailable(s3: S3Server) -> None:
    gone = {**s3.environ(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    store = S3Store.from_url(f"s3://{BUCKET}/x", gone)
    for call in (lambda: store.put("pages/1", PAGE, FROZEN_US), lambda: store.get("pages/1")):
        with pytest.raises(ArchiveUnavailable) as failed:
            call()
        assert failed.value.where.startswith(f"s3://{BUCKET}/x/pages/1")
        assert "\n" not in str(failed.value)


def test_a_missing_bucket_or_bad_credentials_are_unavailable(s3: S3Server) -> None:
    store = S3Store.from_url("s3://no-such-bucket/x", s3.environ())
    with pytest.raises(ArchiveUnavailable, match="NoSuchBucket"):
        store.put("pages/1", PAGE, FROZEN_US)
    with pytest.raises(ArchiveUnavailable, match="NoSuchBucket"):
        store.numbers("pages")


@pytest.mark.parametrize(
    "url",
    [
        "http://bucket/x",
        "s3:/bucket/x",
        "s3://Bucket/x",
        "s3://ab/x",
        "s3://bucket//x",
        "s3://bucket/a/../b",
        "s3://bucket/a b",
        "s3://bucket/x?y=1",
    ],
)
def test_a_wrong_archive_url_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="SIMPLEFEED_ARCHIVE_URL"):
        archive_url_parts(url)


def test_archive_url_parts() -> None:
    assert archive_url_parts("s3://feeds-archive") == ("feeds-archive", "")
    assert archive_url_parts("s3://feeds-archive/") == ("feeds-archive", "")
    assert archive_url_parts("s3://feeds.example/a/b/") == ("feeds.example", "a/b")


def test_the_client_reads_the_standard_variables(s3: S3Server) -> None:
    """No argument names the endpoint: the AWS variables of the environment do."""
    store = s3_store(s3)
    assert store.client.meta.endpoint_url == s3.endpoint
    assert store.client.meta.region_name == S3Server.REGION
    plain = boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        region_name=S3Server.REGION,
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    store.put("pages/9", PAGE, FROZEN_US)
    assert plain.get_object(Bucket=BUCKET, Key=store.object_key("pages/9"))["Body"].read() == PAGE
