"""``jina-ocr push``: upload an exported Hub folder to a model repo.

The folder is checked with the same rules as ``jina-ocr export`` before anything is sent, so a folder
that would not load with ``trust_remote_code=True`` never reaches the Hub. The upload is one
``HfApi.upload_folder`` commit; ``huggingface_hub`` reads the token (``--token``, ``HF_TOKEN`` or the
saved login) and the Hub address (``HF_ENDPOINT``) as usual. ``--timeout`` bounds each wait for an
answer of the Hub, which the library's HTTP client otherwise leaves unbounded.

The export owns the repo's code, configs and weights: a file of those kinds that the folder lacks is
deleted in the same commit, because a stale module, shard index or config left from an earlier
export would be loaded next to the new files. Other files (the model card, ``.gitattributes``,
anything added by hand) stay.
"""

from __future__ import annotations

import argparse
import importlib
import math
from pathlib import Path

from jina_ocr.errors import UserError

NAME = "push"
HELP = "Upload an exported Hub folder to a model repo (created if missing)."

# Byte-code caches appear when someone imports the folder's files directly; they are not remote code.
IGNORE_PATTERNS = ["__pycache__", "*.pyc"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", type=Path, help="a folder written by `jina-ocr export`")
    parser.add_argument("repo_id", help="the model repo, as user/name or org/name (or name, in your account)")
    parser.add_argument(
        "--private", action="store_true", help="create the repo private (if it does not exist)"
    )
    parser.add_argument("--revision", help="the branch to push to (created from main if missing)")
    parser.add_argument(
        "--token", help="a Hub token with write access (default: HF_TOKEN or the saved login)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds to wait for each answer of the Hub before giving up (60)",
    )


def run(args: argparse.Namespace) -> int:
    from huggingface_hub.utils import get_session

    if not math.isfinite(args.timeout) or args.timeout <= 0:
        raise UserError(f"--timeout {args.timeout}: give a positive number of seconds")
    # huggingface_hub's shared HTTP client waits for an answer without limit: a Hub address that accepts
    # connections and never answers would hold the upload forever.
    session = get_session()
    previous = session.timeout
    session.timeout = args.timeout
    try:
        return _push(args)
    finally:
        session.timeout = previous


def _push(args: argparse.Namespace) -> int:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError

    from jina_ocr.export.folder import EXPORT_OWNED, validate_folder

    if not args.folder.is_dir():
        raise UserError(f"{args.folder} is not a folder; write one with `jina-ocr export` first")
    validate_folder(args.folder)
    api = HfApi(token=args.token)
    try:
        repo = api.create_repo(args.repo_id, private=args.private, exist_ok=True)
        if args.revision:
            api.create_branch(repo.repo_id, branch=args.revision, exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo.repo_id,
            folder_path=args.folder,
            revision=args.revision,
            commit_message=f"Upload {args.folder.name} with jina-ocr push",
            ignore_patterns=IGNORE_PATTERNS,
            delete_patterns=list(EXPORT_OWNED),
        )
    except _client_errors("TimeoutException") as error:
        raise UserError(
            f"the Hub at {api.endpoint} did not answer within {args.timeout:g} s (--timeout)"
        ) from error
    except _client_errors("TransportError") as error:
        raise UserError(f"cannot reach the Hub at {api.endpoint}: {error}") from error
    except HFValidationError as error:
        raise UserError(f"{args.repo_id!r} is not a valid repo id: {error}") from error
    except HfHubHTTPError as error:
        status = f" (HTTP {error.response.status_code})" if error.response is not None else ""
        reason = (error.server_message or str(error)).strip().splitlines()[0]
        raise UserError(f"{api.endpoint} refused the upload to {args.repo_id}{status}: {reason}") from error
    where = f"{repo}/tree/{args.revision}" if args.revision else str(repo)
    print(f"pushed {args.folder} to {where}")
    print(f"commit {commit.oid}")
    return 0


def _client_errors(name: str) -> tuple[type[Exception], ...]:
    """The exception ``name`` of the HTTP client of the installed huggingface_hub: httpx's before
    huggingface_hub 2.0, httpx2's from 2.0 on (``TransportError``: the Hub cannot be reached;
    ``TimeoutException``, one of those: it did not answer in time)."""
    errors = []
    for client in ("httpx", "httpx2"):
        try:
            errors.append(getattr(importlib.import_module(client), name))
        except ImportError:
            continue
    return tuple(errors)
