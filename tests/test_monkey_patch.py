"""Hugging Face integration: apply_liger_kernel_to_* (class level and instance), revert,
AutoLigerKernelForCausalLM. Tiny random fp32 models on CPU; plain HF vs patched must agree."""

import importlib
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from torch import nn  # noqa: E402

import liger_cpp.transformers as lt  # noqa: E402
from liger_cpp.transformers import monkey_patch as mp  # noqa: E402

MODEL_TYPES = sorted(lt.MODEL_TYPE_TO_APPLY_LIGER_FN)
OFF = {"rope": False, "cross_entropy": False, "fused_linear_cross_entropy": False}
TOL = {"rtol": 1e-5, "atol": 1e-5}


def tiny_config(model_type):
    kw = dict(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    if model_type == "mixtral":
        kw.update(num_local_experts=4, num_experts_per_tok=2, experts_implementation="eager")
    return transformers.CONFIG_MAPPING[model_type](**kw)


def build(model_type, seed=0):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(model_type))
    with torch.no_grad():  # non-trivial norm weights (Gemma's start at zero, Llama's at one)
        g = torch.Generator().manual_seed(seed + 1)
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model.float().train()


def run(model):
    torch.manual_seed(123)
    ids = torch.randint(3, 96, (2, 9))
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), out.loss.detach(), grads


def assert_same(ref, got):
    (l0, s0, g0), (l1, s1, g1) = ref, got
    torch.testing.assert_close(l1, l0, **TOL)
    torch.testing.assert_close(s1, s0, **TOL)
    assert g0.keys() == g1.keys() and len(g0) > 0
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], **TOL, msg=lambda m, n=n: f"grad of {n}: {m}")


def liger_counts(model):
    norms = sum(isinstance(m, lt.LigerRMSNorm) for m in model.modules())
    mlps = sum(
        isinstance(
            m, (lt.LigerSwiGLUMLP, lt.LigerPhi3SwiGLUMLP, lt.LigerGEGLUMLP, lt.LigerExpertsSwiGLUMixin)
        )
        for m in model.modules()
    )
    hf_norms = sum(
        type(m).__name__.endswith("RMSNorm") and not isinstance(m, lt.LigerRMSNorm) for m in model.modules()
    )
    return norms, mlps, hf_norms


def expected_norms(model_type):
    spec = mp._SPECS[model_type]
    return 2 * (len(spec.norm_attrs) + len(spec.attn_norm_attrs)) + 1


@pytest.fixture(autouse=True)
def _reverted():
    mp.revert_liger_kernel()
    yield
    mp.revert_liger_kernel()


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_class_level_matches_hf(model_type):
    ref_model = build(model_type)
    assert liger_counts(ref_model)[:2] == (0, 0)
    ref = run(ref_model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lt.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](**OFF)
    model = build(model_type)
    assert liger_counts(model) == (expected_norms(model_type), 2, 0)
    if model_type.startswith("gemma"):
        norm = model.model.norm
        assert (norm.offset, norm.casting_mode) == (1.0, "gemma")
        assert norm.in_place is False or model_type == "gemma"
    elif model_type == "llama":
        assert model.model.norm.casting_mode == "llama"
    model.load_state_dict(ref_model.state_dict())
    assert_same(ref, run(model))


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_instance_patching_matches_hf_and_keeps_parameters(model_type):
    ref_model = build(model_type)
    ref = run(ref_model)
    model = build(model_type)
    params = dict(model.named_parameters())
    lt._apply_liger_kernel_to_instance(model, **OFF)
    assert liger_counts(model) == (expected_norms(model_type), 2, 0)
    after = dict(model.named_parameters())
    assert after.keys() == params.keys() and all(after[n] is params[n] for n in params)
    assert_same(ref, run(model))
    # idempotent
    lt._apply_liger_kernel_to_instance(model, **OFF)
    assert all(p is params[n] for n, p in model.named_parameters())


