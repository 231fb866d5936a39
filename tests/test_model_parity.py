"""Each part of the model against an independent plain-torch computation written here from SPEC
section 3 (never by calling the module under test), plus cache and batching consistency."""

from __future__ import annotations

import copy
import functools
import math

import pytest
import torch
import torch.nn.functional as F
from small_config import IMAGE, SMALL

from jina_ocr.remote_code.compat_jina_ocr import output_cache
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration, JinaOCRMoE


@pytest.fixture(scope="module")
def model() -> JinaOCRForConditionalGeneration:
    torch.manual_seed(0)
    m = JinaOCRForConditionalGeneration(JinaOCRConfig(**SMALL)).to(torch.float64).eval()
    with torch.no_grad():  # non-trivial values for the parameters initialised to constants
        for name, param in m.named_parameters():
            if "norm" in name or name.endswith("bias") or "rel_pos" in name or "pos_embed" in name:
                param.add_(torch.randn_like(param) * 0.1)
    return m


# ---- independent references ----------------------------------------------------------------------


def linear_resize_rows(table: torch.Tensor, rows: int) -> torch.Tensor:
    """Linear interpolation of a (L, C) table to ``rows`` rows, half-pixel centres (align_corners False)."""
    length = table.shape[0]
    if length == rows:
        return table
    out = []
    for i in range(rows):
        src = min(max((i + 0.5) * length / rows - 0.5, 0.0), length - 1)
        lo = int(math.floor(src))
        hi = min(lo + 1, length - 1)
        frac = src - lo
        out.append(table[lo] * (1 - frac) + table[hi] * frac)
    return torch.stack(out)


def ref_sam_attention(x, attn, heads):
    """x (H, W, C) of one window or one whole map."""
    height, width, dim = x.shape
    d = dim // heads
    qkv = x.reshape(-1, dim) @ attn.qkv.weight.T + attn.qkv.bias
    q, k, v = qkv.split(dim, dim=-1)
    table_h = linear_resize_rows(attn.rel_pos_h, 2 * height - 1)
    table_w = linear_resize_rows(attn.rel_pos_w, 2 * width - 1)
    rows = torch.arange(height * width) // width
    cols = torch.arange(height * width) % width
    out = []
    for h in range(heads):
        qh, kh, vh = (t[:, h * d : (h + 1) * d] for t in (q, k, v))
        rh = table_h[rows[:, None] - rows[None, :] + height - 1]  # (HW, HW, d)
        rw = table_w[cols[:, None] - cols[None, :] + width - 1]
        bias = torch.einsum("ad,abd->ab", qh, rh) + torch.einsum("ad,abd->ab", qh, rw)
        weights = (qh @ kh.T / math.sqrt(d) + bias).softmax(-1)
        out.append(weights @ vh)
    return (torch.cat(out, -1) @ attn.proj.weight.T + attn.proj.bias).reshape(height, width, dim)


