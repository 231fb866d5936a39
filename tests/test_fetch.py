"""Fetching documents by URL (:mod:`jina_ocr.services.fetch`) against a real HTTP server on 127.0.0.1.

The address policy is tested on its own and through the network backend: a host name is resolved by
the fetch itself, every answer is checked, and the connection goes to a checked address, so a
resolver that answers differently the second time (DNS rebinding) cannot reach a private address.
"""

from __future__ import annotations

import io
import ipaddress
import shutil
import socket
import ssl
import subprocess
import threading
import time

import httpcore
import pytest
from document_server import DocumentServer
from PIL import Image
from test_documents import pdf_with_pages

from jina_ocr.services import fetch as fetching
from jina_ocr.services.fetch import (
    BodyTooLarge,
    FetchPolicy,
    FetchTimeout,
    RefusedURL,
    UpstreamError,
    address_problem,
    fetch,
    redact_url,
    url_stem,
)

REPORT = pdf_with_pages(3)
LOOPBACK = FetchPolicy(allow_private=True, timeout=0.5)
"""What the tests fetch with: the server is on 127.0.0.1, and a slow answer fails fast."""


def png_bytes() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), "white").save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def server():
    files = {
        "report.pdf": (REPORT, "application/pdf"),
        "page.png": (png_bytes(), "image/png"),
        "index.html": (
            b"<!doctype html><html><body>" + b"<p>hello</p>" * 200 + b"</body></html>",
            "text/html",
        ),
        "data.json": (b'{"pages": 3}', "application/json"),
        "empty.pdf": (b"", "application/pdf"),
    }
    with DocumentServer(files) as running:
        yield running


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.1.1", "link-local"),
        ("169.254.169.254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("100.64.0.1", "reserved"),  # shared address space (carrier-grade NAT)
        ("240.0.0.1", "reserved"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fd00::1", "unique-local"),
        ("fc00::1", "unique-local"),
        ("fd00:ec2::254", "metadata"),
        ("fe80::1", "link-local"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback address (IPv4 127.0.0.1 in IPv6 form)"),
        ("::ffff:10.0.0.1", "private address (IPv4 10.0.0.1 in IPv6 form)"),
        ("::ffff:169.254.169.254", "metadata"),
        ("64:ff9b::a9fe:a9fe", "metadata"),  # NAT64 of 169.254.169.254
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
    ],
)
def test_non_public_addresses_are_named(address, problem):
    assert problem in address_problem(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address):
    assert address_problem(ipaddress.ip_address(address)) is None


def test_a_pdf_and_an_image_are_fetched_with_their_query(server):
    assert fetch(server.url("/report.pdf?token=abc&x=1"), LOOPBACK) == REPORT
    assert server.requests[-1] == "/report.pdf?token=abc&x=1"
    assert Image.open(io.BytesIO(fetch(server.url("/page.png"), LOOPBACK))).size == (40, 30)


def test_redirects_are_followed_up_to_the_limit_and_a_loop_is_refused(server):
    assert fetch(server.url("/redirect/5/report.pdf"), LOOPBACK) == REPORT
    with pytest.raises(RefusedURL, match="more than 5 redirects"):
        fetch(server.url("/redirect/6/report.pdf"), LOOPBACK)
    before = len(server.requests)
    with pytest.raises(RefusedURL, match=r"/loop: more than 2 redirects \(a redirect loop\?\)"):
        fetch(server.url("/loop"), FetchPolicy(allow_private=True, max_redirects=2))
    assert len(server.requests) - before == 3  # the first request and two redirects, then it stopped


def test_private_addresses_are_refused_before_connecting(server):
    before = len(server.requests)
    for url in (server.url("/report.pdf"), server.url("/report.pdf", host="localhost")):
        with pytest.raises(RefusedURL, match="loopback address; private networks are fetched only with"):
            fetch(url)
    with pytest.raises(RefusedURL, match=r"::ffff:127.0.0.1 is a loopback address \(IPv4 127.0.0.1"):
        fetch(f"http://[::ffff:127.0.0.1]:{server.port}/report.pdf")
    assert len(server.requests) == before  # no request was made


def test_every_redirect_target_is_checked_again(server, monkeypatch):
    """The first hop is on an address the policy is told to allow; its redirect to another loopback
    address is refused when the connection for it is opened."""
    real = address_problem
    monkeypatch.setattr(fetching, "address_problem", lambda a: None if str(a) == "127.0.0.1" else real(a))
    target = f"http://127.0.0.2:{server.port}/report.pdf"
    with pytest.raises(RefusedURL, match=r"127.0.0.2 is a loopback address"):
        fetch(server.url(f"/to?{target}"))
    assert server.requests[-1].startswith("/to?")
    assert fetch(server.url("/report.pdf")) == REPORT  # the first hop alone passes


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file:///etc/passwd", "only http and https URLs are fetched, not file:"),
        ("ftp://127.0.0.1/report.pdf", "only http and https URLs are fetched, not ftp:"),
        ("gopher://127.0.0.1:70/", "not gopher:"),
        ("http:///report.pdf", "the URL has no host"),
    ],
)
def test_other_schemes_are_refused(url, message):
    with pytest.raises(RefusedURL, match=message) as caught:
        fetch(url, LOOPBACK)
    assert str(caught.value).startswith(f"{url}: ")


