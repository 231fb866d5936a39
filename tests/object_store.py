"""An S3-compatible server (moto) on 127.0.0.1 for the tests of object storage, with the environment
that points boto3 at it, and a fresh bucket."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def s3_bucket(prefix: str = "test") -> Iterator[str]:
    """A new bucket on a server started for the block; the AWS variables point at it meanwhile (set
    before Ray starts, the render workers inherit them)."""
    from moto.server import ThreadedMotoServer

    from jina_ocr.services import storage

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
            patch.setenv("AWS_ACCESS_KEY_ID", "testing")
            patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
            name = f"{prefix}-{uuid.uuid4().hex}"
            storage._client().create_bucket(Bucket=name)
            yield name
    finally:
        server.stop()


def put(url: str, data: bytes) -> None:
    from jina_ocr.services import storage

    bucket, key = storage.split_url(url)
    storage._client().put_object(Bucket=bucket, Key=key, Body=data)