def ref_sam_block(x, block, heads, window):
    """x (H, W, C) of one image."""
    eps = 1e-6
    y = F.layer_norm(x, x.shape[-1:], block.norm1.weight, block.norm1.bias, eps)
    if window:
        height, width, dim = y.shape
        ph, pw = -(-height // window) * window, -(-width // window) * window
        padded = torch.zeros(ph, pw, dim, dtype=y.dtype)
        padded[:height, :width] = y
        out = torch.zeros_like(padded)
        for r in range(0, ph, window):
            for c in range(0, pw, window):
                out[r : r + window, c : c + window] = ref_sam_attention(
                    padded[r : r + window, c : c + window], block.attn, heads
                )
        y = out[:height, :width]
    else:
        y = ref_sam_attention(y, block.attn, heads)
    x = x + y
    z = F.layer_norm(x, x.shape[-1:], block.norm2.weight, block.norm2.bias, eps)
    return (
        x
        + F.gelu(z @ block.mlp.lin1.weight.T + block.mlp.lin1.bias) @ block.mlp.lin2.weight.T
        + block.mlp.lin2.bias
    )


def ref_layernorm2d(x, norm):
    mean = x.mean(0, keepdim=True)
    var = ((x - mean) ** 2).mean(0, keepdim=True)
    return norm.weight[:, None, None] * (x - mean) / torch.sqrt(var + 1e-6) + norm.bias[:, None, None]


def ref_sam(image, sam, config):
    """image (3, S, S) -> (C, S/p, S/p), p the pixels per visual token."""
    x = F.conv2d(image[None], sam.patch_embed.proj.weight, sam.patch_embed.proj.bias, stride=16)[0]
    x = x.permute(1, 2, 0)
    grid = x.shape[0]
    pos = sam.pos_embed.permute(0, 3, 1, 2).float()
    if pos.shape[-1] != grid:
        pos = F.interpolate(pos, size=(grid, grid), mode="bicubic", antialias=True, align_corners=False)
    x = x + pos[0].permute(1, 2, 0).to(x.dtype)
    for n, block in enumerate(sam.blocks):
        window = 0 if n in config.sam_global_attn_indexes else config.sam_window_size
        x = ref_sam_block(x, block, config.sam_num_heads, window)
    x = x.permute(2, 0, 1)
    x = ref_layernorm2d(F.conv2d(x[None], sam.neck[0].weight)[0], sam.neck[1])
    x = ref_layernorm2d(F.conv2d(x[None], sam.neck[2].weight, padding=1)[0], sam.neck[3])
    x = F.conv2d(x[None], sam.net_2.weight, stride=2, padding=1)
    return F.conv2d(x, sam.net_3.weight, stride=2, padding=1)[0]


def ref_clip(sam_features, clip, config):
    """sam_features (C, h, w) -> (1 + h*w, C)."""
    dim, h, w = sam_features.shape
    tokens = sam_features.reshape(dim, -1).T
    table = clip.embeddings.position_embedding.weight
    side = config.clip_image_size // config.clip_patch_size
    grid = table[1:].T.reshape(1, dim, side, side).float()
    if (h, w) != (side, side):
        grid = F.interpolate(grid, size=(h, w), mode="bicubic", antialias=True, align_corners=False)
    pos = torch.cat([table[:1], grid[0].reshape(dim, -1).T.to(table.dtype)])
    x = torch.cat([clip.embeddings.class_embedding[None], tokens]) + pos
    x = F.layer_norm(x, (dim,), clip.pre_layrnorm.weight, clip.pre_layrnorm.bias, 1e-5)
    heads, d = config.clip_num_heads, dim // config.clip_num_heads
    for layer in clip.transformer.layers:
        y = F.layer_norm(x, (dim,), layer.layer_norm1.weight, layer.layer_norm1.bias, 1e-5)
        q, k, v = (y @ layer.self_attn.qkv_proj.weight.T + layer.self_attn.qkv_proj.bias).split(dim, -1)
        out = torch.cat(
            [
                ((q[:, i * d : (i + 1) * d] @ k[:, i * d : (i + 1) * d].T) / math.sqrt(d)).softmax(-1)
                @ v[:, i * d : (i + 1) * d]
                for i in range(heads)
            ],
            -1,
        )
        x = x + out @ layer.self_attn.out_proj.weight.T + layer.self_attn.out_proj.bias
        y = F.layer_norm(x, (dim,), layer.layer_norm2.weight, layer.layer_norm2.bias, 1e-5)
        y = y @ layer.mlp.fc1.weight.T + layer.mlp.fc1.bias
        x = x + (y * torch.sigmoid(1.702 * y)) @ layer.mlp.fc2.weight.T + layer.mlp.fc2.bias
    return x


def ref_swiglu_of(x, gate, up, down):
    """``down(silu(gate x) * up x)`` from the three weight matrices."""
    return (F.silu(x @ gate.T) * (x @ up.T)) @ down.T


def ref_swiglu(x, mlp):
    return ref_swiglu_of(x, mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight)


def ref_expert(x, experts, index):
    """Expert ``index`` of the fused layout: its gate rows, then its up rows, in ``gate_up_proj``."""
    gate, up = experts.gate_up_proj[index].split(experts.intermediate_size)
    return ref_swiglu_of(x, gate, up, experts.down_proj[index])


def ref_routed(x, router, expert, top_k, renormalise=False, scaling=1.0):
    """Token by token: softmax over all experts, the top-k probabilities as they are (DeepSeek-OCR) or
    divided by their sum (``norm_topk_prob``), times ``routed_scaling_factor``; ``expert(token, e)``
    computes expert ``e``."""
    out = []
    for token in x:
        probs = (token @ router.T).softmax(-1)
        chosen = sorted(range(len(probs)), key=lambda e: -float(probs[e].detach()))[:top_k]
        total = sum(probs[e] for e in chosen) if renormalise else 1.0
        out.append(sum(probs[e] / total * scaling * expert(token, e) for e in chosen))
    return torch.stack(out)


def ref_moe(x, moe, top_k, renormalise=False, scaling=1.0):
    """The routed experts of the fused layout plus the shared experts."""
    routed = ref_routed(
        x, moe.gate.weight, lambda token, e: ref_expert(token, moe.experts, e), top_k, renormalise, scaling
    )
    return routed + ref_swiglu(x, moe.shared_experts)


def ref_rmsnorm(x, norm):
    return norm.weight * x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-6)