def test_a_redirect_to_a_file_url_is_refused(server):
    with pytest.raises(RefusedURL, match="redirected to file:///etc/passwd: only http and https"):
        fetch(server.url("/to?file:///etc/passwd"), LOOPBACK)


def test_an_endless_body_is_cut_off_at_the_limit_while_streaming(server):
    limit = 1024 * 1024
    start = time.monotonic()
    with pytest.raises(BodyTooLarge, match=r"passed the limit of 1,048,576 bytes; the download was stopped"):
        fetch(server.url("/endless"), FetchPolicy(allow_private=True, max_bytes=limit))
    assert server.endless_done.wait(30), "the server is still sending: the fetch did not hang up"
    # what the server got out is the limit plus what the socket buffers held, far from the 512 MiB cap
    assert server.endless_sent < 24 * limit
    assert time.monotonic() - start < 20


def test_a_declared_size_over_the_limit_is_refused_before_reading(server):
    with pytest.raises(BodyTooLarge, match=r"is 1,000,000,000,000 bytes, over the limit of 1,048,576"):
        fetch(server.url("/declared-huge"), FetchPolicy(allow_private=True, max_bytes=1024 * 1024))


def test_a_compressed_body_is_refused_not_decompressed(server):
    with pytest.raises(RefusedURL, match="sent a gzip-encoded body although asked for an unencoded one"):
        fetch(server.url("/gzip"), LOOPBACK)


def test_a_slow_server_is_refused_after_the_read_timeout(server):
    start = time.monotonic()
    with pytest.raises(FetchTimeout, match=r"/slow: no data for 0.5 s \(read timeout\)"):
        fetch(server.url("/slow"), LOOPBACK)
    assert time.monotonic() - start < 3


def test_a_download_past_the_deadline_is_stopped(server):
    with pytest.raises(FetchTimeout, match="the download took longer than 0.2 s"):
        fetch(server.url("/endless"), FetchPolicy(allow_private=True, deadline=0.2, max_bytes=2**40))


@pytest.mark.parametrize(
    ("name", "what"),
    [("index.html", "a body of type text/html"), ("data.json", "a body of type application/json")],
)
def test_bodies_that_are_not_documents_are_refused(server, name, what):
    with pytest.raises(RefusedURL, match=f"the server sent {what}, which is neither a PDF nor a PNG"):
        fetch(server.url(f"/{name}"), LOOPBACK)


