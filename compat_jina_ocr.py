"""How the supported Transformers releases (5.17 - 5.25) differ, in one place.

- The cache is ``past_key_values`` in forwards and model outputs up to 5.23 and ``cache`` from 5.24.
- A static cache keeps its token count on the device from 5.17 on and returns keys for all its slots.
- From 5.25 the assisted loop reads ``num_drafting_tokens`` before the first step (``generation/fastmtp.py``).
- Importing on a release outside the range fails (too old) or warns (untested) naming the range.
"""

from __future__ import annotations

import dataclasses
import warnings

import transformers
from packaging.version import Version
from transformers.modeling_outputs import BaseModelOutputWithPast

OLDEST_SUPPORTED = Version("5.17")
FIRST_UNTESTED = Version("5.26")
SUPPORTED_RANGE = f">={OLDEST_SUPPORTED},<{FIRST_UNTESTED}"


def check_transformers_version(installed: str = transformers.__version__) -> None:
    """Raise for a release older than 5.17 and warn for one newer than 5.25."""
    version = Version(installed)
    if version < OLDEST_SUPPORTED:
        raise ImportError(
            f"jina-ocr's remote code needs transformers {SUPPORTED_RANGE}; transformers {installed} is "
            f"installed. Upgrade with: pip install 'transformers{SUPPORTED_RANGE}'"
        )
    if version.release >= FIRST_UNTESTED.release:  # release tuples, so 5.26.0.dev0 counts as untested
        warnings.warn(
            f"jina-ocr's remote code is tested with transformers {SUPPORTED_RANGE}; {installed} is newer "
            "and may work, but if it fails install a supported release.",
            stacklevel=2,
        )


CACHE_FIELD = (
    "cache" if "cache" in {f.name for f in dataclasses.fields(BaseModelOutputWithPast)} else "past_key_values"
)


def resolve_cache(cache, past_key_values):
    """The cache a forward was given, under whichever name the installed release passes it."""
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise ValueError("pass the KV cache once, as `cache` or as `past_key_values`, not both")
    return cache if cache is not None else past_key_values


def with_cache(output_class, cache, **fields):
    """Build a model output, storing ``cache`` under the installed release's field name."""
    return output_class(**{CACHE_FIELD: cache}, **fields)


def output_cache(output):
    """The cache stored in a model output, whatever the installed release calls the field."""
    return getattr(output, CACHE_FIELD)


def static_cache_length(cache) -> int | None:
    """The slot count of a cache that returns keys for all its slots (a static cache), else None."""
    if cache is None or not getattr(cache, "is_compileable", False):
        return None
    length = cache.get_max_length()
    return length if isinstance(length, int) and length > 0 else None
