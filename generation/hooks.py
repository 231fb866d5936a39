"""Every use of a private Transformers name by FastMTP, in one place, checked for the supported range.

Batch-1 FastMTP calls that need the library's features (dispatch.py) run in its assisted loop
(``_assisted_decoding``), which gets a candidate generator from the private ``_get_candidate_generator``;
the library's ``MTPCandidateGenerator`` needs one layer per depth (no recursive head), so ``install``
overrides it. Both names are checked at import: a rename fails at once, not by decoding without FastMTP.
"""

from __future__ import annotations

import transformers
from transformers import GenerationMixin

from ..compat_jina_ocr import SUPPORTED_RANGE
from .fastmtp import FastMTPCandidateGenerator, FastMTPStats

CANDIDATE_GENERATOR_HOOK = "_get_candidate_generator"
ASSISTED_DECODING_LOOP = "_assisted_decoding"


def _require(name: str) -> None:
    if not callable(getattr(GenerationMixin, name, None)):
        raise ImportError(
            f"FastMTP plugs into transformers' GenerationMixin.{name}, which transformers "
            f"{transformers.__version__} does not have; install transformers{SUPPORTED_RANGE}"
        )


def install(model_class: type) -> type:
    """Class decorator: route ``use_mtp`` calls of the library's assisted loop to FastMTP."""
    _require(ASSISTED_DECODING_LOOP)
    _require(CANDIDATE_GENERATOR_HOOK)
    library_choice = getattr(GenerationMixin, CANDIDATE_GENERATOR_HOOK)

    def choose_candidate_generator(self, generation_config, **kwargs):
        """FastMTP for ``use_mtp``; any other assisted mode (an assistant model, prompt lookup) is the
        library's. The running ``generate`` call passes its statistics (and K) in ``_fastmtp_call``."""
        if not generation_config.use_mtp:
            return library_choice(self, generation_config=generation_config, **kwargs)
        stats = getattr(self, "_fastmtp_call", None)
        if stats is None:
            stats = FastMTPStats(self.config.mtp_num_speculative_steps, 1)
        return FastMTPCandidateGenerator(self, generation_config, kwargs["logits_processor"], stats)

    setattr(model_class, CANDIDATE_GENERATOR_HOOK, choose_candidate_generator)
    return model_class
