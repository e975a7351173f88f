"""Hugging Face integration: apply_liger_kernel_to_* (class level and instance), revert,
AutoLigerKernelForCausalLM. Tiny random fp32 models on CPU; plain HF vs patched must agree (loss,
every parameter gradient, logits when they are materialised)."""

import importlib
import inspect
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_models import (  # noqa: E402
    MODEL_TYPES,
    batch,
    build,
    run,
    single_thread,  # noqa: E402,F401  (autouse fixture)
    tiny_config,
)
from torch import nn  # noqa: E402

import liger_cpp.transformers as lt  # noqa: E402
from liger_cpp.transformers import monkey_patch as mp  # noqa: E402
from liger_cpp.transformers.monkey_patch import instance, revert, specs  # noqa: E402

OFF = {"rope": False, "cross_entropy": False, "fused_linear_cross_entropy": False}
TOL = {"rtol": 1e-5, "atol": 1e-5}
LIGER_MLPS = (lt.LigerSwiGLUMLP, lt.LigerPhi3SwiGLUMLP, lt.LigerGEGLUMLP, lt.LigerExpertsSwiGLUMixin)


def assert_grads(g1, g0):
    assert g0.keys() == g1.keys() and len(g0) > 0
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], **TOL, msg=lambda m, n=n: f"grad of {n}: {m}")


def hf_module(model_type):
    return importlib.import_module(specs.SPECS[model_type].module)


def assert_patched(model, model_type, layer_norm=True):
    """Every RMSNorm / gated MLP (/ vision LayerNorm) of the model is liger_cpp's."""
    spec = specs.SPECS[model_type]
    hf_norm = revert.original(hf_module(model_type), spec.norm)
    mods = list(model.modules())
    assert not any(type(m) is hf_norm for m in mods)
    assert sum(isinstance(m, lt.LigerRMSNorm) for m in mods) >= 5
    _, layers = instance._text_model(model)
    for layer in layers:
        mlp = layer.mlp if isinstance(layer.mlp, LIGER_MLPS) else layer.mlp.experts
        assert isinstance(mlp, LIGER_MLPS), type(mlp)
    if spec.layer_norm and layer_norm:
        assert not any(type(m) is nn.LayerNorm for m in mods)
        assert any(isinstance(m, lt.LigerNNLayerNorm) for m in mods)


def assert_unpatched(model):
    assert not any(
        isinstance(m, (lt.LigerRMSNorm, lt.LigerNNLayerNorm, *LIGER_MLPS)) for m in model.modules()
    )
    assert "forward" not in vars(model)


def defaults(model_type):
    sig = inspect.signature(lt.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]).parameters
    return {k: p.default for k, p in sig.items() if k != "model"}


def results(model):
    """Loss, gradients and logits of a training step with labels; logits with skip_logits=False
    (HF: a plain training step) and of an eval step without labels."""
    ids, labels = batch()
    out, grads = run(model, ids, labels)
    kw = {"skip_logits": False} if hasattr(model.forward, "_liger_mode") else {}
    full = model(input_ids=ids, labels=labels, **kw)
    model.eval()
    with torch.no_grad():
        eval_logits = model(input_ids=ids).logits
    model.train()
    return dict(loss=out.loss, grads=grads, logits=out.logits, full=full.logits, eval=eval_logits)


def compare(got, ref, model_type):
    torch.testing.assert_close(got["loss"], ref["loss"], **TOL)
    assert_grads(got["grads"], ref["grads"])
    if defaults(model_type)["fused_linear_cross_entropy"]:
        assert got["logits"] is None  # FLCE: the [B, T, V] logits were never built
    else:
        torch.testing.assert_close(got["logits"], ref["logits"], **TOL)
    torch.testing.assert_close(got["full"], ref["full"], **TOL)
    torch.testing.assert_close(got["eval"], ref["eval"], **TOL)


