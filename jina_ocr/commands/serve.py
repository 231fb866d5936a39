"""``jina-ocr serve``: the OpenAI-compatible HTTP server of :mod:`jina_ocr.services.server`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from jina_ocr.commands._options import (
    add_fetch_arguments,
    add_model_arguments,
    add_runtime_arguments,
    check_positive,
    fetch_policy,
)
from jina_ocr.errors import UserError
from jina_ocr.loading import resolve_model
from jina_ocr.runtime.documents import SERVER_MAX_PIXELS
from jina_ocr.services.conversion import DEFAULT_MAX_NEW_TOKENS, Converter

NAME = "serve"
HELP = "Serve a model over HTTP: OpenAI-compatible chat completions and PDF uploads."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: %(default)s; without --api-key anyone who reaches it may use it)",
    )
    parser.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    parser.add_argument(
        "--api-key",
        help="answer only requests with the header Authorization: Bearer API_KEY (/health excepted) "
        "(default: $JINA_OCR_API_KEY, else none)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=256,
        help="open connections beyond which requests are answered 503 (default: %(default)s)",
    )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="close a connection whose request headers are not all in by then (default: %(default)s)",
    )
    parser.add_argument(
        "--keep-alive-timeout",
        type=int,
        default=5,
        metavar="SECONDS",
        help="close an idle kept-alive connection after this long (default: %(default)s)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=8, help="pages per generate call (default: %(default)s)"
    )
    parser.add_argument(
        "--batch-wait-ms",
        type=float,
        default=10.0,
        help="how long the first queued page waits for others to join its batch (default: %(default)s)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=DEFAULT_MAX_NEW_TOKENS,
        help="cap on tokens per page; requests may ask for fewer (default: %(default)s)",
    )
    parser.add_argument(
        "--max-request-mb",
        type=float,
        default=32.0,
        help="largest request body, and with --allow-urls the most a request's documents add up to, "
        "uploaded or fetched (default: %(default)s)",
    )
    parser.add_argument(
        "--max-pages", type=int, default=64, help="most pages per request (default: %(default)s)"
    )
    parser.add_argument(
        "--max-pixels",
        type=int,
        default=SERVER_MAX_PIXELS,
        help="largest page bitmap in pixels, stricter than convert's (default: %(default)s)",
    )
    add_runtime_arguments(parser)
    parser.add_argument(
        "--allow-urls",
        action="store_true",
        help="fetch documents by URL: GET /{url} and http(s) image URLs in chat requests (off by default)",
    )
    add_fetch_arguments(parser, max_fetch_mb=False)


def run(args: argparse.Namespace) -> int:
    try:
        from jina_ocr.services.server import Connections, Limits, serve
    except ImportError as error:
        raise UserError(
            f"jina-ocr serve needs the HTTP server packages ({error.name} is missing): "
            "pip install 'jina-ocr[serve]'"
        ) from None

    check_positive(
        args,
        "batch_size",
        "max_new_tokens",
        "dpi",
        "max_pages",
        "max_pixels",
        "max_connections",
        "keep_alive_timeout",
    )
    if not args.header_timeout > 0:
        raise UserError("--header-timeout must be positive")
    key = api_key(args)
    if not args.max_request_mb > 0:
        raise UserError("--max-request-mb must be positive")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be between 0 and 65535, not {args.port}")
    if args.allow_private_urls and not args.allow_urls:
        raise UserError("--allow-private-urls needs --allow-urls")
    limits = Limits(
        max_request_bytes=int(args.max_request_mb * 1024 * 1024),
        max_pages=args.max_pages,
        max_pixels=args.max_pixels,
    )
    fetching = fetch_policy(args, limits.max_request_bytes) if args.allow_urls else None
    folder = resolve_model(args.model, args.revision)
    converter = Converter.from_pretrained(
        folder,
        device=args.device,
        dtype=args.dtype,
        quantize=args.quantize,
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        use_mtp=False if args.no_mtp else None,
        dpi=args.dpi,
        mode=args.mode,
    )
    # A Hub id names the model as the user does; a folder by its own name.
    name = args.model if args.model and not Path(args.model).exists() else Path(folder).name
    connections = Connections(
        max_connections=args.max_connections,
        header_seconds=args.header_timeout,
        keep_alive_seconds=args.keep_alive_timeout,
    )
    serve(
        converter, name, args.host, args.port, limits, args.batch_wait_ms / 1000, fetching, key, connections
    )
    return 0


def api_key(args: argparse.Namespace) -> str | None:
    """The key of ``--api-key``, else of ``$JINA_OCR_API_KEY`` (which keeps it out of ``ps``); None
    for no key. An empty key would let anyone in, so it is an error rather than quietly none."""
    key = args.api_key if args.api_key is not None else os.environ.get("JINA_OCR_API_KEY")
    if key is not None and not key.strip():
        raise UserError("--api-key (or $JINA_OCR_API_KEY) is empty; give a key or leave it unset")
    return key
