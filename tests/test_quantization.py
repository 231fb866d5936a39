"""Weight-only int8 / int4 (jina_ocr.quantization): every routed-expert tensor quantised, the vision side,
routers and norms untouched, logits close to the float model's, FastMTP equal to the quantised model's
own greedy decoding, a saved quantised model loading back as it was, and ``--quantize`` on the CLI."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from fastmtp_helpers import generate, page_batch, small_model
from small_config import SMALL

import jina_ocr
from jina_ocr import loading, quantization, quantized_weights
from jina_ocr.cli import main
from jina_ocr.commands._options import QUANTIZE_CHOICES
from jina_ocr.errors import UserError
from jina_ocr.model_files import save_model_files
from jina_ocr.quantization import Quantization, quantize_model
from jina_ocr.quantized_weights import (
    SCHEMES,
    QuantizedEmbedding,
    QuantizedExperts,
    QuantizedLinear,
    dequantize,
    pack_int4,
    quantize_weight,
    quantized_linear,
)
from jina_ocr.remote_code.generation.growing_cache import growing_cache

WIDE = {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 64}
"""SMALL with every decoder input width a multiple of int4's group of 64."""

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "sample.pdf"
STORED = {"int8": torch.int8, "int4": torch.uint8}


def float_and_quantized(scheme: str, dtype=torch.float32, seed: int = 0, **options):
    """The same small model twice: as built, and quantised."""
    original = small_model(seed=seed, dtype=dtype, **WIDE)
    copy = small_model(seed=seed, dtype=dtype, **WIDE)
    return original, quantize_model(copy, Quantization(scheme, **options))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_routed_expert_tensor_is_stored_quantized(scheme):
    _, model = float_and_quantized(scheme)
    moe_layers = [layer for layer in model.model.layers if hasattr(layer.mlp, "experts")]
    assert len(moe_layers) == SMALL["num_hidden_layers"] - 1
    for layer in moe_layers:
        experts = layer.mlp.experts
        assert list(experts.parameters()) == []  # nothing left as a float parameter
        tensors = dict(experts.named_buffers())
        values = {name: t for name, t in tensors.items() if not name.endswith("_scale")}
        assert set(values) == {"gate_up_proj", "down_proj"}
        for name, tensor in tensors.items():
            if name in values:
                assert tensor.dtype == STORED[scheme], name
                assert tensor.shape[0] == SMALL["n_routed_experts"]
            else:  # a scale: a float per row (int8) or per group of 64 inputs (int4), never a weight
                assert tensor.is_floating_point() and tensor.numel() * 16 <= tensors[name[:-6]].numel()
    assert quantization.unquantized_weights(model) == []


def test_experts_a_quantiser_does_not_recognise_are_refused(monkeypatch):
    """A quantiser that skips the fused experts (as nn.Linear-only quantisers do) fails, naming them."""
    monkeypatch.setattr(quantization, "_is_float_experts", lambda module: False)
    with pytest.raises(RuntimeError, match=r"model\.layers\.1\.mlp\.experts\.gate_up_proj"):
        quantize_model(small_model(**WIDE), Quantization("int8"))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_vision_projector_routers_and_norms_keep_their_dtype(scheme):
    original, model = float_and_quantized(scheme, dtype=torch.bfloat16)
    kept = ("sam_model.", "vision_model.", "projector.", "mlp.gate.", "norm.", "layernorm.")
    checked = 0
    for name, tensor in original.state_dict().items():
        if any(part in name for part in kept):
            assert torch.equal(model.state_dict()[name], tensor), name
            assert model.state_dict()[name].dtype == torch.bfloat16, name
            checked += 1
    assert checked > 50
    assert isinstance(model.lm_head, QuantizedLinear)
    assert isinstance(model.mtp_module.heads[0].eh_proj, QuantizedLinear)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_token_embedding_is_int8_rows_close_to_the_float_ones(scheme):
    """Whatever the scheme, the embedding is int8 with a scale per token: every row within half a step
    of its scale of the float row, and looked up in the model's dtype."""
    original, model = float_and_quantized(scheme, dtype=torch.bfloat16)
    embedding = model.get_input_embeddings()
    assert isinstance(embedding, QuantizedEmbedding) and embedding.weight.dtype == torch.int8
    ids = torch.tensor([[0, 3, 17, SMALL["vocab_size"] - 1]])
    looked_up, expected = embedding(ids), original.get_input_embeddings()(ids)
    assert looked_up.dtype == torch.bfloat16
    step = embedding.weight_scale[ids][..., None].float()
    assert ((looked_up.float() - expected.float()).abs() <= step * 0.51 + 1e-2 * expected.float().abs()).all()
    _, kept = float_and_quantized(scheme, embedding=False)
    assert isinstance(kept.get_input_embeddings(), torch.nn.Embedding)


