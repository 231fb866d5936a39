"""The one check of the counts the Python API takes (batch size, token limit, dpi, pixels, bytes, requests).

Lives at the bottom of the installed code so that every layer raises the same message for the same
mistake; the command line checks its flags itself (``jina_ocr.commands._options.check_positive``),
naming the flag instead of the parameter.
"""

from __future__ import annotations

from jina_ocr.errors import UserError


def positive_int(name: str, value) -> int:
    """``value`` when it is a whole number of at least 1 (True is not one), else a :class:`UserError`
    naming the parameter ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name} must be a positive whole number, not {value!r}")
    return value
