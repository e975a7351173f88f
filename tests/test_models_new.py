"""The newer model families (tests/hf_models_new.py): every apply_liger_kernel_to_<type> against plain
Hugging Face on a tiny random fp32 model built twice with the same weights: class level with
Liger-Kernel's defaults and instance level with every flag the type supports on; the loss, every
parameter gradient and the logits (materialised: skip_logits=False, and an eval step) must match;
revert restores Hugging Face exactly. Flags a type cannot honour are clear errors that change
nothing."""

import inspect
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_models import batch, build, run, single_thread  # noqa: E402,F401  (autouse fixture)
from hf_models_new import NEW_MODEL_TYPES  # noqa: E402
from torch import nn  # noqa: E402

import liger_cpp.transformers as lt  # noqa: E402
from liger_cpp.transformers import monkey_patch as mp  # noqa: E402
from liger_cpp.transformers.monkey_patch import revert  # noqa: E402
from liger_cpp.transformers.monkey_patch.composite import COMPOSITES  # noqa: E402

TOL = {"rtol": 1e-5, "atol": 1e-5}
# Parameter gradients sum many float32 products (the embedding's over every token); 2e-5 absolute is
# still 250 x tighter than Liger's mini-model tests (param atol 5e-3).
GRAD_TOL = {"rtol": 1e-5, "atol": 2e-5}
# Llama 4's multimodal forward fails in transformers 5.24 itself (it reads `image_outputs` from its
# language model's MoeCausalLMOutputWithPast): its text model and vision RoPE are tested instead.
HF_BROKEN = {"llama4"}
TYPES = [t for t in NEW_MODEL_TYPES if t not in HF_BROKEN]
# Flags a type cannot honour (NotImplementedError, tested below).
UNSUPPORTED = {"deepseek_v4": {"rope"}, "glm4v": {"rope"}}


def apply_fn(model_type):
    return mp.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]


def spec_type(model_type):
    return apply_fn(model_type).__name__[len("apply_liger_kernel_to_") :]


def all_flags(model_type):
    """Every flag the type's apply function has, on (FLCE rather than CE), but those it cannot honour."""
    params = inspect.signature(apply_fn(model_type)).parameters
    flags = {k: True for k, p in params.items() if k != "model" and p.kind is not p.VAR_KEYWORD}
    flags["cross_entropy"] = False
    for k in UNSUPPORTED.get(spec_type(model_type), ()):
        flags[k] = False
    if spec_type(model_type) in ("llava", "internvl", "smolvlm"):
        flags.update(rope=True, swiglu=True)  # passed on to the language model / vision tower
    return flags


def liger_modules(model):
    return [m for m in model.modules() if type(m).__module__.startswith("liger_cpp")]


def grads_close(g1, g0):
    assert g0.keys() == g1.keys() and len(g0) > 0
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], **GRAD_TOL, msg=lambda m, n=n: f"grad of {n}: {m}")


def results(model):
    """Loss, gradients and logits of a training step; the full logits (skip_logits=False for the
    patched forward) and those of an eval step without labels."""
    ids, labels = batch()
    out, grads = run(model, ids, labels)
    kw = {"skip_logits": False} if hasattr(model.forward, "_liger_mode") else {}
    full = model(input_ids=ids, labels=labels, **kw)
    model.eval()
    with torch.no_grad():
        eval_logits = model(input_ids=ids).logits
    model.train()
    return dict(loss=out.loss, grads=grads, logits=out.logits, full=full.logits, eval=eval_logits)


def compare(got, ref, flce):
    torch.testing.assert_close(got["loss"], ref["loss"], **TOL)
    grads_close(got["grads"], ref["grads"])
    if flce:
        assert got["logits"] is None  # the [B, T, V] logits were never built
    torch.testing.assert_close(got["full"], ref["full"], **TOL)
    torch.testing.assert_close(got["eval"], ref["eval"], **TOL)


@pytest.fixture(autouse=True)
def _reverted():
    mp.revert_liger_kernel()
    yield
    mp.revert_liger_kernel()


