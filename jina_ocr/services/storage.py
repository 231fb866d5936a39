"""Documents and outputs in S3-compatible object storage, named ``s3://bucket/key``.

A conversion spread over a cluster reads its inputs and writes its outputs where every machine can
reach them, which is an object store rather than one machine's disk. The client is boto3 with its
standard configuration (``AWS_ENDPOINT_URL`` for MinIO, Ceph or another S3-compatible server,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, profiles), imported only
here so that a local conversion does not need it.

A "folder" is a key prefix ending in ``/``: :func:`list_documents` lists the documents directly in it,
as :func:`~jina_ocr.runtime.documents.find_documents` lists a local folder. Every failure a user can
cause (no such bucket, access denied, no credentials, a server that cannot be reached) is a
:class:`StorageError` whose one line names the URL. An object is written with one PUT, which S3
makes visible whole or not at all, so an interrupted run leaves no half-written output.
"""

from __future__ import annotations

import functools
import mimetypes
import os
from pathlib import PurePosixPath

from jina_ocr.errors import UserError
from jina_ocr.runtime.documents import DOCUMENT_SUFFIXES, DocumentError

SCHEME = "s3://"
INSTALL_HINT = 'pip install "jina-ocr[ray]"'
_ENVIRONMENT = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
_ABSENT = {"NoSuchKey", "404", "NotFound"}
_DENIED = {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"}


class StorageError(UserError):
    """An object or bucket that cannot be used: ``url`` and ``reason``, in one line."""

    def __init__(self, url: str, reason: str):
        self.url = url
        self.reason = reason
        super().__init__(f"{url}: {reason}")


def is_object_url(text: object) -> bool:
    """Whether ``text`` names an object or a prefix in object storage (``s3://bucket/...``)."""
    return isinstance(text, str) and text.startswith(SCHEME)


def split_url(url: str) -> tuple[str, str]:
    """``(bucket, key)`` of an ``s3://`` URL; the key may be empty (the whole bucket)."""
    if not is_object_url(url):
        raise StorageError(url, "not an s3://bucket/key URL")
    bucket, _, key = url[len(SCHEME) :].partition("/")
    if not bucket:
        raise StorageError(url, "the URL names no bucket")
    return bucket, key


def list_documents(url: str) -> list[str]:
    """The PDFs and images directly under the prefix ``url`` names (by key ending), as sorted URLs."""
    bucket, prefix = split_url(url)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    found = []
    try:
        pages = (
            _client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/")
        )
        for page in pages:
            for entry in page.get("Contents", ()):
                key = entry["Key"]
                if not key.endswith("/") and PurePosixPath(key).suffix.lower() in DOCUMENT_SUFFIXES:
                    found.append(f"{SCHEME}{bucket}/{key}")
    except Exception as error:
        raise _failure(url, error) from None
    return sorted(found)


def read_bytes(url: str) -> bytes:
    """The whole object; an absent one is a :class:`StorageError` too."""
    bucket, key = split_url(url)
    try:
        return _client().get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as error:
        raise _failure(url, error) from None


def read_document(url: str) -> bytes:
    """A document's bytes; an object that cannot be read fails as a document that cannot be opened
    does (:class:`~jina_ocr.runtime.documents.DocumentError`), so that it is reported with the others."""
    try:
        return read_bytes(url)
    except StorageError as error:
        raise DocumentError(url, error.reason) from None


def read_text(url: str) -> str | None:
    """The object as UTF-8 text, or None when there is no such object (the bucket must exist)."""
    bucket, key = split_url(url)
    try:
        body = _client().get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as error:
        if _code(error) in _ABSENT:
            return None
        raise _failure(url, error) from None
    return body.decode("utf-8")


def write_text(url: str, text: str) -> None:
    """Store ``text`` as UTF-8 in one PUT, replacing any object of that name."""
    bucket, key = split_url(url)
    kind = mimetypes.guess_type(key)[0] or "text/plain"
    try:
        _client().put_object(
            Bucket=bucket, Key=key, Body=text.encode("utf-8"), ContentType=f"{kind}; charset=utf-8"
        )
    except Exception as error:
        raise _failure(url, error) from None


def exists(url: str) -> bool:
    """Whether the object is there (the bucket must exist)."""
    return modified(url) is not None


def modified(url: str) -> float | None:
    """When the object was last written (POSIX seconds, by the server's clock), or None when it is not
    there (the bucket must exist). The answer to HEAD has no body to tell an absent object from an
    absent bucket, so an absent object is followed by a look at the bucket."""
    bucket, key = split_url(url)
    client = _client()
    try:
        answer = client.head_object(Bucket=bucket, Key=key)
    except Exception as error:
        if _code(error) not in _ABSENT:
            raise _failure(url, error) from None
    else:
        return answer["LastModified"].timestamp()
    try:
        client.head_bucket(Bucket=bucket)
    except Exception as error:
        if _code(error) in _ABSENT:
            raise StorageError(url, "no such bucket") from None
        raise _failure(url, error) from None
    return None


def _client():
    """An S3 client for the present environment; made once per process and environment, since
    making one reads configuration files and takes tens of milliseconds."""
    return _cached_client(tuple(os.environ.get(name) for name in _ENVIRONMENT))


@functools.lru_cache(maxsize=4)
def _cached_client(environment: tuple):
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise UserError(f"s3:// URLs need boto3: {INSTALL_HINT}") from None
    config = Config(connect_timeout=10, read_timeout=60, retries={"mode": "standard", "max_attempts": 4})
    return boto3.client("s3", config=config)


def _code(error: Exception) -> str | None:
    """The S3 error code of a ``ClientError`` (``NoSuchKey``, ``403``, ...), None for other errors."""
    response = getattr(error, "response", None)
    return str(response.get("Error", {}).get("Code")) if isinstance(response, dict) else None


def _failure(url: str, error: Exception) -> Exception:
    """The one-line error for a failed request about ``url``; errors that are not the store's pass on."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    if isinstance(error, NoCredentialsError):
        return StorageError(url, "no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
    if isinstance(error, ClientError):
        code = _code(error)
        if code == "NoSuchBucket":
            return StorageError(url, "no such bucket")
        if code in _ABSENT:
            return StorageError(url, "no such object")
        if code in _DENIED:
            return StorageError(url, f"access denied ({code})")
        message = error.response.get("Error", {}).get("Message") or code
        return StorageError(url, message)
    if isinstance(error, BotoCoreError):  # cannot connect, timeouts, bad endpoint URL, ...
        return StorageError(url, str(error))
    return error
