"""Decode-step and prefill time of the full-size decoder against its memory floor, interleaved, in one run:
each MoE dispatch in float32 (Transformers' grouped_mm kernel on the fused experts, the default; our
eager grouped dispatch; a per-expert Python loop, the reference code's way) and the first two in bfloat16,
all with the KV cache ``generate`` gives a plain decoding call (the growing cache), and the default
dispatch once more with the library's ``DynamicCache``, which copies the whole cache at every step;
then the bfloat16 weights quantised to int8 and int4 (:mod:`jina_ocr.quantization`: every decoder
linear layer, the fused experts and the LM head, computing in bfloat16 with PyTorch's CPU kernels).

    python benchmarks/decode.py [--prompt 512] [--steps 8] [--rounds 3] [--layers 12] [--threads N]
                                [--dtypes float32 bfloat16 int8 int4]

Random weights, batch 1. The vision encoders are left out (a decode step never runs them); the
precisions of ``--dtypes`` are held at once (about 12, 6, 3 and 1.6 GB for all 12 layers; the quantised
copies share the bfloat16 model's embedding and norms, and need it in ``--dtypes``; ``--layers`` keeps
the first N decoder layers, the dense one and N - 1 MoE layers, for a smaller machine). The memory floor
of a decode step is the number of bytes it must read (attention, dense and shared MLPs, the router, the
k selected experts of every MoE layer, the final norm and the LM head, plus the KV cache; quantised
weights with their scales) over the copy rate of a large tensor. The copy rate varies from run to run on a shared machine, so every round measures it
again right before its timings, and each row reports the median over rounds of (step / floor). A copy
writes every byte it reads, so a matrix-vector product can read faster than the copy rate: the last
columns compare each step with the tighter floor of the read rate of a sum over the same tensor.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import DynamicCache
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

from jina_ocr.quantization import Quantization, quantize_model
from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
from jina_ocr.remote_code.generation.growing_cache import growing_cache
from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRExperts, JinaOCRForConditionalGeneration, JinaOCRMoE


def per_expert_loop(
    self: JinaOCRExperts, x: torch.Tensor, experts: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """The reference implementation's dispatch: visit every expert, gather its tokens, scatter back."""
    out = torch.zeros(x.shape, dtype=weights.dtype)
    for expert in range(self.num_experts):
        token, slot = torch.where(experts == expert)
        if token.numel():
            y = self.expert(expert, x[token]).to(weights.dtype)
            out.index_add_(0, token, y * weights[token, slot, None])
    return out.to(x.dtype)


ALL_EXPERTS_FUNCTIONS.register("per_expert_loop", per_expert_loop)

PRECISIONS = ("float32", "bfloat16", "int8", "int4")
VARIANTS = (  # (name, precision, experts implementation, empty cache)
    ("grouped_mm kernel", "float32", "grouped_mm", growing_cache),
    ("eager grouped dispatch", "float32", "eager", growing_cache),
    ("per-expert Python loop", "float32", "per_expert_loop", growing_cache),
    ("grouped_mm, DynamicCache", "float32", "grouped_mm", DynamicCache),
    ("grouped_mm kernel", "bfloat16", "grouped_mm", growing_cache),
    ("eager grouped dispatch", "bfloat16", "eager", growing_cache),
    # quantised experts always run the grouped dispatch, with the CPU's int8 / int4 kernels per expert
    ("grouped dispatch, int8 mm", "int8", "grouped_mm", growing_cache),
    ("grouped dispatch, int4 mm", "int4", "grouped_mm", growing_cache),
)


def build_model(config: JinaOCRConfig, dtype: torch.dtype) -> JinaOCRForConditionalGeneration:
    """The decoder with random weights; the vision encoders are dropped before any memory is taken."""
    with torch.device("meta"):
        model = JinaOCRForConditionalGeneration(config)
    for name in ("sam_model", "vision_model", "projector"):
        delattr(model.model, name)
    model = model.to_empty(device="cpu").to(dtype).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.empty(param.shape).uniform_(-0.02, 0.02, generator=generator))
    return model


def quantized_copy(model: JinaOCRForConditionalGeneration, scheme: str) -> JinaOCRForConditionalGeneration:
    """``model`` with its decoder weights quantised, in a second model: the embedding, routers and norms
    are the same tensors as ``model``'s (nothing is copied but what is quantised)."""
    with torch.device("meta"):
        copy = JinaOCRForConditionalGeneration(model.config)
    for name in ("sam_model", "vision_model", "projector"):
        delattr(copy.model, name)
    copy.load_state_dict(model.state_dict(), assign=True)
    return quantize_model(copy, Quantization(scheme)).eval()


def _nbytes(module: torch.nn.Module) -> int:
    return sum(t.nbytes for t in [*module.parameters(), *module.buffers()])


def step_bytes(model: JinaOCRForConditionalGeneration, prompt: int) -> int:
    """Bytes of weights (quantised ones with their scales) and KV cache that one decode step reads."""
    config = model.config
    total = 0
    for layer in model.model.layers:
        total += (
            _nbytes(layer.self_attn)
            + _nbytes(layer.input_layernorm)
            + _nbytes(layer.post_attention_layernorm)
        )
        mlp = layer.mlp
        if isinstance(mlp, JinaOCRMoE):
            per_expert = _nbytes(mlp.experts) // mlp.experts.num_experts
            total += _nbytes(mlp.gate) + _nbytes(mlp.shared_experts) + config.num_experts_per_tok * per_expert
        else:
            total += _nbytes(mlp)
    activations = model.model.norm.weight.element_size()  # the embedding may be stored in int8
    total += _nbytes(model.model.norm) + _nbytes(model.lm_head) + config.hidden_size * activations
    layers = len(model.model.layers)
    kv = 2 * layers * prompt * config.num_key_value_heads * config.decoder_head_dim
    return total + kv * activations


