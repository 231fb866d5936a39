"""FastMTP head training: the main model frozen, the head learns the model's own greedy outputs.

FastMTP (SPEC section 6) trains one draft block applied recursively K times on self-distilled data:
the sequences are the main model's greedy transcriptions of synth pages, so the head learns to predict
what the verifier will accept, not the ground truth. Each of the K depths is one full-sequence pass of
the head, with loss weights proportional to 0.6^(k-1) (K = 3: 0.51, 0.31, 0.18).

The pairing is the one the drafter uses at inference (``generation/fastmtp.py``): entry j of depth 1
combines the embedding of token x_{j+1} with the main model's state h_j at rotary position j and
predicts x_{j+2}; entry j of depth k combines x_{j+k} with the head's own state from depth k-1 at
position j+k-1 and predicts x_{j+k+1}. Which main state (after or before the final norm) and which
head state (the normed output or the raw block output) are read is set by the config fields
``mtp_first_hidden`` and ``mtp_feedback_hidden``, exactly as at inference. Only targets inside the
generated text count: the head never drafts the prompt.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open

from jina_ocr.errors import UserError
from jina_ocr.model_files import WEIGHTS, load_model_files, load_settings, save_model_files
from jina_ocr.train.data import IGNORE_INDEX
from jina_ocr.train.drills import STAGES
from jina_ocr.train.recipe import PageRecipe
from jina_ocr.train.run_log import append_record

DISTILLED = "distill.pt"


@dataclass
class MTPOptions:
    """Options of :func:`train_mtp`; the command line mirrors them one to one."""

    model: Path
    out: Path
    pages: int = 256
    seed: int = 2
    epochs: int = 3
    batch_size: int = 8
    lr: float = 1e-3
    held_out: int = 32
    max_new_tokens: int = 192
    letter_words: float = 0.0
    head_from: Path | None = None
    device: str | None = None
    threads: int | None = None


def depth_weights(depths: int, decay: float = 0.6) -> list[float]:
    """FastMTP's loss weights: proportional to ``decay ** (k - 1)`` and summing to one."""
    raw = [decay**k for k in range(depths)]
    return [w / sum(raw) for w in raw]


def distill(model, processor, pages, batch_size: int, max_new_tokens: int) -> list[dict]:
    """The model's greedy token sequences for ``pages``, with the main-model states FastMTP step 1 reads.

    Each entry holds ``ids`` (prompt, image placeholders and generated tokens through EOS, no padding),
    ``prompt_length`` and ``hidden`` (one state per token, float32, on the CPU).
    """
    first = model.config.mtp_first_hidden
    sequences = []
    for start in range(0, len(pages), batch_size):
        chunk = pages[start : start + batch_size]
        inputs = processor.prepare_ocr_inputs(
            [p.image for p in chunk], device=model.device, dtype=model.dtype
        )
        with torch.inference_mode():
            out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, use_mtp=False)
            width = inputs["input_ids"].shape[1]
            for row, page in enumerate(chunk):
                generated = out[row, width:].tolist()
                eos = processor.tokenizer.eos_token_id
                if eos in generated:
                    generated = generated[: generated.index(eos) + 1]
                # The page alone, unpadded: its own views (a tiled page's tiles are not one slice per
                # row of the batch's) and its prompt, then what the batch generated for it.
                alone = processor.prepare_ocr_inputs([page.image], device=model.device, dtype=model.dtype)
                prompt = alone.pop("input_ids")[0].tolist()
                alone.pop("attention_mask", None)
                ids = torch.tensor([prompt + generated], device=model.device)
                main = model(input_ids=ids, **alone)
                state = main.last_hidden_state if first == "post_norm" else main.pre_norm_hidden_state
                sequences.append(
                    {"ids": ids[0].cpu(), "prompt_length": len(prompt), "hidden": state[0].float().cpu()}
                )
    return sequences