@pytest.fixture(autouse=True)
def _reverted():
    mp.revert_liger_kernel()
    yield
    mp.revert_liger_kernel()


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_class_level_matches_hf(model_type):
    ref_model = build(model_type)
    assert_unpatched(ref_model)
    ref = results(ref_model)  # before patching: class-level patching changes built models' forward too
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lt.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]()  # Liger's defaults
    model = build(model_type)
    assert_patched(model, model_type)
    if model_type.startswith("gemma"):
        norm = instance._text_model(model)[0].norm
        assert (norm.offset, norm.casting_mode) == (1.0, "gemma")
        assert norm.in_place is False
    model.load_state_dict(ref_model.state_dict())
    compare(results(model), ref, model_type)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_instance_patching_matches_hf_keeps_parameters_and_reverts(model_type):
    ref_model = build(model_type)
    ref = results(ref_model)
    model = build(model_type)
    params = dict(model.named_parameters())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lt._apply_liger_kernel_to_instance(model)
    mp.revert_liger_kernel(model_type)  # RoPE is module-wide: test the instance patch alone
    assert_patched(model, model_type)
    assert "forward" in vars(model)
    assert all(p is params[n] for n, p in model.named_parameters()) and len(params) == len(
        dict(model.named_parameters())
    )
    lt._apply_liger_kernel_to_instance(model, rope=False)  # idempotent
    assert all(p is params[n] for n, p in model.named_parameters())
    compare(results(model), ref, model_type)
    mp.revert_liger_kernel(model=model)
    assert_unpatched(model)
    model.train(), ref_model.train()
    ids, labels = batch()
    torch.testing.assert_close(
        model(input_ids=ids, labels=labels).logits, ref_model(input_ids=ids, labels=labels).logits
    )


def test_partial_flags():
    model = build("llama")
    lt.apply_liger_kernel_to_llama(model=model, swiglu=False, **OFF)
    assert sum(isinstance(m, lt.LigerRMSNorm) for m in model.modules()) == 5
    assert type(model.model.layers[0].mlp).__name__ == "LlamaMLP"
    assert "forward" not in vars(model)
    lt.apply_liger_kernel_to_qwen2_vl(layer_norm=False, rms_norm=False, swiglu=False, **OFF)
    assert not any(isinstance(m, lt.LigerNNLayerNorm) for m in build("qwen2_vl").modules())


def test_flag_errors_change_nothing():
    with pytest.raises(ValueError, match="cannot both be True"):
        lt.apply_liger_kernel_to_qwen2(cross_entropy=True, fused_linear_cross_entropy=True)
    with pytest.raises(ValueError, match="cannot both be True"):
        lt.apply_liger_kernel_to_granite(fused_linear_cross_entropy=True)  # Liger's CE default is on
    with pytest.raises(NotImplementedError, match="interleaved"):
        lt.apply_liger_kernel_to_glm4(rope=True)
    model = build("glm4")
    with pytest.raises(NotImplementedError, match="rope=False"):
        lt.apply_liger_kernel_to_glm4(rope=True, model=model)
    assert not revert._ORIGINALS
    assert_unpatched(model)


def test_bad_flags_apply_strict_entry_points_lenient():
    """liger_cpp's apply functions reject an unknown flag; _apply_liger_kernel(_to_instance), which
    Hugging Face's Trainer calls with one config for every model type, drops the flags a model
    type's apply function does not take, with one warning naming them (as Liger-Kernel)."""
    with pytest.raises(TypeError, match="swigluu"):
        lt.apply_liger_kernel_to_llama(swigluu=True)
    with pytest.warns(UserWarning, match=r"\['swiglu'\] do not apply to model_type 'gemma'") as rec:
        lt._apply_liger_kernel("gemma", swiglu=True, geglu=False, **OFF)  # Gemma takes geglu
    assert len([w for w in rec if "do not apply" in str(w.message)]) == 1
    assert hf_module("gemma").GemmaMLP.__name__ == "GemmaMLP"  # geglu=False was applied
    assert hf_module("gemma").GemmaRMSNorm is lt.LigerRMSNormForGemma
    with pytest.warns(UserWarning, match=r"\['layer_norm', 'nope'\]"):
        lt._apply_liger_kernel("qwen2_5_vl", layer_norm=True, nope=1, **OFF)  # no LayerNorm in Qwen2.5-VL
    model = build("qwen2")
    with pytest.warns(UserWarning, match=r"\['nope'\] do not apply"):
        lt._apply_liger_kernel_to_instance(model, nope=1, rope=False)
    assert_patched(model, "qwen2")


def test_wrong_model_is_a_clear_error_and_not_half_patched():
    with pytest.raises(ValueError, match="expected a transformers llama model"):
        lt.apply_liger_kernel_to_llama(model=nn.Linear(4, 4), **OFF)
    model = build("llama")
    model.model.layers[1].mlp = nn.Identity()
    with pytest.raises(ValueError, match=r"layers\[1\]\.mlp"):
        lt.apply_liger_kernel_to_llama(model=model)
    assert_unpatched(model)
    model = build("llama")
    model.config.hidden_act = "gelu"
    with pytest.raises(ValueError, match="SwiGLU"):
        lt.apply_liger_kernel_to_llama(model=model)
    assert_unpatched(model)