def stream_rates(megabytes: int = 1024, repeats: int = 5) -> tuple[float, float]:
    """(copy rate, read rate) in bytes of the source per second, best of ``repeats``: a copy also
    writes what it reads, so the copy rate undercounts the traffic; a sum only reads."""
    src = torch.ones(megabytes * 2**20 // 4)
    dst = torch.empty_like(src)
    rates = []
    for operation in (lambda: dst.copy_(src), src.sum):
        operation()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            operation()
            best = min(best, time.perf_counter() - start)
        rates.append(src.numel() * 4 / best)
    return rates[0], rates[1]


def time_decoder(model, ids: torch.Tensor, steps: int, cache) -> tuple[float, float]:
    """(median decode-step seconds, prefill seconds) for the prompt ``ids``, starting from the empty ``cache``."""
    prompt = ids.shape[1]
    with torch.no_grad():
        model(input_ids=ids[:, :16])  # warm-up
        start = time.perf_counter()
        out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        prefill = time.perf_counter() - start
        token = out.logits[:, -1:].argmax(-1)
        mask = torch.ones(1, prompt + 1, dtype=torch.long)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            out = model(input_ids=token, cache=cache, attention_mask=mask, use_cache=True)
            times.append(time.perf_counter() - start)
            token = out.logits[:, -1:].argmax(-1)
            mask = torch.cat([mask, mask[:, :1]], dim=1)
    return statistics.median(times), prefill


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=12, help="decoder layers kept (12 is the full model)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument(
        "--dtypes", nargs="+", choices=PRECISIONS, default=list(PRECISIONS), help="precisions to time"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if {"int8", "int4"} & set(args.dtypes) and "bfloat16" not in args.dtypes:
        parser.error("int8 and int4 are quantised from the bfloat16 model: add bfloat16 to --dtypes")

    config = JinaOCRConfig(num_nextn_predict_layers=0, num_hidden_layers=args.layers)
    models = {}
    for precision in sorted(args.dtypes, key=PRECISIONS.index):  # the float models first
        if precision in ("int8", "int4"):
            models[precision] = quantized_copy(models["bfloat16"], precision)
        else:
            models[precision] = build_model(config, getattr(torch, precision))
    ids = torch.randint(0, config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    variants = [variant for variant in VARIANTS if variant[1] in models]
    results = {variant[:2]: [] for variant in variants}
    copy_rates, read_rates = [], []
    for _ in range(args.rounds):
        for name, precision, implementation, empty_cache in variants:
            model = models[precision]
            model.set_experts_implementation(implementation)
            copy_rate, read_rate = stream_rates()  # right before the timings they are compared with
            copy_rates.append(copy_rate)
            read_rates.append(read_rate)
            step, prefill = time_decoder(model, ids, args.steps, empty_cache())
            size = step_bytes(model, args.prompt)
            results[(name, precision)].append((step, prefill, size / copy_rate, size / read_rate))

    print(
        f"decoder with {args.layers} of 12 layers, batch 1, {args.threads} threads, prompt {args.prompt} tokens, "
        f"{args.rounds} interleaved rounds"
    )
    for precision, model in models.items():
        print(f"{precision} decode step reads {step_bytes(model, args.prompt) / 1e9:.2f} GB")
    for label, rates in (("copy", copy_rates), ("read", read_rates)):
        print(f"{label} rate {min(rates) / 1e9:.1f}-{max(rates) / 1e9:.1f} GB/s over the rounds")
    header = (
        f"{'MoE dispatch':<26}{'dtype':>9}{'step ms':>9}{'floor ms':>10}{'x floor':>9}{'prefill s':>11}"
        f"{'read floor ms':>15}{'x read floor':>14}"
    )
    print(header)
    print("-" * len(header))
    for (name, precision), runs in results.items():
        step = statistics.median(r[0] for r in runs)
        prefill = statistics.median(r[1] for r in runs)
        floor, read_floor = (statistics.median(r[k] for r in runs) for k in (2, 3))
        ratio, read_ratio = (statistics.median(r[0] / r[k] for r in runs) for k in (2, 3))
        print(
            f"{name:<26}{precision:>9}{step * 1e3:>9.1f}{floor * 1e3:>10.1f}{ratio:>9.2f}{prefill:>11.2f}"
            f"{read_floor * 1e3:>15.1f}{read_ratio:>14.2f}"
        )
    if ("grouped_mm kernel", "bfloat16") in results:
        bf16 = statistics.median(r[0] for r in results[("grouped_mm kernel", "bfloat16")])
        for name, precision, *_ in variants:
            if precision in ("int8", "int4"):
                step = statistics.median(r[0] for r in results[(name, precision)])
                print(f"{precision} decode step: {bf16 / step:.2f}x as fast as bfloat16 (grouped_mm kernel)")


if __name__ == "__main__":
    main()