@pytest.mark.parametrize("model_type", TYPES)
def test_class_level_defaults_match_hf_and_revert(model_type):
    ref_model = build(model_type)
    ref = results(ref_model)
    hf_classes = {type(m) for m in ref_model.modules()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_fn(model_type)()  # Liger-Kernel's defaults
    model = build(model_type)
    # LLaVA at class level: only its forward (its language model's type is not known yet)
    assert liger_modules(model) or spec_type(model_type) == "llava"
    assert type(model).forward._liger_mode == "flce"
    model.load_state_dict(ref_model.state_dict())
    compare(results(model), ref, flce=True)
    mp.revert_liger_kernel()
    assert not revert._ORIGINALS
    rebuilt = build(model_type)
    assert {type(m) for m in rebuilt.modules()} == hf_classes
    assert not hasattr(type(rebuilt).forward, "_liger_mode")


@pytest.mark.parametrize("model_type", TYPES)
def test_instance_all_flags_match_hf_keep_parameters_and_revert(model_type):
    ref_model = build(model_type)
    ref = results(ref_model)
    model = build(model_type)
    model.load_state_dict(ref_model.state_dict())
    params = dict(model.named_parameters())
    classes = {n: type(m) for n, m in model.named_modules()}
    flags = all_flags(model_type)
    apply_fn(model_type)(model=model, **flags)
    assert liger_modules(model)
    assert "forward" in vars(model)
    assert all(p is params[n] for n, p in model.named_parameters()) and len(params) == len(
        dict(model.named_parameters())
    )
    compare(results(model), ref, flce=True)
    mp.revert_liger_kernel(model=model)
    mp.revert_liger_kernel()  # RoPE is module-wide
    assert {n: type(m) for n, m in model.named_modules()} == classes
    assert "forward" not in vars(model)
    ids, labels = batch()
    torch.testing.assert_close(model(input_ids=ids).logits, ref_model(input_ids=ids).logits)


@pytest.mark.parametrize("model_type", ["qwen3_vl_moe", "qwen3_next", "gemma4_text", "muse_glimmer"])
def test_cross_entropy_mode_matches_hf(model_type):
    ref_model = build(model_type)
    ref = results(ref_model)
    model = build(model_type)
    model.load_state_dict(ref_model.state_dict())
    apply_fn(model_type)(model=model, cross_entropy=True, fused_linear_cross_entropy=False)
    got = results(model)
    torch.testing.assert_close(got["logits"], ref["logits"], **TOL)
    compare(got, ref, flce=False)


@pytest.mark.parametrize(
    "model_type, flag, match",
    [
        ("glm4v", "rope", "interleaved"),
    ],
)
def test_unsupported_flag_is_a_clear_error_and_changes_nothing(model_type, flag, match):
    with pytest.raises(NotImplementedError, match=match):
        apply_fn(model_type)(**{flag: True})
    model = build(model_type)
    classes = {n: type(m) for n, m in model.named_modules()}
    with pytest.raises(NotImplementedError, match=f"{flag}=True"):
        apply_fn(model_type)(model=model, **{flag: True})
    assert not revert._ORIGINALS
    assert {n: type(m) for n, m in model.named_modules()} == classes and "forward" not in vars(model)


def test_deepseek_v4_rope_is_a_warned_no_op():
    """As Liger-Kernel's patcher: DeepSeek-V4's RoPE layout has no liger_cpp kernel, rope=True warns."""
    mod = __import__("transformers.models.deepseek_v4.modeling_deepseek_v4", fromlist=["_"])
    rope = mod.apply_rotary_pos_emb
    with pytest.warns(UserWarning, match="rope=True does nothing for deepseek_v4"):
        lt.apply_liger_kernel_to_deepseek_v4(rope=True)
    assert mod.apply_rotary_pos_emb is rope and mod.DeepseekV4RMSNorm is lt.LigerRMSNormForOlmo3


def test_wrong_model_is_not_half_patched():
    model = build("qwen3_next")
    model.model.layers[1].mlp = nn.Identity()
    classes = {n: type(m) for n, m in model.named_modules()}
    with pytest.raises(ValueError, match=r"layers\[1\]\.mlp"):
        lt.apply_liger_kernel_to_qwen3_next(model=model)
    assert {n: type(m) for n, m in model.named_modules()} == classes and "forward" not in vars(model)
    model = build("llava")
    model.model.language_model.layers[0].mlp = nn.Identity()  # the language model's patch fails
    classes = {n: type(m) for n, m in model.named_modules()}
    with pytest.raises(ValueError, match=r"layers\[0\]\.mlp"):
        lt.apply_liger_kernel_to_llava(model=model, swiglu=True)
    assert {n: type(m) for n, m in model.named_modules()} == classes and "forward" not in vars(model)


def test_aliases_and_text_configs():
    table = mp.MODEL_TYPE_TO_APPLY_LIGER_FN
    for alias, canonical in [
        ("llama4_text", "llama4"),
        ("qwen3_5_text", "qwen3_5"),
        ("qwen3_5_moe_text", "qwen3_5_moe"),
        ("qwen3_vl_text", "qwen3_vl"),
        ("qwen3_vl_moe_text", "qwen3_vl_moe"),
        ("gemma3n_text", "gemma3n"),
    ]:
        assert table[alias] is table[canonical], alias
    assert table["gemma4_text"] is not table["gemma4"]  # Liger-Kernel has both functions
    for model_type in COMPOSITES:
        assert model_type in table


def test_composite_towers_patched():
    """LLaVA with a Pixtral vision tower: the Mistral language model and the Pixtral encoder are
    patched by their own apply functions (the flags each takes)."""
    model = build("llava")
    lt.apply_liger_kernel_to_llava(model=model, rope=False, rms_norm=True, swiglu=True)
    inner = model.model
    assert isinstance(inner.language_model.layers[0].mlp, lt.LigerSwiGLUMLP)
    assert isinstance(inner.vision_tower.transformer.layers[0].feed_forward, lt.LigerSwiGLUMLP)
    assert isinstance(inner.vision_tower.ln_pre, lt.LigerRMSNorm)
    assert "forward" not in vars(inner.language_model)
    model = build("internvl")
    lt.apply_liger_kernel_to_internvl(model=model)
    vision = model.model.vision_tower
    assert not any(type(m).__name__ == "InternVLVisionRMSNorm" for m in vision.modules())
    assert not any(type(m) is nn.LayerNorm for m in model.modules())


def test_auto_model_new_types():
    for model_type in ("smollm3", "qwen3_5_text", "gemma4_text"):
        from hf_models import tiny_config

        model = lt.AutoLigerKernelForCausalLM.from_config(tiny_config(model_type))
        assert liger_modules(model), model_type
        assert model.forward._liger_mode == "flce"
