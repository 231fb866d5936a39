"""``jina-ocr convert --endpoint``: the options of a run through OpenAI-compatible servers.

The conversion itself is :class:`jina_ocr.services.endpoints.EndpointConverter`; this module declares the
options, refuses the ones that belong to the server, and makes the converter.
"""

from __future__ import annotations

import argparse

from jina_ocr.commands._options import check_positive
from jina_ocr.errors import UserError
from jina_ocr.services import endpoints

SERVER_OPTIONS = {
    "model": "--model",
    "revision": "--revision",
    "mode": "--mode",
    "no_mtp": "--no-mtp",
    "batch_size": "--batch-size",
    "device": "--device",
    "dtype": "--dtype",
    "quantize": "--quantize",
}
"""Options that choose the model and how it runs: with --endpoint, the server's business."""


class _DefaultInt(int):
    """An option's default, told apart from the same value typed on the command line."""


class _DefaultStr(str):
    """An option's default, told apart from the same value typed on the command line."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The endpoint options; call after the local ones, whose defaults it marks (see :func:`_given`)."""
    group = parser.add_argument_group("endpoints (convert through OpenAI-compatible servers)")
    group.add_argument(
        "--endpoint",
        action="append",
        metavar="URL",
        help="OpenAI base_url of a server such as vllm serve or jina-ocr serve, e.g. "
        "http://127.0.0.1:8000/v1; repeat for several",
    )
    group.add_argument("--served-model", help="model name to request (default: the first of /v1/models)")
    group.add_argument(
        "--api-key", help=f"bearer token for the endpoints (default: ${endpoints.API_KEY_ENV})"
    )
    group.add_argument(
        "--concurrency",
        type=int,
        default=endpoints.DEFAULT_CONCURRENCY,
        help="requests in flight over all endpoints (default: %(default)s)",
    )
    group.add_argument(
        "--retries",
        type=int,
        default=endpoints.DEFAULT_RETRIES,
        help="retries of a page after 429, 5xx, timeouts and lost connections (default: %(default)s)",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=endpoints.DEFAULT_TIMEOUT,
        help="seconds to wait for the answer to one request (default: %(default)s)",
    )
    group.add_argument(
        "--cooldown",
        type=float,
        default=endpoints.DEFAULT_COOLDOWN,
        help=f"seconds an endpoint rests after {endpoints.FAILURES_BEFORE_COOLDOWN} failures in a row "
        "(default: %(default)s)",
    )
    parser.set_defaults(
        batch_size=_DefaultInt(parser.get_default("batch_size")),
        dtype=_DefaultStr(parser.get_default("dtype")),
    )


def _given(value) -> bool:
    return value not in (None, False) and not isinstance(value, (_DefaultInt, _DefaultStr))


def check_arguments(args: argparse.Namespace) -> None:
    """Usage errors of the endpoint options, before any input is opened."""
    if not args.endpoint:
        return
    refused = [flag for dest, flag in SERVER_OPTIONS.items() if _given(getattr(args, dest))]
    if refused:
        raise UserError(
            f"{', '.join(refused)} cannot be used with --endpoint: the model and how it runs are chosen "
            "where it is served"
        )
    check_positive(args, "concurrency")
    if args.retries < 0:
        raise UserError("--retries must be 0 or more")
    if args.timeout <= 0 or args.cooldown < 0:
        raise UserError("--timeout must be positive and --cooldown 0 or more")


def converter(args: argparse.Namespace) -> endpoints.EndpointConverter:
    """The endpoint converter of the options (it asks the endpoints for their model now)."""
    return endpoints.EndpointConverter(
        args.endpoint,
        served_model=args.served_model,
        api_key=args.api_key,
        concurrency=args.concurrency,
        policy=endpoints.RetryPolicy(retries=args.retries, timeout=args.timeout, cooldown=args.cooldown),
        prompt=args.prompt,
        max_new_tokens=args.max_new_tokens,
        dpi=args.dpi,
        max_pixels=args.max_pixels,
        retry_truncated=args.retry_truncated,
    )