def test_revert_restores_everything():
    mod = hf_module("qwen3")
    originals = {n: vars(mod)[n] for n in ("Qwen3RMSNorm", "Qwen3MLP", "apply_rotary_pos_emb")}
    forward = mod.Qwen3ForCausalLM.forward
    lt.apply_liger_kernel_to_qwen3()
    assert mod.Qwen3RMSNorm is lt.LigerRMSNorm and mod.Qwen3MLP is lt.LigerSwiGLUMLP
    assert mod.apply_rotary_pos_emb is lt.liger_rotary_pos_emb
    assert mod.Qwen3ForCausalLM.forward._liger_mode == "flce"
    lt.apply_liger_kernel_to_qwen3(fused_linear_cross_entropy=False, cross_entropy=True)  # again: CE mode
    assert mod.Qwen3ForCausalLM.forward._liger_mode == "ce"
    assert mod.Qwen3ForCausalLM.forward._liger_original is forward
    lt.apply_liger_kernel_to_llama()
    lt.revert_liger_kernel("qwen3")
    assert {n: vars(mod)[n] for n in originals} == originals
    assert mod.Qwen3ForCausalLM.forward is forward and "forward" in vars(mod.Qwen3ForCausalLM)
    assert_unpatched(build("qwen3"))
    assert hf_module("llama").LlamaRMSNorm is lt.LigerRMSNorm  # other types stay patched
    lt.revert_liger_kernel()
    assert hf_module("llama").LlamaRMSNorm.__name__ == "LlamaRMSNorm"
    assert not revert._ORIGINALS
    with pytest.raises(ValueError, match="unknown model_type"):
        lt.revert_liger_kernel("gpt2")


def test_layer_norm_class_level_stays_inside_the_modeling_module():
    mllama, siglip = (
        hf_module("mllama"),
        importlib.import_module("transformers.models.siglip.modeling_siglip"),
    )
    lt.apply_liger_kernel_to_mllama(**OFF)
    lt.apply_liger_kernel_to_gemma3(**OFF)
    assert torch.nn.LayerNorm is nn.modules.normalization.LayerNorm  # torch.nn itself untouched
    assert mllama.nn.LayerNorm is lt.LigerNNLayerNorm and siglip.nn.LayerNorm is lt.LigerNNLayerNorm
    assert mllama.nn.Linear is torch.nn.Linear and mllama.nn.functional is torch.nn.functional
    assert type(nn.LayerNorm(4)) is nn.LayerNorm
    lt.revert_liger_kernel("mllama")
    assert mllama.nn is torch.nn and siglip.nn is not torch.nn
    lt.revert_liger_kernel("gemma3")
    assert siglip.nn is torch.nn


def test_liger_nn_layer_norm_matches_torch():
    torch.manual_seed(0)
    ref = nn.LayerNorm(24, eps=1e-5)
    with torch.no_grad():
        ref.weight.normal_(), ref.bias.normal_()
    ln = lt.LigerNNLayerNorm(24, eps=1e-5)
    ln.load_state_dict(ref.state_dict())
    assert isinstance(ln, nn.LayerNorm)
    x = torch.randn(3, 5, 24, requires_grad=True)
    g = torch.randn(3, 5, 24)
    (y0,) = [ref(x)]
    d0 = torch.autograd.grad(y0, (x, ref.weight, ref.bias), g)
    y1 = ln(x)
    d1 = torch.autograd.grad(y1, (x, ln.weight, ln.bias), g)
    torch.testing.assert_close(y1, y0, **TOL)
    for a, b in zip(d1, d0):
        torch.testing.assert_close(a, b, **TOL)
    two_d = lt.LigerNNLayerNorm((4, 6))  # falls back to PyTorch for multi-dim shapes
    torch.testing.assert_close(
        two_d(x.detach().view(3, 5, 4, 6)), nn.LayerNorm((4, 6))(x.detach().view(3, 5, 4, 6))
    )


