"""The FastMTP drafts of ``model.generate`` against a plain-torch head written here from SPEC section 6.

Greedy verification keeps the output lossless whatever the head computes, so a wrong head (halves of
the ``eh_proj`` input swapped, the first pair's embedding not zeroed, a wrong rotary position or
fed-back state) would pass every lossless test while making the real checkpoint's drafts useless.
This test records the draft logits of each step of a real ``generate`` call and recomputes them from
the committed tokens and the main model's states, using the checkpoint's weights only (nothing of
``modeling_jina_ocr.py``'s head, nor of ``jina_ocr/vllm/mtp.py``):

- one entry per committed pair (x_{j+1}, h_j) at rotary position j, the position of the state it
  reads; the entry at position 0 gets a zero embedding (vLLM's rule);
- ``x = eh_proj([enorm(e) ; hnorm(h)])``, embedding first, then one dense decoder layer with causal
  attention over the head's entries; logits = ``lm_head(model.norm(x))``;
- draft 1 from the newest pair; draft k+1 from (draft k, the head's state, per ``mtp_feedback_hidden``)
  one position further; ``mtp_first_hidden`` says which main-model state step 1 reads.
"""

from __future__ import annotations

import functools

import pytest
import torch
from fastmtp_helpers import generate, loop_options, page_batch, small_model
from test_model_parity import ref_decoder_layer, ref_rmsnorm, ref_swiglu

from jina_ocr.remote_code.generation import hooks
from jina_ocr.remote_code.generation.fastmtp import FastMTPCandidateGenerator

STEPS = 3


def ref_head(model, tokens, states, positions, zero_first=True, embedding_first=True):
    """Outputs, before the shared final norm, of head entries (token, state, rotary position) (L,)."""
    head = model.mtp_module.heads[0]  # read for its weights only
    embeddings = model.get_input_embeddings().weight[tokens]
    if zero_first:
        embeddings = torch.where((positions == 0)[:, None], torch.zeros_like(embeddings), embeddings)
    halves = [ref_rmsnorm(embeddings, head.enorm), ref_rmsnorm(states, head.hnorm)]
    x = torch.cat(halves if embedding_first else halves[::-1], -1) @ head.eh_proj.weight.T
    mlp = functools.partial(ref_swiglu, mlp=head.mtp_block.mlp)
    return ref_decoder_layer(x, head.mtp_block, model.config, positions, mlp)


@torch.no_grad()
def ref_draft_logits(model, sequence, pixel_values, depths, **variant):
    """Draft logits (depths, V) of one step, for the committed ``sequence`` (n,) of one page."""
    config = model.config
    out = model(input_ids=sequence[None], pixel_values=pixel_values, use_cache=False)
    main = out.last_hidden_state if config.mtp_first_hidden == "post_norm" else out.pre_norm_hidden_state
    n = sequence.shape[0]
    tokens, states, positions = sequence[1:].tolist(), list(main[0, : n - 1]), list(range(n - 1))
    logits = []
    for _ in range(depths):
        state = ref_head(
            model, torch.tensor(tokens), torch.stack(states), torch.tensor(positions), **variant
        )[-1]
        normed = ref_rmsnorm(state, model.model.norm)
        logits.append(normed @ model.lm_head.weight.T)
        tokens.append(int(logits[-1].argmax()))
        states.append(normed if config.mtp_feedback_hidden == "post_norm" else state)
        positions.append(positions[-1] + 1)
    return torch.stack(logits)


def record_draft_logits(
    model, monkeypatch, inputs, max_new_tokens
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(committed sequence, draft logits (depths, V)) of every drafting step of one ``generate`` call."""
    records = []

    class Recording(FastMTPCandidateGenerator):
        def get_candidates(self, input_ids, **kwargs):
            logits = []
            scores = model.logits

            def recorded(hidden):
                logits.append(scores(hidden))
                return logits[-1]

            model.logits = recorded  # the drafter's LM-head call; the main forward runs outside this
            try:
                candidates = super().get_candidates(input_ids, **kwargs)
            finally:
                del model.logits
            if logits:
                records.append((input_ids[0].clone(), torch.cat(logits)))
            return candidates

    monkeypatch.setattr(hooks, "FastMTPCandidateGenerator", Recording)
    vocab = model.config.vocab_size
    generate(model, inputs, use_mtp=True, max_new_tokens=max_new_tokens, mtp_num_speculative_steps=STEPS,
             eos_token_id=vocab - 1, loop_guard_ngram_size=0, mtp_adaptive_drafting=False,
             **loop_options("library"))  # fmt: skip
    return records


@pytest.mark.parametrize(
    ("first", "feedback"), [("post_norm", "post_norm"), ("pre_norm", "pre_norm"), ("post_norm", "pre_norm")]
)
def test_draft_logits_equal_the_reference_head(monkeypatch, first, feedback):
    model = small_model(seed=4, mtp_first_hidden=first, mtp_feedback_hidden=feedback)
    inputs = page_batch(7, [128], model.config.vocab_size)
    records = record_draft_logits(model, monkeypatch, inputs, max_new_tokens=14)
    assert len(records) >= 4 and sum(logits.shape[0] == STEPS for _, logits in records) >= 3  # recursion ran
    for sequence, logits in records:
        expected = ref_draft_logits(model, sequence, inputs["pixel_values"], logits.shape[0])
        torch.testing.assert_close(logits, expected, rtol=1e-9, atol=1e-9)
    # The checks above can tell the rules apart: each variant gives other logits on these inputs.
    sequence, logits = records[0]
    for variant in ({"zero_first": False}, {"embedding_first": False}):
        other = ref_draft_logits(model, sequence, inputs["pixel_values"], logits.shape[0], **variant)
        assert (other - logits).abs().max() > 1e-6, variant  # a thousand times the tolerance above