def test_empty_bodies_error_statuses_and_closed_ports(server):
    with pytest.raises(RefusedURL, match="empty body"):
        fetch(server.url("/empty.pdf"), LOOPBACK)
    with pytest.raises(UpstreamError, match="the server answered 404"):
        fetch(server.url("/missing.pdf"), LOOPBACK)
    with DocumentServer({}) as gone:
        closed = gone.url("/report.pdf")
    with pytest.raises(UpstreamError, match="cannot connect"):
        fetch(closed, LOOPBACK)


def test_a_name_that_resolves_to_a_private_address_is_refused(monkeypatch):
    """A name that looks public is judged by what it resolves to, every answer of it."""
    answers = {"docs.example.com": ["93.184.215.14", "10.0.0.7"], "cdn.example.com": ["::ffff:127.0.0.1"]}
    monkeypatch.setattr(
        fetching, "resolve", lambda host, port, seconds=None: [ipaddress.ip_address(a) for a in answers[host]]
    )
    with pytest.raises(RefusedURL, match=r"docs.example.com resolves to 10.0.0.7, a private address"):
        fetch("https://docs.example.com/report.pdf")
    with pytest.raises(RefusedURL, match=r"cdn.example.com resolves to ::ffff:7f00:1, a loopback address"):
        fetch("http://cdn.example.com/report.pdf")


def test_dns_rebinding_cannot_reach_a_private_address(server, monkeypatch):
    """The resolver answers a public address first and the loopback server's address after that. The
    connection must go to the address that was checked, never to a second answer."""
    calls = []

    def rebinding(host, port, seconds=None):
        calls.append(host)
        return [ipaddress.ip_address("93.184.215.14" if len(calls) == 1 else "127.0.0.1")]

    connected = []

    def unreachable(self, host, port, *args, **kwargs):
        connected.append(host)
        if host == "93.184.215.14":  # no network in tests: the public address is not reachable
            raise httpcore.ConnectError("network unreachable")
        return real_connect(self, "127.0.0.1", port, *args, **kwargs)

    real_connect = httpcore.SyncBackend.connect_tcp
    monkeypatch.setattr(fetching, "resolve", rebinding)
    monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", unreachable)
    before = len(server.requests)
    with pytest.raises(UpstreamError, match="cannot connect: network unreachable"):
        fetch(f"http://rebind.example:{server.port}/report.pdf")
    assert connected == ["93.184.215.14"]
    assert len(server.requests) == before


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for docs.test only, made with the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", str(folder / "key.pem"), "-out", str(folder / "cert.pem"), "-days", "2"]
        + ["-subj", "/CN=docs.test", "-addext", "subjectAltName=DNS:docs.test"],
        check=True,
        capture_output=True,
    )
    return folder / "cert.pem", folder / "key.pem"


def test_tls_verifies_the_name_of_the_url_while_connecting_to_the_checked_address(certificate, monkeypatch):
    """The socket goes to the address the fetch resolved (127.0.0.1), and the certificate is still
    checked against the host name of the URL: docs.test passes, other.test (same address) does not."""
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.setattr(
        fetching, "resolve", lambda host, port, seconds=None: [ipaddress.ip_address("127.0.0.1")]
    )
    with DocumentServer({"report.pdf": (REPORT, "application/pdf")}, context=context) as tls:
        assert fetch(tls.url("/report.pdf", host="docs.test"), LOOPBACK) == REPORT
        with pytest.raises(UpstreamError, match="certificate verify failed"):
            fetch(tls.url("/report.pdf", host="other.test"), LOOPBACK)


def test_proxy_variables_are_not_honoured(server, monkeypatch):
    """A proxy would connect to addresses the fetch never sees; the fetch goes direct."""
    with DocumentServer({}) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url(""))
        monkeypatch.setenv("http_proxy", proxy.url(""))
        assert fetch(server.url("/report.pdf"), LOOPBACK) == REPORT
        assert proxy.requests == []