def ref_rope(t, positions, theta):
    """Rotate-half rotary embedding over the full head dimension of ``t`` (L, d) at ``positions`` (L,)."""
    d = t.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = positions.to(torch.float64)[:, None] * inv_freq[None]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    return t * cos + torch.cat([-t[:, d // 2 :], t[:, : d // 2]], -1) * sin


def ref_attention(x, att, heads, positions, theta):
    """Causal multi-head attention over one sequence (L, hidden), keys and queries rotated at ``positions``."""
    length, hidden = x.shape
    d = hidden // heads
    q, k, v = (x @ p.weight.T for p in (att.q_proj, att.k_proj, att.v_proj))
    causal = torch.ones(length, length).tril().bool()
    outs = []
    for i in range(heads):
        part = slice(i * d, (i + 1) * d)
        qi, ki = ref_rope(q[:, part], positions, theta), ref_rope(k[:, part], positions, theta)
        scores = (qi @ ki.T / math.sqrt(d)).masked_fill(~causal, float("-inf"))
        outs.append(scores.softmax(-1) @ v[:, part])
    return torch.cat(outs, -1) @ att.o_proj.weight.T


def ref_decoder_layer(x, layer, config, positions, mlp):
    """Pre-norm layer: ``x + attn(norm x)``, then ``x + mlp(norm x)``; ``mlp`` is the layer's MLP reference."""
    heads = config.num_attention_heads
    x = x + ref_attention(
        ref_rmsnorm(x, layer.input_layernorm), layer.self_attn, heads, positions, config.rope_theta
    )
    return x + mlp(ref_rmsnorm(x, layer.post_attention_layernorm))


def ref_decoder_logits(model, embeds):
    """One sequence (L, hidden) through the decoder: causal MHA with rotate-half RoPE at 0..L-1."""
    config = model.config
    positions = torch.arange(embeds.shape[0])
    x = embeds
    for n, layer in enumerate(model.model.layers):
        if n:
            mlp = functools.partial(ref_moe, moe=layer.mlp, top_k=config.num_experts_per_tok)
        else:
            mlp = functools.partial(ref_swiglu, mlp=layer.mlp)
        x = ref_decoder_layer(x, layer, config, positions, mlp)
    return ref_rmsnorm(x, model.model.norm) @ model.lm_head.weight.T


# ---- tests -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [128, 192])  # the learned grid, and a grid that needs interpolation
def test_sam_encoder_matches_reference(model, size):
    torch.manual_seed(1)
    images = torch.randn(2, 3, size, size, dtype=torch.float64)
    with torch.no_grad():
        ours = model.model.sam_model(images)
        expected = torch.stack([ref_sam(img, model.model.sam_model, model.config) for img in images])
    side = size // model.config.pixels_per_visual_token
    assert ours.shape == (2, 16, side, side)
    torch.testing.assert_close(ours, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("grid", [4, 2])  # CLIP's learned 4 x 4 grid, and one that needs resizing
def test_clip_encoder_matches_reference(model, grid):
    torch.manual_seed(2)
    features = torch.randn(2, 16, grid, grid, dtype=torch.float64)
    with torch.no_grad():
        ours = model.model.vision_model(features)
        expected = torch.stack([ref_clip(f, model.model.vision_model, model.config) for f in features])
    torch.testing.assert_close(ours, expected, rtol=1e-9, atol=1e-9)


def test_moe_layer_matches_reference(model):
    torch.manual_seed(3)
    x = torch.randn(2, 9, 24, dtype=torch.float64)
    moe = model.model.layers[1].mlp
    with torch.no_grad():
        ours = moe(x)
        expected = ref_moe(x.reshape(-1, 24), moe, 3).reshape(2, 9, 24)
    torch.testing.assert_close(ours, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("renormalise", "scaling"), [(True, 1.0), (False, 2.5), (True, 0.4)])
def test_moe_routing_options_match_reference(renormalise, scaling):
    """DeepSeek-OCR leaves both options at their neutral values, so the layer above cannot tell whether
    they are honoured; other DeepSeek-V2 checkpoints set them."""
    config = JinaOCRConfig(**SMALL, norm_topk_prob=renormalise, routed_scaling_factor=scaling)
    torch.manual_seed(11)
    moe = JinaOCRMoE(config).to(torch.float64)
    with torch.no_grad():
        for param in moe.parameters():
            param.normal_(0.0, 0.5)  # the router starts at zero: make its choice matter
    x = torch.randn(2, 9, 24, dtype=torch.float64)
    with torch.no_grad():
        ours = moe(x)
        expected = ref_moe(x.reshape(-1, 24), moe, 3, renormalise, scaling).reshape(2, 9, 24)
        neutral = ref_moe(x.reshape(-1, 24), moe, 3)
    assert not torch.allclose(expected.reshape(-1, 24), neutral)  # the options change the output
    torch.testing.assert_close(ours, expected, rtol=1e-10, atol=1e-10)


def test_visual_sequence_layout(model):
    """Tiles as one big grid (tile k at column k % i, row k // i) with newlines, global, separator."""
    torch.manual_seed(4)
    cols, rows = 3, 2
    view, tile = (
        torch.randn(1, 3, 256, 256, dtype=torch.float64),
        torch.randn(6, 3, 128, 128, dtype=torch.float64),
    )
    with torch.no_grad():
        (sequence,) = model.model.get_image_features(view, tile, torch.tensor([[cols, rows]]))
        tiles = model.model.encode_views(tile)  # (6, 2*2, hidden)
        glob = model.model.encode_views(view)[0]  # (4*4, hidden)
    newline, sep = model.model.image_newline, model.model.view_seperator
    expected = []
    for big_row in range(rows * 2):
        for big_col in range(cols * 2):
            k = (big_row // 2) * cols + big_col // 2
            expected.append(tiles[k][(big_row % 2) * 2 + big_col % 2])
        expected.append(newline)
    for r in range(4):
        expected.extend(glob[r * 4 : (r + 1) * 4])
        expected.append(newline)
    expected.append(sep)
    assert sequence.shape[0] == 2 * rows * (2 * cols + 1) + 4 * 5 + 1
    torch.testing.assert_close(sequence, torch.stack(expected))


def prompt_with_image(count: int, prefix=(3, 4), suffix=(5, 6)) -> list[int]:
    return [*prefix, *([IMAGE] * count), *suffix]


def test_full_model_logits_match_reference_decoder(model):
    torch.manual_seed(5)
    view = torch.randn(1, 3, 128, 128, dtype=torch.float64)
    with torch.no_grad():
        (visual,) = model.model.get_image_features(view)
        ids = torch.tensor([prompt_with_image(visual.shape[0])])
        logits = model(input_ids=ids, pixel_values=view).logits[0]
        embeds = model.model.embed_tokens(ids[0]).clone()
        embeds[ids[0] == IMAGE] = visual
        expected = ref_decoder_logits(model, embeds)
    torch.testing.assert_close(logits, expected, rtol=1e-9, atol=1e-9)


def test_cached_incremental_decoding_matches_full_forward(model):
    torch.manual_seed(6)
    view = torch.randn(1, 3, 128, 128, dtype=torch.float64)
    with torch.no_grad():
        count = model.model.get_image_features(view)[0].shape[0]
        ids = torch.tensor([prompt_with_image(count) + [9, 11, 13, 17, 19]])
        full = model(input_ids=ids, pixel_values=view, use_cache=False).logits
        prompt_len = ids.shape[1] - 5
        out = model(input_ids=ids[:, :prompt_len], pixel_values=view, use_cache=True)
        steps = [out.logits[:, -1]]
        cache = output_cache(out)
        for t in range(prompt_len, ids.shape[1]):
            out = model(input_ids=ids[:, t : t + 1], pixel_values=view, cache=cache, use_cache=True)
            steps.append(out.logits[:, -1])
    torch.testing.assert_close(
        torch.stack(steps[:-1], 1), full[:, prompt_len - 1 : -1], rtol=1e-10, atol=1e-10
    )


def test_batch_of_pages_with_different_tile_counts_matches_each_page_alone(model):
    torch.manual_seed(7)
    page_a = dict(
        view=torch.randn(1, 3, 256, 256, dtype=torch.float64),
        tiles=torch.randn(2, 3, 128, 128, dtype=torch.float64),
        grid=[2, 1],
    )
    page_b = dict(
        view=torch.randn(1, 3, 256, 256, dtype=torch.float64),
        tiles=torch.zeros(0, 3, 128, 128, dtype=torch.float64),
        grid=[0, 0],
    )
    with torch.no_grad():
        counts = [
            model.model.get_image_features(p["view"], p["tiles"], torch.tensor([p["grid"]]))[0].shape[0]
            for p in (page_a, page_b)
        ]
    prompts = [prompt_with_image(counts[0]), prompt_with_image(counts[1], prefix=(3,), suffix=(5, 6, 8, 9))]
    alone = []
    for page, prompt in zip((page_a, page_b), prompts, strict=True):
        ids = torch.tensor([prompt])
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=page["view"],
            pixel_values_local=page["tiles"],
            image_grids=torch.tensor([page["grid"]]),
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=2,
            eos_token_id=1,
        )
        alone.append(out[0, ids.shape[1] :].tolist())
    width = max(map(len, prompts))
    ids = torch.tensor([[2] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        pixel_values=torch.cat([page_a["view"], page_b["view"]]),
        pixel_values_local=torch.cat([page_a["tiles"], page_b["tiles"]]),
        image_grids=torch.tensor([page_a["grid"], page_b["grid"]]),
        max_new_tokens=6,
        do_sample=False,
        pad_token_id=2,
        eos_token_id=1,
    )
    assert [row[width:].tolist() for row in out] == alone


def test_whole_model_in_float32_matches_float64(model):
    """The same weights in float32 give the float64 logits up to float32 rounding, for a prompt with
    a tiled image (SAM, CLIP, projector, MoE decoder) and for the FastMTP head."""
    torch.manual_seed(9)
    view = torch.randn(1, 3, 128, 128, dtype=torch.float64)
    tiles = torch.randn(2, 3, 128, 128, dtype=torch.float64)
    grids = torch.tensor([[2, 1]])
    single = copy.deepcopy(model).to(torch.float32)
    with torch.no_grad():
        count = model.model.get_image_features(view, tiles, grids)[0].shape[0]
        ids = torch.tensor([prompt_with_image(count) + [9, 11, 13]])
        results = []
        for m, dtype in ((model, torch.float64), (single, torch.float32)):
            out = m(input_ids=ids, pixel_values=view.to(dtype), pixel_values_local=tiles.to(dtype),
                    image_grids=grids)  # fmt: skip
            hidden = out.last_hidden_state
            head = m.mtp_module.heads[0](
                m.get_input_embeddings()(ids[:, 1:]), hidden[:, :-1], torch.arange(ids.shape[1] - 1)[None]
            )
            results.append((out.logits, m.logits(m.model.norm(head))))
    (logits64, head64), (logits32, head32) = results
    assert logits32.dtype == head32.dtype == torch.float32
    scale = float(logits64.abs().max())
    torch.testing.assert_close(logits32.double(), logits64, rtol=0, atol=1e-5 * scale)
    torch.testing.assert_close(head32.double(), head64, rtol=0, atol=1e-5 * float(head64.abs().max()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_model_runs_in_each_supported_dtype(dtype):
    torch.manual_seed(8)
    model = JinaOCRForConditionalGeneration(JinaOCRConfig(**SMALL)).to(dtype).eval()
    view = torch.randn(1, 3, 128, 128)
    count = 2 * 3 + 1
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt_with_image(count)]), pixel_values=view)
    assert out.logits.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert torch.isfinite(out.logits).all()


def test_wrong_placeholder_count_and_pixel_dtype_are_clear_errors(model):
    view = torch.randn(1, 3, 128, 128, dtype=torch.float64)
    with pytest.raises(ValueError, match="holds 5 image placeholder tokens but the images give 7"):
        model(input_ids=torch.tensor([prompt_with_image(5)]), pixel_values=view)
    with pytest.raises(TypeError, match="floating-point"):
        model(
            input_ids=torch.tensor([prompt_with_image(7)]),
            pixel_values=torch.zeros(1, 3, 128, 128, dtype=torch.uint8),
        )
    with pytest.raises(ValueError, match="asks for 2 tiles but pixel_values_local holds 0"):
        model(
            input_ids=torch.tensor([prompt_with_image(7)]),
            pixel_values=view,
            image_grids=torch.tensor([[2, 1]]),
        )