def test_lm_head_and_fastmtp_head_can_stay_in_their_dtype():
    original, model = float_and_quantized("int4", lm_head=False, mtp_head=False)
    assert isinstance(model.lm_head, torch.nn.Linear)
    assert torch.equal(model.lm_head.weight, original.lm_head.weight)
    head = model.mtp_module.heads[0]
    assert isinstance(head.eh_proj, torch.nn.Linear) and isinstance(
        head.mtp_block.mlp.down_proj, torch.nn.Linear
    )
    assert isinstance(model.model.layers[1].mlp.experts, QuantizedExperts)


@pytest.mark.parametrize(("scheme", "tolerance"), [("int8", 0.02), ("int4", 0.2)])  # measured 0.009, 0.15
def test_quantized_logits_are_close_to_the_float_models(scheme, tolerance):
    original, model = float_and_quantized(scheme)
    inputs = page_batch(0, [128, 128], SMALL["vocab_size"], dtype=torch.float32)
    with torch.no_grad():
        expected = original(**inputs).logits
        got = model(**inputs).logits
    error = (got - expected).norm() / expected.norm()
    assert error < tolerance
    assert error > 0  # the weights really are rounded


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("rows", [1, 5])
def test_cpu_kernel_computes_what_the_stored_weight_stands_for(scheme, rows):
    """The CPU kernels (decode) and the widened weight (other devices) agree; int4's padded rows
    (40 -> 64) are dropped."""
    weight = torch.randn(40, 128, generator=torch.Generator().manual_seed(0))
    values, scales = quantize_weight(weight, scheme, torch.float32)
    x = torch.randn(rows, 128, generator=torch.Generator().manual_seed(1))
    widened = dequantize(values, scales, scheme, 40, torch.float32)
    torch.testing.assert_close(quantized_linear(x, values, scales, scheme, 40), x @ widened.T)
    # every weight is rounded to its nearest step: off by at most half a step (a scale) of its row / group
    if scheme == "int8":
        step = scales[:, None]
    else:
        step = scales[..., 0].T[:40].repeat_interleave(quantized_weights.INT4_GROUP, dim=1)
    assert ((widened - weight).abs() <= step / 2 * 1.001).all()


