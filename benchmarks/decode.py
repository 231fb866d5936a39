"""Decode-step and prefill time of the full-size decoder: our grouped MoE dispatch against a per-expert
Python loop (the reference code's way), and the memory floor of a decode step, in one run.

    python benchmarks/decode.py [--prompt 512] [--steps 8] [--threads N]

Random weights, float32, batch 1 (the full model takes about 13 GB). The memory floor is the number of
weight bytes one decode step must read (attention, dense and shared MLPs, the router, the k selected
experts of every MoE layer, the final norm and the LM head, plus the KV cache) divided by the copy rate
of a large tensor measured in the same run.
"""

from __future__ import annotations

import argparse
import time

import torch

from jina_ocr.remote_code.compat_jina_ocr import output_cache
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRForConditionalGeneration, JinaOCRMoE


def per_expert_loop(
    self: JinaOCRMoE, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor
) -> torch.Tensor:
    """The reference implementation's dispatch: visit every expert, gather its tokens, scatter back."""
    out = torch.zeros(x.shape, dtype=weights.dtype)
    for expert in range(self.num_experts):
        token, slot = torch.where(experts == expert)
        if token.numel():
            y = self.experts[expert](x[token]).to(weights.dtype)
            out.index_add_(0, token, y * weights[token, slot, None])
    return out.to(x.dtype)


def build_model(config: JinaOCRConfig) -> JinaOCRForConditionalGeneration:
    with torch.device("meta"):
        model = JinaOCRForConditionalGeneration(config)
    model = model.to_empty(device="cpu").eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.uniform_(-0.02, 0.02, generator=generator)
    return model


def step_bytes(model: JinaOCRForConditionalGeneration, prompt: int) -> int:
    """Bytes of weights and KV cache that one decode step reads."""
    config = model.config
    size = 4  # float32
    total = 0
    for layer in model.model.layers:
        total += sum(p.numel() for p in layer.self_attn.parameters())
        total += layer.input_layernorm.weight.numel() + layer.post_attention_layernorm.weight.numel()
        mlp = layer.mlp
        if isinstance(mlp, JinaOCRMoE):
            total += mlp.gate.weight.numel() + sum(p.numel() for p in mlp.shared_experts.parameters())
            total += config.num_experts_per_tok * sum(p.numel() for p in mlp.experts[0].parameters())
        else:
            total += sum(p.numel() for p in mlp.parameters())
    total += model.model.norm.weight.numel() + model.lm_head.weight.numel() + config.hidden_size
    kv = 2 * config.num_hidden_layers * prompt * config.num_key_value_heads * config.decoder_head_dim
    return (total + kv) * size


def copy_rate(megabytes: int = 1024, repeats: int = 5) -> float:
    src = torch.ones(megabytes * 2**20 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return src.numel() * 4 / best


def time_decoder(model, prompt: int, steps: int) -> tuple[float, float]:
    ids = torch.randint(0, model.config.vocab_size, (1, prompt))
    with torch.no_grad():
        model(input_ids=ids[:, :16])  # warm-up
        start = time.perf_counter()
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        prefill = time.perf_counter() - start
        cache = output_cache(out)
        token = out.logits[:, -1:].argmax(-1)
        mask = torch.ones(1, prompt + 1, dtype=torch.long)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            out = model(input_ids=token, cache=cache, attention_mask=mask, use_cache=True)
            times.append(time.perf_counter() - start)
            token = out.logits[:, -1:].argmax(-1)
            mask = torch.cat([mask, mask[:, :1]], dim=1)
    times.sort()
    return times[len(times) // 2], prefill


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model = build_model(JinaOCRConfig(num_nextn_predict_layers=0))
    rate = copy_rate()
    floor = step_bytes(model, args.prompt) / rate
    rows = [("grouped dispatch (ours)", *time_decoder(model, args.prompt, args.steps))]
    original = JinaOCRMoE.dispatch
    JinaOCRMoE.dispatch = per_expert_loop
    try:
        rows.append(("per-expert Python loop", *time_decoder(model, args.prompt, args.steps)))
    finally:
        JinaOCRMoE.dispatch = original

    print(f"full-size decoder, float32, batch 1, {args.threads} threads, prompt {args.prompt} tokens")
    print(f"decode step reads {step_bytes(model, args.prompt) / 1e9:.2f} GB; copy rate {rate / 1e9:.1f} GB/s")
    print(f"{'MoE dispatch':<26}{'decode step ms':>16}{'x floor':>9}{'prefill s':>11}")
    print(f"{'memory floor':<26}{floor * 1e3:>16.1f}{1.0:>9.2f}{'':>11}")
    for name, step, prefill in rows:
        print(f"{name:<26}{step * 1e3:>16.1f}{step / floor:>9.2f}{prefill:>11.2f}")


if __name__ == "__main__":
    main()
