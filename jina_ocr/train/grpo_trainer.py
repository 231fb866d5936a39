"""TRL's ``GRPOTrainer`` for jina-ocr models, with the three things TRL cannot take from them as they are.

TRL's generic vision-language path does most of the work unchanged: it renders each row's
conversation with the processor's chat template (which writes the inference prompt token for token),
samples the rollouts with the model's own ``generate`` given every tensor the processor returns (global
views, tiles and tile grids), scores them with our reward function (:mod:`jina_ocr.train.grpo_reward`),
and computes the GRPO loss with its fused LM head on our decoder's states. What this subclass changes:

1. **The tiles reach the loss.** Between the rollouts and the loss, TRL keeps a fixed list of image
   tensors, each tied to one model family's layout (``image_grid_thw`` for Qwen, ``num_tiles`` for
   InternVL, ``spatial_shapes`` for LFM2-VL, ...), and its log-probability forward takes only those.
   Our views come in two sizes (a 1024 px global view and 640 px tiles), so they cannot travel as one
   tile-indexed tensor either: TRL keeps the global views, drops ``pixel_values_local`` and
   ``image_grids``, and the loss forward would find more image placeholders than visual vectors. The
   batch gets each row's tiles (one tensor per row, so TRL's shuffling and splitting of the batch keep
   every row's tiles with it) and grid, and the forward passes them to the model.
2. **The reference model** (``beta`` above 0). TRL loads it again from the policy's Hub id with the
   Auto classes; a jina-ocr model is a folder of model files (:mod:`jina_ocr.model_files`) that the
   installed classes load, so the caller passes it in.
3. **Checkpoints.** ``Trainer`` saves the model with ``save_pretrained``, which writes the experts in
   the checkpoint layout (one tensor per expert), and resumes with ``load_state_dict(strict=False)``,
   which skips those tensors without a word: a resumed run would go on with the starting model's
   experts. A checkpoint here holds model files (``save_files`` writes them) and is read back strictly;
   every checkpoint folder is then also a folder of model files that ``--resume-from`` takes.

Written against TRL 1.16 (``_generate_and_score_completions``, ``_compute_loss`` and
``_get_per_token_logps_and_entropies`` are its internal steps).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from jina_ocr.model_files import WEIGHTS


class PageGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that carries every view of a page to the loss, takes its reference model as an
    object and checkpoints model files (``save_files(folder)`` writes them). It also logs the seconds of
    the rollouts (``seconds/rollout``) and of the whole sampling and scoring step
    (``seconds/generate_and_score``), which say where a step's time goes."""

    def __init__(self, *, args, reference=None, save_files: Callable[[Path], object], **kwargs):
        beta, args.beta = args.beta, 0.0  # with beta 0, TRL does not try to load a reference itself
        super().__init__(args=args, **kwargs)
        args.beta = self.beta = beta
        if beta:
            if reference is None:
                raise ValueError("beta above 0 needs the reference model")
            add_fused_lm_head(reference, temperature=self.temperature)
            reference.requires_grad_(False).eval()
            self.ref_model = self.accelerator.prepare_model(reference, evaluation_mode=True)
        self.save_files = save_files
        self._loss_batch: dict | None = None

    def _generate(self, prompts: list):
        started = time.perf_counter()
        try:
            return super()._generate(prompts)
        finally:
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["seconds/rollout"].append(time.perf_counter() - started)

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        started = time.perf_counter()
        batch = super()._generate_and_score_completions(inputs)
        # TRL kept the global views of the processor's output and dropped the rest: made again here.
        views = self.processing_class.image_processor([row["image"] for row in inputs])
        device = self.accelerator.device
        grids = views["image_grids"]
        batch["image_grids"] = grids.to(device)
        batch["tiles"] = [t.to(device) for t in views["pixel_values_local"].split(grids.prod(-1).tolist())]
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["seconds/generate_and_score"].append(time.perf_counter() - started)
        return batch

    def _compute_loss(self, model, inputs: dict):
        # TRL's loss step passes its own list of image tensors on; ours are read from the batch.
        self._loss_batch = inputs
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._loss_batch = None

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        pixel_values=None,
        pixel_values_local=None,
        image_grids=None,
        **_,
    ):
        """Log-probabilities (and entropies) of the completion tokens, every view of each row's page
        given. Called with the processor's tensors (reference and old log-probabilities) or, in the loss
        step, with the global views alone, the tiles and grids then coming from the batch."""
        if image_grids is None:
            tiles, image_grids = self._loss_batch["tiles"], self._loss_batch["image_grids"]
        else:
            tiles = list(pixel_values_local.split(image_grids.prod(-1).tolist()))
        batch_size = batch_size or input_ids.size(0)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            rows = slice(start, start + batch_size)
            labels = input_ids[rows].masked_fill(attention_mask[rows] == 0, -100)
            labels[:, :-logits_to_keep] = -100  # only the completion is scored
            with self.accelerator.autocast():
                out = model(
                    input_ids=input_ids[rows],
                    attention_mask=attention_mask[rows],
                    pixel_values=pixel_values[rows],
                    pixel_values_local=torch.cat(tiles[rows]),
                    image_grids=image_grids[rows],
                    labels=labels,
                    fused_lm_head=True,
                )
            logps.append(out.log_probs[:, -logits_to_keep:])
            if compute_entropy:
                entropies.append(out.entropy[:, -logits_to_keep:])
        # No load-balancing loss: the config asks for no router logits (TRL's aux_loss_enabled is off).
        return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        self.save_files(Path(output_dir or self.args.output_dir))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        weights = load_file(str(Path(resume_from_checkpoint) / WEIGHTS))
        (model or self.model).load_state_dict(weights, strict=True)