def test_int4_packing_is_the_cpu_kernels():
    q = torch.randint(0, 16, (128, 192), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    assert torch.equal(pack_int4(q.to(torch.uint8)), torch._convert_weight_to_int4pack_for_cpu(q, 1))
    assert torch.equal(quantized_weights.unpack_int4(pack_int4(q.to(torch.uint8))), q.to(torch.uint8))


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("batch", [1, 2])
def test_fastmtp_equals_the_quantized_models_greedy(scheme, batch):
    _, model = float_and_quantized(scheme, seed=2)
    for seed in range(2):
        inputs = page_batch(40 + seed, [128] * batch, SMALL["vocab_size"], dtype=torch.float32)
        greedy = generate(model, inputs, use_mtp=False, max_new_tokens=12)
        fast = generate(model, inputs, use_mtp=True, max_new_tokens=12)
        assert fast.tolist() == greedy.tolist()
        assert model.fastmtp_stats["verification_steps"] > 0


@pytest.mark.parametrize("scheme", [None, *SCHEMES])
def test_a_verification_forward_gives_each_position_its_one_token_steps_logits(scheme):
    """What makes FastMTP exact on a bfloat16 or quantised model, near-ties of the logits included: with
    ``step_exact`` a forward over several new positions (a verification) computes each as a one-token
    step would, bit for bit. (Without it the CPU attention kernel and the float32 router round a
    position differently beside others than alone.) float32 is out of reach: its CPU matmul rounds a
    row differently in a product of several rows, and every linear layer is one."""
    model = small_model(seed=3, dtype=torch.bfloat16, **WIDE)
    if scheme:
        model = quantize_model(model, Quantization(scheme))
    inputs = page_batch(7, [128, 128], SMALL["vocab_size"], dtype=torch.bfloat16)
    tokens = torch.randint(3, SMALL["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(0))

    def logits(widths: list[int]) -> torch.Tensor:
        """Logits of every new token, fed after the prompt in forwards of ``widths`` tokens each."""
        cache, mask, rows = growing_cache(), inputs["attention_mask"], []
        with torch.no_grad():
            model(**inputs, cache=cache, use_cache=True, logits_to_keep=1)
            for begin, width in zip(itertools.accumulate([0, *widths[:-1]]), widths, strict=True):
                mask = torch.cat([mask, torch.ones(2, width, dtype=mask.dtype)], dim=1)
                positions = mask.sum(1, keepdim=True) - width + torch.arange(width)
                out = model(
                    input_ids=tokens[:, begin : begin + width],
                    attention_mask=mask,
                    position_ids=positions,
                    cache=cache,
                    use_cache=True,
                    step_exact=True,
                )
                rows.append(out.logits)
        return torch.cat(rows, dim=1)

    assert torch.equal(logits([4, 3, 4, 1]), logits([1] * 12))


def test_a_verification_forward_routes_each_position_as_its_one_token_step():
    """The router's float32 matmul at jina-ocr-v1's width (1280) rounds a row differently beside others
    than alone, which the small model's width does not show: the MoE layer alone at that width, its
    routing weights and output for four positions of one sequence against four one-token steps."""
    from jina_ocr.remote_code.configuration_jina_ocr import JinaOCRConfig
    from jina_ocr.remote_code.modeling_jina_ocr import JinaOCRMoE

    torch.manual_seed(0)
    moe = JinaOCRMoE(JinaOCRConfig(**{**SMALL, "hidden_size": 1280, "n_routed_experts": 64})).bfloat16()
    torch.nn.init.normal_(moe.gate.weight, std=0.02)
    x = torch.randn(1, 4, 1280, dtype=torch.bfloat16)
    routes = []
    moe.gate.register_forward_hook(lambda module, args, out: routes.append(out[0]))
    with torch.no_grad():
        steps = torch.cat([moe(x[:, j : j + 1]) for j in range(4)], dim=1)
        verified = moe(x, step_exact=True)
    assert torch.equal(verified, steps)
    assert torch.equal(torch.cat(routes[4:]), torch.cat(routes[:4]))


@pytest.fixture(scope="module")
def saved_int8(tmp_path_factory):
    """The bundled model quantised to int8 and saved as model files, with the model that was saved."""
    loading._load.cache_clear()
    model, processor = jina_ocr.load(None, device="cpu", quantize="int8")
    folder = tmp_path_factory.mktemp("quantized") / "jina-ocr-tiny-int8"
    save_model_files(folder, model, processor.tokenizer, {"processor_mode": processor.image_processor.mode})
    loading._load.cache_clear()
    return folder, model


def test_a_saved_quantized_model_loads_back_as_it_was_without_requantizing(saved_int8, monkeypatch):
    folder, saved = saved_int8

    def no_quantizing(*args, **kwargs):
        raise AssertionError("a saved quantised model must load without quantising again")

    monkeypatch.setattr(quantized_weights, "quantize_weight", no_quantizing)
    loading._load.cache_clear()
    model, _ = jina_ocr.load(folder, device="cpu")
    assert model.quantization == Quantization("int8") and model.dtype == torch.bfloat16
    expected = saved.state_dict()
    assert model.state_dict().keys() == expected.keys()
    for name, tensor in model.state_dict().items():
        assert tensor.dtype == expected[name].dtype and torch.equal(tensor, expected[name]), name
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, saved(input_ids=ids).logits)
    loading._load.cache_clear()


def test_int4_saved_on_a_cpu_of_the_other_layout_loads_as_it_was(tmp_path):
    """The int4 kernel packs rows in blocks of 64 on AVX-512 machines and of 32 on AVX2 ones: a model
    saved on one and loaded on the other has its values repacked, and computes the same logits."""
    import json

    from safetensors.torch import load_file, save_file

    model, processor = jina_ocr.load(None, device="cpu", quantize="int4")
    folder = tmp_path / "int4"
    save_model_files(folder, model, processor.tokenizer, {"processor_mode": processor.image_processor.mode})
    here = quantized_weights.int4_rows()
    other = 64 if here == 32 else 32
    settings = json.loads((folder / "jina_ocr_model.json").read_text())
    assert settings["quantization"]["int4_rows"] == here
    state = load_file(folder / "model.safetensors")
    names = quantization._int4_values(model)
    assert names and all(name in state for name in names)
    for name in names:  # as the other machine would have written them
        flat = state[name].reshape(-1, state[name].shape[-1])
        state[name] = pack_int4(quantized_weights.unpack_int4(flat), other).view(state[name].shape)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    settings["quantization"]["int4_rows"] = other
    (folder / "jina_ocr_model.json").write_text(json.dumps(settings))
    loading._load.cache_clear()
    loaded, _ = jina_ocr.load(folder, device="cpu")
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    loading._load.cache_clear()


def test_settings_of_models_saved_before_the_embedding_was_quantised_read_as_such():
    old = {"scheme": "int4", "lm_head": True, "mtp_head": True, "int4_rows": 64}
    assert Quantization.from_settings(old) == Quantization("int4", embedding=False)
    assert Quantization.from_settings(Quantization("int8").settings()) == Quantization("int8")


def test_a_saved_quantized_model_refuses_another_scheme(saved_int8):
    folder, _ = saved_int8
    with pytest.raises(UserError, match="saved quantised in int8: load it without --quantize or with int8"):
        jina_ocr.load(folder, device="cpu", quantize="int4")


def test_unknown_quantization_is_one_line():
    with pytest.raises(UserError, match=r"^unknown quantisation 'int3': choose one of int8, int4$"):
        jina_ocr.load(None, quantize="int3")
    assert QUANTIZE_CHOICES == SCHEMES  # the CLI's choices, written out so that --help needs no torch


@pytest.mark.parametrize("command", [["convert", str(SAMPLE)], ["serve"]])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_cli_quantize_reaches_the_loader(command, scheme, monkeypatch, capsys):
    asked = []

    def loader(folder, device, dtype, quantization=None):
        asked.append((dtype, quantization))
        raise UserError("stopped after the loader was reached")

    monkeypatch.setattr(loading, "_load", loader)
    status = main([*command, "--quantize", scheme, "--device", "cpu"])
    assert status != 0 and capsys.readouterr().err.strip().endswith("stopped after the loader was reached")
    assert asked == [(torch.bfloat16, Quantization(scheme))]


@pytest.mark.parametrize("command", [["convert", str(SAMPLE)], ["serve"]])
def test_cli_refuses_an_unknown_quantization_in_one_line(command, capsys):
    with pytest.raises(SystemExit) as exit:
        main([*command, "--quantize", "int3"])
    assert exit.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (
        f"jina-ocr {command[0]}: error: argument --quantize: invalid choice: 'int3' (choose from 'int8', 'int4')"
    )


def test_the_python_conversion_takes_quantize_to_the_loader(monkeypatch):
    asked = []

    def loader(folder, device, dtype, quantization=None):
        asked.append((dtype, quantization))
        raise UserError("stopped after the loader was reached")

    monkeypatch.setattr(loading, "_load", loader)
    with pytest.raises(UserError, match="stopped after the loader was reached"):
        list(jina_ocr.convert(SAMPLE, device="cpu", quantize="int4"))
    assert asked == [(torch.bfloat16, Quantization("int4"))]
    with pytest.raises(UserError, match="quantize: set on the server, not with endpoint="):
        list(jina_ocr.convert(SAMPLE, endpoint="http://127.0.0.1:9/v1", quantize="int8"))
