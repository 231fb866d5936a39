"""``jina-ocr convert --shard I/N``: one part of a list of documents, for job arrays without Ray.

A scheduler's job array runs the same command N times, each with its own I; together the N jobs convert
every document exactly once. A document belongs to the shard its output name hashes to, not to a
position in the list, so documents added to a folder between two jobs of the array move no other
document from one shard to another. Output names are settled over the whole list first (see
:func:`jina_ocr.commands.convert.output_names`), so every job gives a document the same name.
"""

from __future__ import annotations

import hashlib
import re

from jina_ocr.errors import UserError

_FORM = re.compile(r"(\d+)/(\d+)")


def parse(text: str) -> tuple[int, int]:
    """``"2/8"`` -> ``(2, 8)``: shard I of N, counted from 1."""
    match = _FORM.fullmatch(text.strip())
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise UserError(f"--shard {text}: expected I/N with 1 <= I <= N, such as 1/4")
    return int(match[1]), int(match[2])


def owner(name: str, count: int) -> int:
    """The shard (from 1) of the document whose output is ``name``: the same on every machine and in
    every Python (a digest, not ``hash``), case folded as output names are compared."""
    digest = hashlib.sha256(name.casefold().encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def select(items: list, names: list[str], shard: tuple[int, int]) -> tuple[list, list[str]]:
    """The inputs and output names of ``shard`` (``(I, N)``), in their order."""
    index, count = shard
    kept = [(item, name) for item, name in zip(items, names, strict=True) if owner(name, count) == index]
    return [item for item, _ in kept], [name for _, name in kept]
