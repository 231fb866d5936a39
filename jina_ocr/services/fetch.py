"""Documents by URL: one bounded HTTP(S) GET whose connections go only to addresses it has checked.

``jina-ocr convert URL`` and ``jina-ocr serve --allow-urls`` fetch what someone else names. A server
that fetches for its clients can be aimed at its own network (server-side request forgery): the
cloud metadata service at 169.254.169.254, an admin page on 127.0.0.1, a database on 10.0.0.5. So a
fetch here:

- accepts ``http`` and ``https`` URLs only, at the start and at every redirect;
- resolves each host name itself, refuses it if any of its addresses is loopback, private,
  link-local, unique-local, multicast, reserved, unspecified or a metadata address (IPv4-mapped and
  other IPv6 forms of IPv4 addresses included), and then connects to one of those same checked
  addresses. The check sits in the network backend that opens every TCP connection, so a redirect
  is checked like the first request and a second DNS answer cannot swap in another address (DNS
  rebinding). TLS still verifies the certificate for the host name of the URL;
- ignores proxy variables (``HTTP_PROXY``, ``HTTPS_PROXY``): a proxy would connect on our behalf to
  an address we never see. ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` are honoured as by httpx;
- bounds the work: connect and read timeouts, a deadline for the whole fetch (connecting, TLS,
  headers and body, redirects included, enforced on every socket operation, so that a server
  trickling header bytes cannot hold it either, name resolution included), at most
  ``max_redirects`` redirects, and a size limit checked against ``Content-Length`` first and then
  while the body streams in, so that an endless body is cut off at the limit;
- accepts a body only if its first bytes are a PDF or an image (:func:`jina_ocr.runtime.documents.sniff`),
  whatever its ``Content-Type`` says; an HTML page is refused as soon as its first KiB arrives.

The transport is httpcore, the connection layer of httpx: httpx's own transport offers no hook for
the network backend, which is where the address check has to sit. Each refusal is a
:class:`FetchError` naming the URL and the reason in one line. A URL is shown only through
:func:`redact_url`: credentials in it (``user:pass@``) are never sent, and never echoed either.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import ipaddress
import math
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import PurePosixPath

import httpcore
import httpx

from jina_ocr.errors import UserError
from jina_ocr.runtime.checks import positive_int
from jina_ocr.runtime.documents import NOT_A_DOCUMENT, SNIFF_BYTES, sniff

USER_AGENT = f"jina-ocr/{importlib.metadata.version('jina-ocr')}"
"""Read from the installed distribution, not ``jina_ocr.__version__``: the package's own module sits above
the services (it re-exports ``convert`` from them)."""

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""Largest document ``convert`` fetches (the server's limit is its request body limit)."""

DEFAULT_TIMEOUT = 30.0
"""Seconds to wait for a connection, and for each next piece of the answer."""

DEFAULT_DEADLINE = 300.0
"""Seconds a whole fetch may take, so that a server sending a byte now and then cannot hold it."""

MAX_REDIRECTS = 5

SCHEMES = ("http", "https")

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s]*@")
"""The ``user:password@`` of a URL, anywhere in a text: it ends at the last ``@`` before the path."""
_UNSAFE_IN_NAMES = re.compile(r'[\x00-\x1f\x7f/\\:*?"<>|]')
"""Characters a decoded URL segment may hold that a file name should not (separators, controls, and
those Windows refuses)."""

_METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
"""Cloud instance metadata services (AWS, GCP and Azure at the first; AWS IPv6; Alibaba)."""
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class FetchPolicy:
    """The limits of a fetch. ``allow_private`` turns the address check off (for a trusted network)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    timeout: float = DEFAULT_TIMEOUT
    deadline: float = DEFAULT_DEADLINE
    max_redirects: int = MAX_REDIRECTS
    allow_private: bool = False

    def __post_init__(self):
        positive_int("max_bytes", self.max_bytes)
        for field in ("timeout", "deadline"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise UserError(f"{field} must be a positive number of seconds, not {value!r}")
        if isinstance(self.max_redirects, bool) or not isinstance(self.max_redirects, int):
            raise UserError(f"max_redirects must be a whole number, not {self.max_redirects!r}")
        if self.max_redirects < 0:
            raise UserError(f"max_redirects must be 0 or more, not {self.max_redirects}")


class FetchError(UserError):
    """A URL that could not be fetched: ``url`` (credentials redacted) and the ``reason``, in one line."""

    def __init__(self, url: str, reason: str):
        self.url = redact_url(url)
        self.reason = reason
        super().__init__(f"{self.url}: {reason}")


class RefusedURL(FetchError):
    """A URL or an answer the policy refuses: scheme, address, too many redirects, not a document."""


class BodyTooLarge(FetchError):
    """A document over the size limit, declared or found while streaming."""


class FetchTimeout(FetchError):
    """No connection, or no data, within the timeout; or a download past the deadline."""


class UpstreamError(FetchError):
    """The server could not be reached, broke the connection, or answered with an error status."""


class FetchCancelled(FetchError):
    """The fetch was stopped by :meth:`FetchCancel.cancel` (the client it fetched for went away)."""


class FetchCancel:
    """Stops a fetch from another thread: its connections are shut down, which wakes a read that waits
    on them at once, and it opens no new one. A server fetching for a client that hangs up uses it, so
    that the fetch does not go on to its deadline for nobody."""

    def __init__(self):
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.cancelled = False

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def watch(self, sock: socket.socket | None) -> None:
        """Shut ``sock`` down on :meth:`cancel` (at once if that already happened)."""
        with self._lock:
            if sock is not None:
                self._sockets.append(sock)
            cancelled = self.cancelled
        if cancelled:
            self.cancel()


class _AddressRefused(Exception):
    """Raised by the network backend, where the URL is not known; :func:`fetch` names the URL."""


def looks_like_url(text) -> bool:
    """Whether a command-line input or ``source`` is meant as a URL (``scheme://...``), not a path."""
    return isinstance(text, str) and _URL.match(text) is not None


def redact_url(text: str) -> str:
    """``text`` with the credentials of each URL in it replaced: ``http://user:pass@host/`` is shown as
    ``http://***@host/``. Every message, log line and ``source`` that shows a URL goes through this,
    since a URL given with a password is not something to print; other text comes back unchanged."""
    return _USERINFO.sub(r"\1***@", text)


def url_stem(url: str) -> str:
    """The name a URL's document goes by, for its output file: the last segment of the path,
    percent-decoded, without its suffix and query (``.../report.pdf?x=1`` is ``report``); the host
    when the path names nothing (``https://example.org/`` is ``example.org``)."""
    parsed = urllib.parse.urlsplit(url)
    segment = urllib.parse.unquote(parsed.path.rstrip("/").rpartition("/")[2])
    stem = PurePosixPath(_UNSAFE_IN_NAMES.sub("_", segment)).stem.lstrip(". ")
    return stem or parsed.hostname or "document"


def address_problem(address: IPAddress) -> str | None:
    """Why a connection to ``address`` is refused without ``allow_private``; None for a public address."""
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped or (
            ipaddress.IPv4Address(int(address) & 0xFFFFFFFF) if address in _NAT64 else None
        )
        embedded = mapped or address.sixtofour
        if embedded is not None:
            problem = address_problem(embedded)
            if problem is not None:
                return f"{problem} (IPv4 {embedded} in IPv6 form)"
            if mapped is not None:  # a mapped or NAT64 address reaches the public IPv4 address itself
                return None
    if address in _METADATA:
        return "a cloud metadata address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address in _UNIQUE_LOCAL:
        return "a unique-local address"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "a reserved address"
    return None


def resolve(host: str, port: int, seconds: float | None = None) -> list[IPAddress]:
    """Every address ``host`` resolves to, in the resolver's order (an IP literal resolves to itself).

    The system's resolver has timeouts of its own, and retries, that a fetch's deadline knows nothing
    of; it runs in a daemon thread that the fetch stops waiting for after ``seconds``.
    """
    outcome: list = []

    def lookup() -> None:
        try:
            outcome.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (socket.gaierror, UnicodeError) as error:
            outcome.append(error)

    resolver = threading.Thread(target=lookup, name="jina-ocr-resolve", daemon=True)
    resolver.start()
    resolver.join(None if seconds == math.inf else seconds)
    if not outcome:
        raise httpcore.ConnectTimeout(f"resolving {host} took longer than the fetch may take")
    answers = outcome[0]
    if isinstance(answers, Exception):
        raise httpcore.ConnectError(
            f"cannot resolve {host}: {getattr(answers, 'strerror', answers)}"
        ) from None
    addresses: list[IPAddress] = []
    for *_, sockaddr in answers:
        address = ipaddress.ip_address(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


class CheckedBackend(httpcore.NetworkBackend):
    """The network backend of a fetch: resolves, checks every address, connects to a checked one.

    httpcore calls :meth:`connect_tcp` with the host name of the URL and then starts TLS on the
    returned stream with that same name, so certificates are verified for the name while the socket
    goes to the address this class checked. Connecting, and every operation on the connection, ends
    by ``deadline`` (a :func:`time.monotonic` time) at the latest.
    """

    def __init__(
        self, allow_private: bool, deadline: float = float("inf"), cancel: FetchCancel | None = None
    ):
        self.allow_private = allow_private
        self.deadline = deadline
        self.cancel = cancel
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        addresses = resolve(host, port, _until(self.deadline, None))
        if not self.allow_private:
            for address in addresses:
                problem = address_problem(address)
                if problem is not None:
                    where = f"{host} is" if _is_literal(host, address) else f"{host} resolves to {address},"
                    raise _AddressRefused(
                        f"{where} {problem}; private networks are fetched only with --allow-private-urls"
                    )
        failure: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                stream = self._inner.connect_tcp(
                    str(address), port, _until(self.deadline, timeout), local_address, socket_options
                )
            except httpcore.ConnectError as error:
                failure = error
            else:
                if self.cancel is not None:
                    self.cancel.watch(stream.get_extra_info("socket"))
                return _DeadlineStream(stream, self.deadline)
        raise failure or httpcore.ConnectError(f"{host} has no address")

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise _AddressRefused("Unix sockets are not fetched")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _until(deadline: float, timeout: float | None) -> float:
    """The timeout of one socket operation: httpcore's own, cut short by the fetch's deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore.TimeoutException("past the deadline of the fetch")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose reads, writes and TLS handshake all end by the fetch's deadline.

    httpcore's timeouts count from each operation, so a server that sends a header byte a second
    never trips them; cutting each operation short at the deadline bounds the whole fetch.
    """

    def __init__(self, inner: httpcore.NetworkStream, deadline: float):
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _until(self._deadline, timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _until(self._deadline, timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> httpcore.NetworkStream:
        secured = self._inner.start_tls(ssl_context, server_hostname, _until(self._deadline, timeout))
        return _DeadlineStream(secured, self._deadline)

    def get_extra_info(self, info: str):
        return self._inner.get_extra_info(info)


def _is_literal(host: str, address: IPAddress) -> bool:
    try:
        return ipaddress.ip_address(host) == address
    except ValueError:
        return False


def fetch(url: str, policy: FetchPolicy | None = None, cancel: FetchCancel | None = None) -> bytes:
    """The document at ``url`` (a PDF or image, by its bytes); raises :class:`FetchError` otherwise, and
    :class:`FetchCancelled` soon after ``cancel`` is cancelled."""
    try:
        return _fetch(url, policy or FetchPolicy(), cancel)
    except FetchError:
        if cancel is not None and cancel.cancelled:
            raise FetchCancelled(url, "the fetch was cancelled") from None
        raise


def _fetch(url: str, policy: FetchPolicy, cancel: FetchCancel | None) -> bytes:
    deadline = time.monotonic() + policy.deadline
    timeouts = dict.fromkeys(("connect", "read", "write", "pool"), policy.timeout)
    headers = {
        "Accept": "application/pdf, image/*;q=0.9, */*;q=0.1",
        "Accept-Encoding": "identity",
        "User-Agent": USER_AGENT,
    }
    pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        network_backend=CheckedBackend(policy.allow_private, deadline, cancel),
        max_connections=1,
    )
    try:
        with pool:
            target = _checked_url(url, url)
            for _ in range(policy.max_redirects + 1):
                request_url = httpcore.URL(
                    scheme=target.raw_scheme, host=target.raw_host, port=target.port, target=target.raw_path
                )
                extensions = {"timeout": timeouts}
                with pool.stream("GET", request_url, headers=headers, extensions=extensions) as response:
                    location = _header(response, b"location")
                    if response.status in _REDIRECTS and location:
                        target = _checked_url(url, location, base=target)
                        continue
                    if not 200 <= response.status < 300:
                        raise UpstreamError(url, f"the server answered {response.status}{_phrase(response)}")
                    return _read_body(url, response, policy)
            raise RefusedURL(url, f"more than {policy.max_redirects} redirects (a redirect loop?)")
    except _AddressRefused as error:
        raise RefusedURL(url, f"refused: {error}") from None
    except httpcore.TimeoutException as error:
        if time.monotonic() >= deadline:
            raise FetchTimeout(url, f"the download took longer than {policy.deadline:g} s") from None
        if isinstance(error, httpcore.ConnectTimeout):
            raise FetchTimeout(url, f"no connection within {policy.timeout:g} s (connect timeout)") from None
        raise FetchTimeout(url, f"no data for {policy.timeout:g} s (read timeout)") from None
    except httpcore.ConnectError as error:
        raise UpstreamError(url, f"cannot connect: {error}") from None
    except (httpcore.NetworkError, httpcore.ProtocolError) as error:
        raise UpstreamError(url, f"the connection failed: {error or type(error).__name__}") from None


def _checked_url(url: str, location: str, base: httpx.URL | None = None) -> httpx.URL:
    """``location`` (the URL itself, or a redirect's target relative to ``base``) parsed; refused
    unless it is http(s) with a host."""
    via = "" if base is None else f"redirected to {redact_url(location)}: "
    try:
        target = httpx.URL(location) if base is None else base.join(location)
    except httpx.InvalidURL as error:
        raise RefusedURL(url, f"{via}not a valid URL ({error})") from None
    if target.scheme not in SCHEMES:
        scheme = f"{target.scheme}:" if target.scheme else "a URL without a scheme"
        raise RefusedURL(url, f"{via}only http and https URLs are fetched, not {scheme}")
    if not target.host:
        raise RefusedURL(url, f"{via}the URL has no host")
    return target


def _header(response: httpcore.Response, name: bytes) -> str | None:
    for key, value in response.headers:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None


def _phrase(response: httpcore.Response) -> str:
    reason = response.extensions.get("reason_phrase", b"").decode("latin-1")
    return f" {reason}" if reason else ""


def _read_body(url: str, response: httpcore.Response, policy: FetchPolicy) -> bytes:
    encoding = (_header(response, b"content-encoding") or "identity").lower()
    if encoding != "identity":
        # The bytes arrive as sent, undecoded: we ask for identity rather than decompress, since a
        # decompressor could turn one small chunk into far more than the limit.
        raise RefusedURL(
            url, f"the server sent a {encoding}-encoded body although asked for an unencoded one"
        )
    declared = _header(response, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > policy.max_bytes:
        raise BodyTooLarge(
            url, f"the document is {int(declared):,} bytes, over the limit of {policy.max_bytes:,}"
        )
    kind = _header(response, b"content-type")
    body = bytearray()
    sniffed = False
    for chunk in response.iter_stream():
        body += chunk
        if len(body) > policy.max_bytes:
            raise BodyTooLarge(
                url, f"the document passed the limit of {policy.max_bytes:,} bytes; the download was stopped"
            )
        if not sniffed and len(body) >= SNIFF_BYTES:
            _check_document(url, body, kind)
            sniffed = True
    if not sniffed:
        _check_document(url, body, kind)
    return bytes(body)


def _check_document(url: str, head: bytes | bytearray, content_type: str | None) -> None:
    if not head:
        raise RefusedURL(url, "the server sent an empty body, not a document")
    if sniff(bytes(head[:SNIFF_BYTES])) is None:
        what = f"a body of type {content_type.split(';')[0]}" if content_type else "a body"
        raise RefusedURL(url, f"the server sent {what}, which {NOT_A_DOCUMENT}")