def test_partial_flags():
    model = build("llama")
    lt.apply_liger_kernel_to_llama(model=model, swiglu=False, **OFF)
    assert liger_counts(model) == (5, 0, 0)
    assert type(model.model.layers[0].mlp).__name__ == "LlamaMLP"


def test_unavailable_kernels_warn_and_keep_hf():
    model = build("llama")
    with pytest.warns(UserWarning, match=r"rope, fused_linear_cross_entropy.*kept \(not patched\)"):
        lt.apply_liger_kernel_to_llama(model=model)
    assert type(model.model.rotary_emb).__name__ == "LlamaRotaryEmbedding"
    with pytest.warns(UserWarning, match="cross_entropy"):
        lt.apply_liger_kernel_to_granite(rope=False, rms_norm=False, swiglu=False)  # CE on by default
    with pytest.raises(ValueError, match="cannot both be True"):
        lt.apply_liger_kernel_to_qwen2(cross_entropy=True, fused_linear_cross_entropy=True)


def test_bad_flags_are_type_errors():
    with pytest.raises(TypeError, match="swigluu"):
        lt.apply_liger_kernel_to_llama(swigluu=True)
    with pytest.raises(TypeError, match="swiglu"):
        lt._apply_liger_kernel("gemma", swiglu=True)  # Gemma takes geglu
    with pytest.raises(TypeError, match="nope"):
        lt._apply_liger_kernel_to_instance(build("qwen2"), nope=1)
    assert importlib.import_module(mp._SPECS["gemma"].module).GemmaMLP.__name__ == "GemmaMLP"


def test_wrong_model_is_a_clear_error_and_not_half_patched():
    with pytest.raises(ValueError, match="expected a transformers llama model"):
        lt.apply_liger_kernel_to_llama(model=nn.Linear(4, 4), **OFF)
    model = build("llama")
    model.model.layers[1].mlp = nn.Identity()
    with pytest.raises(ValueError, match=r"layers\[1\]\.mlp"):
        lt.apply_liger_kernel_to_llama(model=model, **OFF)
    assert liger_counts(model)[:2] == (0, 0)
    model = build("llama")
    model.config.hidden_act = "gelu"
    with pytest.raises(ValueError, match="SwiGLU"):
        lt.apply_liger_kernel_to_llama(model=model, **OFF)
    assert liger_counts(model)[:2] == (0, 0)


def test_revert():
    mod = importlib.import_module(mp._SPECS["qwen3"].module)
    orig_norm, orig_mlp = mod.Qwen3RMSNorm, mod.Qwen3MLP
    lt.apply_liger_kernel_to_qwen3(**OFF)
    assert mod.Qwen3RMSNorm is lt.LigerRMSNorm and mod.Qwen3MLP is lt.LigerSwiGLUMLP
    lt.apply_liger_kernel_to_qwen3(**OFF)  # twice: revert still finds the HF originals
    lt.revert_liger_kernel("qwen3")
    assert mod.Qwen3RMSNorm is orig_norm and mod.Qwen3MLP is orig_mlp
    assert liger_counts(build("qwen3"))[:2] == (0, 0)
    assert torch.nn.functional.silu.__module__ == "torch.nn.functional"


def test_unsupported_model_type_warns():
    with pytest.warns(UserWarning, match="no Liger kernels"):
        lt._apply_liger_kernel("gpt2")


def test_auto_model_from_config_and_pretrained(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model = lt.AutoLigerKernelForCausalLM.from_config(tiny_config("mistral"), **OFF)
    assert liger_counts(model) == (5, 2, 0)
    assert importlib.import_module(mp._SPECS["mistral"].module).MistralMLP.__name__ == "MistralMLP"
    build("qwen2").save_pretrained(tmp_path)
    model = lt.AutoLigerKernelForCausalLM.from_pretrained(tmp_path, swiglu=False, **OFF)
    assert liger_counts(model)[:2] == (5, 0)
    gpt2 = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=96, n_positions=32)
    with pytest.warns(UserWarning, match="unpatched"):
        model = lt.AutoLigerKernelForCausalLM.from_config(gpt2)
    assert isinstance(model, transformers.GPT2LMHeadModel)
