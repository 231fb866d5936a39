"""``jina-ocr train graft RUN DONOR``: put another run's vision towers and glyph head into a run.

Towers trained alone on the glyph loss (``train sft DONOR --init RUN/model --towers-first 0.99``) cost
about half of a whole-model step, so they can get ahead of the towers inside a run; a run whose decoder
has to learn new features anyway (after a change of the training pages, for instance) then goes on from
the better towers. The graft replaces, in RUN's checkpoint and model files, the parameters of SAM, CLIP
and the projector, the training-only glyph head and their optimizer moments with DONOR's; RUN's decoder,
its moments and its progress stay. ``train sft RUN`` goes on from there, and RUN's log records the graft,
so the run's history says where its towers came from.
"""

from __future__ import annotations

import json
from pathlib import Path

from jina_ocr.errors import UserError
from jina_ocr.model_files import load_model_files, load_settings, save_model_files
from jina_ocr.train.sft import CHECKPOINT, LOG, moments_by_name, read_checkpoint, write_checkpoint
from jina_ocr.train.vision import VISION_MODULES

GLYPH_HEAD = "glyph_head."


def _checkpoint(run: Path) -> dict:
    if not (run / CHECKPOINT).is_file():
        raise UserError(f"{run}: no {CHECKPOINT} there; give the folder of a train sft run")
    return read_checkpoint(run)


def graft(run: Path, donor: Path) -> dict:
    """Put ``donor``'s towers, glyph head and their moments into ``run``; returns the logged record."""
    run, donor = Path(run), Path(donor)
    state, given = _checkpoint(run), _checkpoint(donor)
    prefixes = tuple(f"model.{module}." for module in VISION_MODULES)
    towers = [key for key in state["model"] if key.startswith(prefixes)]
    parts = [(state["model"], given["model"], key) for key in towers]
    parts += [(state["glyph_head"], given["glyph_head"], key) for key in state["glyph_head"]]
    for ours, theirs, key in parts:
        if key not in theirs or theirs[key].shape != ours[key].shape:
            raise UserError(f"{donor}: its towers do not fit {run}'s model ({key} differs); nothing changed")
        ours[key] = theirs[key]

    grafted = {*towers, *(GLYPH_HEAD + key for key in state["glyph_head"])}
    moments = moments_by_name(given["optimizer"])
    for group in state["optimizer"]["param_groups"]:
        for name, index in zip(group["names"], group["params"], strict=True):
            if name in grafted and name in moments:
                state["optimizer"]["state"][index] = moments[name]

    model, processor = load_model_files(run / "model", weights=False)
    model.load_state_dict(state["model"])
    save_model_files(run / "model", model, processor.tokenizer, load_settings(run / "model"))
    write_checkpoint(run, state)
    record = {
        "step": state["progress"]["step"],
        "grafted_towers_from": str(donor),
        "donor_step": given["progress"]["step"],
    }
    with (run / LOG).open("a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")
    return record