@pytest.mark.parametrize(
    ("url", "stem"),
    [
        ("https://example.org/files/report.pdf?token=abc#page=2", "report"),
        ("https://example.org/files/Annual%20Report%202024.pdf", "Annual Report 2024"),
        ("https://example.org/files/a%2Fb.pdf", "a_b"),
        ("https://example.org/files/../", "example.org"),
        ("https://example.org/files/scan/", "scan"),
        ("https://example.org/", "example.org"),
        ("https://example.org", "example.org"),
        ("https://example.org/.pdf", "pdf"),
    ],
)
def test_url_stems(url, stem):
    assert url_stem(url) == stem


def test_policy_values_are_checked():
    for bad in (dict(max_bytes=0), dict(timeout=0), dict(deadline=-1), dict(max_redirects=-1)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            FetchPolicy(**bad)


class TricklingServer:
    """A loopback server that answers each connection with a status line and headers sent one byte
    every ``pause`` seconds, for at most ``seconds`` (so that a test cannot hang on it)."""

    def __init__(self, pause: float = 0.1, seconds: float = 30.0):
        self.pause = pause
        self.seconds = seconds
        self.stop = threading.Event()
        self.client_left: float | None = None  # when a client was seen to close its connection
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> TricklingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.listener.close()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.recv(65536)
                headers = b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"a" * 100_000
                deadline = time.monotonic() + self.seconds
                for byte in headers:
                    if self.stop.is_set() or time.monotonic() > deadline:
                        break
                    try:
                        connection.sendall(bytes([byte]))
                    except OSError:  # the client gave up
                        self.client_left = time.monotonic()
                        break
                    time.sleep(self.pause)


def test_a_server_trickling_its_headers_is_cut_off_at_the_deadline():
    """Each byte comes well within the read timeout; the deadline still ends the whole fetch."""
    with TricklingServer() as server:
        start = time.monotonic()
        with pytest.raises(FetchTimeout, match=r"/trickle: the download took longer than 1.5 s"):
            fetch(
                f"http://127.0.0.1:{server.port}/trickle",
                FetchPolicy(allow_private=True, timeout=1.0, deadline=1.5),
            )
        assert time.monotonic() - start < 4


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("http://user:pass@example.org/a.pdf", "http://***@example.org/a.pdf"),
        ("https://token@example.org:8443/?q=1", "https://***@example.org:8443/?q=1"),
        ("http://user:p@ss@example.org/", "http://***@example.org/"),
        ("see https://a:b@x.org/y and http://c@z.org", "see https://***@x.org/y and http://***@z.org"),
        ("https://medium.com/@someone/post", "https://medium.com/@someone/post"),
        ("https://example.org/report.pdf", "https://example.org/report.pdf"),
        ("scans/report.pdf", "scans/report.pdf"),
    ],
)
def test_redact_url_hides_credentials_only(text, shown):
    assert redact_url(text) == shown


def test_credentials_in_a_url_are_neither_sent_nor_shown(server):
    url = server.url("/missing.pdf").replace("://", "://someone:s3cret@")
    with pytest.raises(UpstreamError) as caught:
        fetch(url, LOOPBACK)
    assert "s3cret" not in str(caught.value) and "s3cret" not in caught.value.url
    assert str(caught.value).startswith(server.url("/missing.pdf").replace("://", "://***@"))
    with pytest.raises(RefusedURL, match=r"redirected to ftp://\*\*\*@example.org/: only http") as refused:
        fetch(server.url("/to?ftp://a:s3cret@example.org/"), LOOPBACK)
    assert "s3cret" not in str(refused.value)


def test_a_resolver_that_never_answers_is_cut_off_at_the_deadline(monkeypatch):
    """The system resolver's own timeouts and retries can take minutes; the fetch's deadline ends it."""
    import socket as sockets

    monkeypatch.setattr(sockets, "getaddrinfo", lambda *args, **kwargs: time.sleep(30))
    start = time.monotonic()
    with pytest.raises(FetchTimeout, match=r"slow-dns\.example/a\.pdf: .*1\.5 s"):
        fetch("http://slow-dns.example/a.pdf", FetchPolicy(timeout=1.0, deadline=1.5))
    assert time.monotonic() - start < 3
