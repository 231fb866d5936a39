"""``jina_ocr.services.storage`` against an S3-compatible server (moto) on 127.0.0.1: listings, round
trips, absent objects and the one-line errors a user sees."""

from __future__ import annotations

import pytest
from object_store import put, s3_bucket

pytest.importorskip("boto3")
pytest.importorskip("moto.server")

from jina_ocr.errors import UserError  # noqa: E402
from jina_ocr.services import storage  # noqa: E402


@pytest.fixture()
def bucket():
    with s3_bucket() as name:
        yield name


def test_object_urls_are_recognised_and_split():
    assert storage.is_object_url("s3://b/k.pdf")
    assert not storage.is_object_url("/data/s3://b")
    assert not storage.is_object_url("https://example.com/a.pdf")
    assert storage.split_url("s3://b/in/a b.pdf") == ("b", "in/a b.pdf")
    assert storage.split_url("s3://b") == ("b", "")
    with pytest.raises(UserError, match="names no bucket"):
        storage.split_url("s3:///key.pdf")


def test_a_prefix_lists_its_documents_sorted_as_a_folder_would(bucket):
    for key in ("in/b.PDF", "in/a.png", "in/notes.txt", "in/sub/c.pdf", "in/", "inbox/d.pdf", "top.pdf"):
        put(f"s3://{bucket}/{key}", b"x")
    expected = [f"s3://{bucket}/in/a.png", f"s3://{bucket}/in/b.PDF"]
    assert storage.list_documents(f"s3://{bucket}/in/") == expected
    assert storage.list_documents(f"s3://{bucket}/in") == expected  # not in/../inbox/
    assert storage.list_documents(f"s3://{bucket}") == [f"s3://{bucket}/top.pdf"]
    assert storage.list_documents(f"s3://{bucket}/nothing/") == []


def test_a_listing_of_more_than_one_page_of_keys_is_complete(bucket):
    client = storage._client()
    for number in range(1005):  # S3 answers at most 1000 keys a request
        client.put_object(Bucket=bucket, Key=f"many/{number:04d}.pdf", Body=b"")
    listed = storage.list_documents(f"s3://{bucket}/many/")
    assert len(listed) == 1005 and listed[-1] == f"s3://{bucket}/many/1004.pdf"


def test_text_and_bytes_round_trip(bucket):
    url = f"s3://{bucket}/out/report.md"
    assert storage.read_text(url) is None
    assert not storage.exists(url)
    storage.write_text(url, "# Überschrift\n\nα ≤ β\n")
    assert storage.exists(url)
    assert storage.read_text(url) == "# Überschrift\n\nα ≤ β\n"
    assert storage.read_bytes(url) == "# Überschrift\n\nα ≤ β\n".encode()
    storage.write_text(url, "replaced")
    assert storage.read_text(url) == "replaced"
    head = storage._client().head_object(Bucket=bucket, Key="out/report.md")
    assert head["ContentType"] == "text/markdown; charset=utf-8"


def test_an_absent_object_read_as_bytes_names_the_url(bucket):
    with pytest.raises(storage.StorageError) as caught:
        storage.read_bytes(f"s3://{bucket}/gone.pdf")
    assert str(caught.value) == f"s3://{bucket}/gone.pdf: no such object"


@pytest.mark.parametrize("call", ["list_documents", "read_bytes", "read_text", "exists"])
def test_a_missing_bucket_is_one_line_naming_the_url(bucket, call):
    url = "s3://no-such-bucket-here/in/a.pdf"
    with pytest.raises(UserError) as caught:
        getattr(storage, call)(url)
    assert str(caught.value) == f"{url}: no such bucket"


def test_a_write_to_a_missing_bucket_fails_with_the_url(bucket):
    with pytest.raises(UserError, match=r"^s3://no-such-bucket-here/x.md: no such bucket$"):
        storage.write_text("s3://no-such-bucket-here/x.md", "text")


def test_a_server_that_cannot_be_reached_is_one_line(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with pytest.raises(UserError) as caught:
        storage.read_text("s3://bucket/a.md")
    message = str(caught.value)
    assert message.startswith("s3://bucket/a.md: Could not connect") and "\n" not in message