def collate(sequences: list[dict], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``ids`` and ``hidden``, and ``targets``: the ids with everything but generated tokens
    (and padding) set to -100. Right padding needs no attention mask: padding only follows real entries."""
    length = max(len(s["ids"]) for s in sequences)
    width = sequences[0]["hidden"].shape[-1]
    ids = torch.full((len(sequences), length), pad_token_id, dtype=torch.long)
    targets = torch.full((len(sequences), length), IGNORE_INDEX, dtype=torch.long)
    hidden = torch.zeros((len(sequences), length, width))
    for row, s in enumerate(sequences):
        n = len(s["ids"])
        ids[row, :n] = s["ids"]
        targets[row, s["prompt_length"] : n] = s["ids"][s["prompt_length"] :]
        hidden[row, :n] = s["hidden"]
    return {"ids": ids, "targets": targets, "hidden": hidden}


def mtp_losses(model, ids: torch.Tensor, hidden: torch.Tensor, targets: torch.Tensor, depths: int):
    """Per-depth cross-entropy and (correct, counted) prediction totals of the head over a batch.

    Entry j of depth k reads token x_{j+k} at rotary position j+k-1 and predicts x_{j+k+1}; entries
    whose token or target falls outside the sequence are padding (target -100).
    """
    head = model.mtp_module.heads[0]
    embed = model.get_input_embeddings()
    norm = model.model.norm
    feed_back_normed = model.config.mtp_feedback_hidden == "post_norm"
    batch, length = ids.shape
    entries = length - 1  # entry j needs h_j and x_{j+1}
    state = hidden[:, :entries]
    base = torch.arange(entries, device=ids.device).expand(batch, entries)
    pad = torch.full((batch, depths + 1), IGNORE_INDEX, dtype=torch.long, device=ids.device)
    padded_targets = torch.cat([targets, pad], dim=1)
    padded_ids = torch.cat([ids, pad.clamp(min=0)], dim=1)
    losses, correct, counted = [], [], []
    for k in range(1, depths + 1):
        tokens = padded_ids[:, k : k + entries]
        out = head(embed(tokens), state, base + (k - 1))
        normed = norm(out)
        logits = model.logits(normed)
        target = padded_targets[:, k + 1 : k + 1 + entries]
        losses.append(
            F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE_INDEX
            )
        )
        valid = target != IGNORE_INDEX
        correct.append(int(((logits.argmax(-1) == target) & valid).sum()))
        counted.append(int(valid.sum()))
        state = normed if feed_back_normed else out
    return losses, correct, counted


def train_mtp(options: MTPOptions) -> Path:
    """Distil (cached in ``out/distill.pt`` for the same model and pages), train the head, write ``out/model``."""
    if options.threads:
        torch.set_num_threads(options.threads)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(options.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model, processor = load_model_files(options.model)
    model.to(device)
    settings = load_settings(options.model)
    if not hasattr(model, "mtp_module"):
        raise ValueError(f"{options.model} has no FastMTP head (num_nextn_predict_layers is 0)")
    head_from_step = None if options.head_from is None else start_head_from(model, options.head_from)
    depths = model.config.mtp_num_speculative_steps
    weights = depth_weights(depths)

    sequences = _distilled(model, processor, options, out)
    train, held_out = sequences[options.held_out :], sequences[: options.held_out]

    model.requires_grad_(False)
    head = model.mtp_module.heads[0]
    head.requires_grad_(True)
    model.train()
    optimizer = torch.optim.AdamW(head.parameters(), lr=options.lr, betas=(0.9, 0.95), weight_decay=0.01)
    steps = options.epochs * math.ceil(len(train) / options.batch_size)
    warmup = max(1, steps // 20)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            (s + 1) / warmup
            if s < warmup
            else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup)))
        ),
    )
    pad = processor.tokenizer.pad_token_id

    def evaluate(step: int) -> None:
        model.eval()
        totals = [[0, 0] for _ in range(depths)]
        with torch.no_grad():
            for start in range(0, len(held_out), options.batch_size):
                batch = {
                    k: v.to(device)
                    for k, v in collate(held_out[start : start + options.batch_size], pad).items()
                }
                _, correct, counted = mtp_losses(
                    model, batch["ids"], batch["hidden"], batch["targets"], depths
                )
                for k in range(depths):
                    totals[k][0] += correct[k]
                    totals[k][1] += counted[k]
        model.train()
        accuracy = [round(c / max(1, n), 4) for c, n in totals]
        append_record(out, {"step": step, "held_out_accuracy_per_depth": accuracy})

    evaluate(0)
    generator = torch.Generator().manual_seed(options.seed)
    step = 0
    for epoch in range(options.epochs):
        order = torch.randperm(len(train), generator=generator).tolist()
        for start in range(0, len(order), options.batch_size):
            batch = collate([train[i] for i in order[start : start + options.batch_size]], pad)
            batch = {k: v.to(device) for k, v in batch.items()}
            losses, _, _ = mtp_losses(model, batch["ids"], batch["hidden"], batch["targets"], depths)
            loss = sum(w * term for w, term in zip(weights, losses, strict=True))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            append_record(
                out,
                {
                    "step": step,
                    "epoch": epoch,
                    "loss": round(loss.item(), 4),
                    "loss_per_depth": [round(term.item(), 4) for term in losses],
                },
            )
        evaluate(step)
    # The head's own options; the model it was trained on is the one these settings describe (its path
    # would only name a folder on the training machine).
    settings["mtp"] = {
        key: value
        for key, value in vars(options).items()
        if key not in ("model", "out", "head_from", "device", "threads")
    }
    if options.head_from is not None:
        settings["mtp"]["head_from_step"] = head_from_step
    settings["mtp"]["depth_weights"] = [round(w, 4) for w in weights]
    model.requires_grad_(False)
    return save_model_files(out / "model", model.eval(), processor.tokenizer, settings)


def start_head_from(model, folder: Path) -> int | None:
    """Give ``model`` the FastMTP head of the model files in ``folder``; returns the training step
    those files record (None for files no run wrote), which the new head's settings keep.

    A run's files carry the head of whatever model the run started from, trained on that model's
    outputs (in another processor mode, say); the head of the bundle before, trained on the outputs of a
    close model, starts nearer to what this one drafts, so the same epochs take it further.
    """
    # Only the head's tensors are read: building the whole donor model would cost as much as the model.
    prefix = "mtp_module."
    with safe_open(str(Path(folder, WEIGHTS)), framework="pt") as handle:
        head = {
            key.removeprefix(prefix): handle.get_tensor(key)
            for key in handle.keys()
            if key.startswith(prefix)
        }
    if not head:
        raise UserError(f"--head-from {folder}: those model files have no FastMTP head")
    try:
        model.mtp_module.load_state_dict(head)
    except RuntimeError as error:
        detail = " ".join(str(error).split())  # torch's message spans lines and tabs
        raise UserError(f"--head-from {folder}: its FastMTP head does not fit this model. {detail}") from None
    return load_settings(folder).get("progress", {}).get("step")


def distillation_key(options: MTPOptions) -> dict:
    """What the distilled sequences depend on: the main model's weights and the pages' options.

    A head trained on another model's outputs, or on pages other than the ones asked for, would be
    trained on the wrong data without a sign of it, so a cached distillation is reused only when
    every one of these matches.
    """
    digest = hashlib.sha256(Path(options.model, WEIGHTS).read_bytes()).hexdigest()
    return {
        "weights_sha256": digest,
        "pages": options.pages,
        "seed": options.seed,
        "letter_words": options.letter_words,
        "max_new_tokens": options.max_new_tokens,
    }


def _distilled(model, processor, options: MTPOptions, out: Path) -> list[dict]:
    """The cached sequences of ``out/distill.pt`` when they were made the same way; else distil again."""
    key, cached = distillation_key(options), out / DISTILLED
    if cached.exists():
        saved = torch.load(cached, weights_only=False)
        saved_key = saved.get("key", {}) if isinstance(saved, dict) else {}
        if saved_key == key:
            return saved["sequences"]
        changed = sorted(name for name in key if saved_key.get(name) != key[name])
        append_record(out, {"distilling_again": f"{DISTILLED} was made with other {', '.join(changed)}"})
    # Pages of the curriculum's last stage: what the model reads, so the head learns its real outputs.
    # Words of random letters make the head read the main model's state instead of learning the
    # training vocabulary, which a user's pages do not share.
    recipe, last = PageRecipe(letter_words=options.letter_words), len(STAGES) - 1
    pages = [recipe.training_page(options.seed, i, last) for i in range(1, options.pages + 1)]
    pages = [page for page in pages if page is not None]
    started = time.perf_counter()
    sequences = distill(model, processor, pages, options.batch_size * 2, options.max_new_tokens)
    torch.save({"key": key, "sequences": sequences}, cached)
    append_record(out, {"distilled": len(sequences), "seconds": round(time.perf_counter() - started, 1)})
    return sequences
