"""The archive in an S3-compatible object store, through its one door (boto3).

``SIMPLEFEED_ARCHIVE_URL=s3://BUCKET/PREFIX`` names the bucket and the key prefix. The standard
AWS settings do the rest. ``AWS_ENDPOINT_URL`` names another S3-compatible store. Then come
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, and boto3's own
chain of profiles and instance roles.

Each object carries the headers a CDN passes on. They are its Content-Type and the immutable
Cache-Control. A copy also carries its Content-Encoding. So the bucket can be a CDN's origin as it
is. A page is written with ``If-None-Match: *``, so the store itself refuses a second write.
When it refuses, the object is read back. The same bytes are fine. Other bytes raise
:class:`PageConflict`. Every other failure of boto3 or the store becomes
:class:`ArchiveUnavailable`, here and nowhere else.

The client is boto3, not obstore. boto3 is the AWS SDK. So it reads the standard variables,
profiles and instance roles exactly as operators expect. Its errors and retries are
documented. Both send conditional puts that moto's server and S3 honour. obstore's one
interface over GCS and Azure would only matter for a store without an S3 API.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from simplefeed import codings
from simplefeed.archive.store import (
    ATOM_MEDIA_TYPE,
    CACHE_CONTROL,
    copy_key,
    other_bytes,
    page_number,
)
from simplefeed.errors import ArchiveUnavailable, PageConflict
from simplefeed.settings import archive_url_parts

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client
    from types_boto3_s3.type_defs import PutObjectRequestTypeDef

__all__ = ["S3Store"]

#: Bounded waits, so a store that does not answer costs seconds, not minutes. The standard retry
#: mode retries throttling and 5xx answers with backoff.
_CONFIG = Config(
    connect_timeout=3,
    read_timeout=10,
    retries={"mode": "standard", "total_max_attempts": 3},
)


class S3Store:
    """Archived pages as objects of ``bucket``, under ``prefix``."""

    def __init__(self, client: S3Client, bucket: str, prefix: str) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    @classmethod
    def from_url(cls, url: str, environ: Mapping[str, str] | None = None) -> S3Store:
        """The store SIMPLEFEED_ARCHIVE_URL names, with the AWS settings of ``environ``.

        ``environ`` is the process's environment by default.
        """
        env = os.environ if environ is None else environ
        bucket, prefix = archive_url_parts(url)
        session = boto3.session.Session(
            aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
            aws_session_token=env.get("AWS_SESSION_TOKEN"),
            region_name=env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION"),
        )
        with _door(url):
            client = session.client("s3", endpoint_url=env.get("AWS_ENDPOINT_URL"), config=_CONFIG)
        return cls(client, bucket, prefix)

    def object_key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def where(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.object_key(key)}"

    def put(self, key: str, body: bytes, frozen_us: int) -> None:
        self._put_once(key, body, None, body)
        for coding in codings.CODINGS:
            self._put_once(copy_key(key, coding), codings.encode(body, coding), coding, body)

    def _put_once(self, key: str, data: bytes, coding: str | None, body: bytes) -> None:
        """Write ``data`` at ``key`` unless an object is there.

        An object already there must hold the page ``body``. A copy is compared decoded,
        because another compressor may give other bytes.
        """
        request: PutObjectRequestTypeDef = {
            "Bucket": self.bucket,
            "Key": self.object_key(key),
            "Body": data,
            "IfNoneMatch": "*",
            "ContentType": ATOM_MEDIA_TYPE,
            "CacheControl": CACHE_CONTROL,
        }
        if coding is not None:
            request["ContentEncoding"] = coding
        with _door(self.where(key)):
            try:
                self.client.put_object(**request)
                return
            except ClientError as exc:
                if _status(exc) != 412:
                    raise
        found = self._get(key)
        if found is None:  # Removed since, so write it again.
            self._put_once(key, data, coding, body)
            return
        problem = _content_problem(self.where(key), found, coding, body)
        if problem is not None:
            raise PageConflict(self.where(key), problem)

    def get(self, key: str) -> bytes | None:
        return self._get(key)

    def _get(self, key: str) -> bytes | None:
        with _door(self.where(key)):
            try:
                answer = self.client.get_object(Bucket=self.bucket, Key=self.object_key(key))
            except ClientError as exc:
                if _status(exc) == 404:
                    return None
                raise
            data: bytes = answer["Body"].read()
            return data

    def numbers(self, pages: str) -> list[int]:
        directory = self.object_key(pages) + "/"
        found: set[int] = set()
        with _door(self.where(pages)):
            listing = self.client.get_paginator("list_objects_v2")
            for part in listing.paginate(Bucket=self.bucket, Prefix=directory, Delimiter="/"):
                for item in part.get("Contents", []):
                    number = page_number(item["Key"].removeprefix(directory))
                    if number is not None:
                        found.add(number)
        return sorted(found)

    def problems(self, key: str, body: bytes) -> list[str]:
        page = self._object_problem(key, None, body)
        if page is not None and page.endswith(": missing"):
            return [page]  # Its copies say nothing more.
        found = [] if page is None else [page]
        for coding in codings.CODINGS:
            problem = self._object_problem(copy_key(key, coding), coding, body)
            if problem is not None:
                found.append(problem)
        return found

    def _object_problem(self, key: str, coding: str | None, body: bytes) -> str | None:
        where = self.where(key)
        with _door(where):
            try:
                answer = self.client.get_object(Bucket=self.bucket, Key=self.object_key(key))
            except ClientError as exc:
                if _status(exc) == 404:
                    return f"{where}: missing"
                raise
            data = answer["Body"].read()
        problem = _content_problem(where, data, coding, body)
        if problem is not None:
            return problem
        headers = {
            "Content-Type": (answer.get("ContentType"), ATOM_MEDIA_TYPE),
            "Cache-Control": (answer.get("CacheControl"), CACHE_CONTROL),
            "Content-Encoding": (answer.get("ContentEncoding"), coding),
        }
        wrong = [
            f"{name} {got!r}, not {want!r}" for name, (got, want) in headers.items() if got != want
        ]
        return f"{where}: " + "; ".join(wrong) if wrong else None


def _content_problem(where: str, data: bytes, coding: str | None, body: bytes) -> str | None:
    """Why ``data``, stored at ``where`` in ``coding``, is not the page ``body``, or None."""
    if coding is None:
        return None if data == body else other_bytes(where, data, body)
    try:
        decoded = codings.decode(data, coding)
    except ValueError as exc:
        return f"{where}: not {coding} ({exc})"
    return None if decoded == body else other_bytes(where, decoded, body)


def _status(exc: ClientError) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


@contextlib.contextmanager
def _door(where: str) -> Iterator[None]:
    """Turn boto3's and the store's failures into :class:`ArchiveUnavailable`, in one line."""
    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "?"), error.get("Message", "")
        raise ArchiveUnavailable(where, f"{code} ({_status(exc)}): {message}".strip()) from exc
    except BotoCoreError as exc:
        raise ArchiveUnavailable(where, str(exc)) from exc