@pytest.mark.parametrize("model_type", [t for t in MODEL_TYPES if specs.SPECS[t].rope])
def test_patched_rope_functions_match_hf(model_type):
    mod = hf_module(model_type)
    hf = {fn: vars(mod)[fn] for fn, _ in specs.SPECS[model_type].rope if fn in vars(mod)}
    lt.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type](**dict(OFF, rope=True))
    assert hf
    g = torch.Generator().manual_seed(0)
    b, s, d = 2, 5, 8
    q, k = torch.randn(b, 4, s, d, generator=g), torch.randn(b, 2, s, d, generator=g)
    for fn, orig in hf.items():
        patched = getattr(mod, fn)
        assert patched is not orig
        if fn == "apply_multimodal_rotary_pos_emb":
            cos, sin = torch.randn(3, b, s, d, generator=g), torch.randn(3, b, s, d, generator=g)
            args = [(cos, sin, [1, 1, 2])]
        else:
            half = torch.randn(b, s, d // 2, generator=g)
            full = (torch.cat([half.cos(), half.cos()], -1), torch.cat([half.sin(), half.sin()], -1))
            args = [full]
            if model_type == "phi3":  # partial rotary: cos/sin cover half the head
                quarter = half[..., : d // 4]
                args.append((torch.cat([quarter.cos()] * 2, -1), torch.cat([quarter.sin()] * 2, -1)))
        for a in args:
            ref = orig(q.clone(), k.clone(), *a)  # clones: a kernel may rotate in place
            for got, want in zip(patched(q.clone(), k.clone(), *a), ref):
                torch.testing.assert_close(got, want, **TOL)


def test_qwen2_vl_with_images_matches_hf():
    """A multimodal step (vision tower with LigerNNLayerNorm, mRoPE positions) against HF."""
    ref_model = build("qwen2_vl")
    model = build("qwen2_vl")
    model.load_state_dict(ref_model.state_dict())
    lt.apply_liger_kernel_to_qwen2_vl(model=model)
    ids = torch.tensor([[9, 7, 5, 5, 5, 5, 10, 11, 12, 13], [9, 7, 5, 5, 5, 5, 20, 21, 22, 23]])
    labels = ids.masked_fill(torch.arange(10) < 6, -100)
    kw = dict(pixel_values=torch.randn(32, 96), image_grid_thw=torch.tensor([[1, 4, 4], [1, 4, 4]]))
    if "mm_token_type_ids" in inspect.signature(ref_model.forward).parameters:
        kw["mm_token_type_ids"] = (ids == 5).long()
    o0, g0 = run(ref_model, ids, labels, **kw)
    o1, g1 = run(model, ids, labels, **kw)
    torch.testing.assert_close(o1.loss, o0.loss, **TOL)
    assert_grads(g1, g0)
    assert any("visual" in n for n in g1)


def test_unsupported_model_type_warns():
    with pytest.warns(UserWarning, match="no Liger kernels"):
        lt._apply_liger_kernel("gpt2")


def test_aliases_of_text_model_types():
    for alias, canonical in [("mllama_text_model", "mllama"), ("qwen2_vl_text", "qwen2_vl")]:
        assert lt.MODEL_TYPE_TO_APPLY_LIGER_FN[alias] is lt.MODEL_TYPE_TO_APPLY_LIGER_FN[canonical]
    model = transformers.MllamaForCausalLM(tiny_config("mllama").text_config)
    lt._apply_liger_kernel_to_instance(model)
    assert_patched(model, "mllama", layer_norm=False)  # text only: no vision LayerNorm


def test_auto_model_from_config_and_pretrained(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model = lt.AutoLigerKernelForCausalLM.from_config(tiny_config("mistral"), rope=False)
    assert_patched(model, "mistral")
    assert hf_module("mistral").MistralMLP.__name__ == "MistralMLP"
    assert model.forward._liger_mode == "flce"
    build("qwen2").save_pretrained(tmp_path)
    model = lt.AutoLigerKernelForCausalLM.from_pretrained(tmp_path, swiglu=False, **OFF)
    assert sum(isinstance(m, lt.LigerRMSNorm) for m in model.modules()) == 5
    assert not any(isinstance(m, LIGER_MLPS) for m in model.modules())
    gpt2 = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=96, n_positions=32)
    with pytest.warns(UserWarning, match="unpatched"):
        model = lt.AutoLigerKernelForCausalLM.from_config(gpt2)
    assert isinstance(model, transformers.GPT2LMHeadModel)


def test_missing_hf_module_or_class_is_a_clear_error():
    """A modeling module or class the installed transformers lacks (older 5.x releases): errors that
    name it and the installed version, not a bare AttributeError from deep inside the patch."""
    import types

    from liger_cpp.transformers.monkey_patch.revert import original
    from liger_cpp.transformers.monkey_patch.specs import import_modeling

    installed = rf"transformers {transformers.__version__} is installed"
    with pytest.raises(ImportError, match=rf"modeling_not_a_model \({installed}"):
        import_modeling("transformers.models.not_a_model.modeling_not_a_model")
    mod = types.ModuleType("transformers.models.fake.modeling_fake")
    with pytest.raises(
        AttributeError, match="modeling_fake has no FakeExperts in the installed transformers"
    ):
        original(mod, "FakeExperts")
