"""The pages of a GRPO run: prompts TRL can render, with the reference each sample is scored against.

A training row is one page of the curriculum's last stage (:meth:`PageRecipe.training_page`): a
target-format drill page (a share ``repeat_words`` of its words repeating the one before, the
weakness the reward is meant to fix), a page in an earlier stage's layout, or a JinaOCRSynth page
with its olmOCR-style unit tests. Row ``j`` of a run is always page ``first + j`` of its seed, made
when TRL reads the row, so a run resumed at step ``s`` (``first = 1 + s * pages``) sees exactly the
pages an uninterrupted run would have, and no page is held in memory longer than its step.

A row is what TRL's vision-language path takes: ``prompt`` (a one-turn conversation whose text is the
instruction of every inference request, so the chat template renders the inference prompt token for
token), ``image`` (the page; TRL puts it into the conversation), and the columns the reward reads,
``reference`` (the page's Markdown) and ``tests`` (its unit tests; none for drill pages).

Held-out pages come from :meth:`PageRecipe.held_out_pages`: words no training page prints.
"""

from __future__ import annotations

from jina_ocr.remote_code.processing_jina_ocr import JINA_DEFAULT_PROMPT
from jina_ocr.train.drills import STAGES
from jina_ocr.train.recipe import PageRecipe

LAST_STAGE = len(STAGES) - 1
PROMPT = [{"role": "user", "content": JINA_DEFAULT_PROMPT}]
REPEATS_SHARE = 0.2
"""Share of repeated words on the held-out pages that measure the repeated-word weakness (a fifth of
the words, as on the pages where jina-ocr-tiny read at CER 0.079)."""


def training_page(recipe: PageRecipe, seed: int, index: int):
    """Page ``index`` of ``seed``; where the synth generator cannot lay that page out, the target-format
    drill of the same index (so every index is a page, and row ``j`` is always the same page)."""
    page = recipe.training_page(seed, index, LAST_STAGE)
    if page is None:
        page = recipe.drill(STAGES[LAST_STAGE], f"{seed}/{index}", repeats=recipe.repeat_words)
    return page


def row(page) -> dict:
    """The row TRL reads for ``page``."""
    return {
        "prompt": PROMPT,
        "image": page.image,
        "reference": page.markdown,
        "tests": list(getattr(page, "tests", ())),
    }


def page_rows(recipe: PageRecipe, seed: int, first: int, count: int):
    """Rows ``first .. first + count - 1`` of ``seed`` as a map-style ``datasets.Dataset`` (TRL takes no
    other kind) that stores only the page indices and renders a page when its row is read."""
    import datasets

    rows = datasets.Dataset.from_dict({"index": list(range(first, first + count))})

    def render(batch: dict) -> dict:
        # TRL reads a page once per sample of it, all in one batch: each page is made once.
        made = {index: row(training_page(recipe, seed, index)) for index in dict.fromkeys(batch["index"])}
        rows = [made[index] for index in batch["index"]]
        return {key: [r[key] for r in rows] for key in ("prompt", "image", "reference", "tests")}

    rows.set_transform(render)
    return rows


def held_out_sets(recipe: PageRecipe, seed: int, count: int) -> dict[str, list]:
    """The evaluation pages: ``held_out`` (target-format pages of held-out words) and ``repeats`` (the
    same layout with a fifth of the words repeating the one before)."""
    return {
        "held_out": recipe.held_out_pages(LAST_STAGE, seed, count),
        "repeats": recipe.held_out_pages(LAST_STAGE, seed, count, repeats=REPEATS_SHARE),
    }
