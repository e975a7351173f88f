"""The newer multimodal families with images (their vision towers' norms, MLPs, RoPE and LayerNorms
patched with every flag on, against plain Hugging Face: loss and every gradient, vision included),
Llama 4's vision encoder on its own (its multimodal forward fails in transformers 5.24 itself), and
every RoPE replacement of the newer families on the very arguments the model passes to Hugging
Face's function (captured during a forward), forward and backward."""

import inspect
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_models import build, grads, single_thread  # noqa: E402,F401  (autouse fixture)
from test_models_new import TOL, all_flags, apply_fn, grads_close  # noqa: E402

import liger_cpp.transformers as lt  # noqa: E402
from liger_cpp.transformers import monkey_patch as mp  # noqa: E402
from liger_cpp.transformers.monkey_patch import specs  # noqa: E402
from liger_cpp.transformers.monkey_patch.specs_multimodal import MULTIMODAL_SPECS  # noqa: E402
from liger_cpp.transformers.monkey_patch.specs_text import TEXT_SPECS  # noqa: E402

# Qwen-style vision (flattened patches and a (t, h, w) grid: 16 patches, 4 tokens after the 2x2
# merge), LLaVA / PaliGemma (4 patch tokens of a 28x28 image), InternVL / SmolVLM (one token).
QWEN_STYLE = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "glm4v", "glm4v_moe", "muse_glimmer")
IMAGE_TYPES = QWEN_STYLE + ("llava", "internvl", "smolvlm", "paligemma")


def image_batch(model_type, model, seed=0):
    g = torch.Generator().manual_seed(seed)
    if model_type in QWEN_STYLE:
        ids = torch.tensor([[9, 7, 5, 5, 5, 5, 10, 11, 12, 13], [9, 7, 5, 5, 5, 5, 20, 21, 22, 23]])
        kw = dict(pixel_values=torch.randn(32, 96, generator=g), image_grid_thw=torch.tensor([[1, 4, 4]] * 2))
        if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
            kw["mm_token_type_ids"] = (ids == 5).long()
    else:
        n = 4 if model_type in ("llava", "paligemma", "smolvlm") else 1
        ids = torch.tensor([[9] + [5] * n + [10, 11, 12, 13], [9] + [5] * n + [20, 21, 22, 23]])
        shape = (2, 1, 3, 8, 8) if model_type == "smolvlm" else (2, 3, 28, 28)
        kw = dict(pixel_values=torch.randn(*shape, generator=g))
        if model_type == "llava":
            kw["image_sizes"] = torch.tensor([[28, 28], [28, 28]])
    return ids, ids.masked_fill(ids == 5, -100), kw


def step(model, ids, labels, kw):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=labels, **kw)
    out.loss.backward()
    return out.loss.detach(), grads(model)


@pytest.fixture(autouse=True)
def _reverted():
    mp.revert_liger_kernel()
    yield
    mp.revert_liger_kernel()


@pytest.mark.parametrize("model_type", IMAGE_TYPES)
def test_multimodal_step_with_images_matches_hf(model_type):
    ref = build(model_type)
    model = build(model_type)
    model.load_state_dict(ref.state_dict())
    apply_fn(model_type)(model=model, **all_flags(model_type))
    ids, labels, kw = image_batch(model_type, ref)
    l0, g0 = step(ref, ids, labels, kw)
    l1, g1 = step(model, ids, labels, kw)
    torch.testing.assert_close(l1, l0, **TOL)
    grads_close(g1, g0)
    assert any(("visual" in n or "vision" in n) for n in g1)  # the vision tower trained too


def test_llama4_vision_encoder_matches_hf():
    """Llama 4's vision model (complex 2-D RoPE, LayerNorms) patched by apply_liger_kernel_to_llama4."""
    ref = build("llama4").vision_model
    mp.apply_liger_kernel_to_llama4()  # class level: RoPE (module functions) and nn.LayerNorm
    patched = build("llama4").vision_model
    patched.load_state_dict(ref.state_dict())
    assert any(type(m).__name__ == "LigerNNLayerNorm" for m in patched.modules())
    pixels = torch.randn(2, 3, 28, 28, generator=torch.Generator().manual_seed(3))
    outs = []
    for m in (ref, patched):
        m.zero_grad(set_to_none=True)
        y = m(pixels).last_hidden_state
        (y * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
        outs.append((y.detach(), grads(m)))
    torch.testing.assert_close(outs[1][0], outs[0][0], **TOL)
    grads_close(outs[1][1], outs[0][1])


def test_muse_glimmer_base_and_text_models_patched_without_a_head():
    """MuseGlimmerModel and MuseGlimmerTextModel (no lm_head): their norms, MLPs and LayerNorms are
    patched, their forward is not; the hidden states match Hugging Face's, forward and backward."""
    ref = build("muse_glimmer")
    for part in ("model", "model.language_model"):
        m0 = ref.get_submodule(part)
        patched = build("muse_glimmer").get_submodule(part)
        patched.load_state_dict(m0.state_dict())
        lt.apply_liger_kernel_to_muse_glimmer(model=patched)
        assert "forward" not in vars(patched)
        names = {type(m).__name__ for m in patched.modules()}
        assert not names & {"MuseGlimmerRMSNorm", "MuseGlimmerTextCenteredRMSNorm", "MuseGlimmerTextMLP"}
        assert ("LigerNNLayerNorm" in names) == (part == "model")
        ids = torch.randint(8, 96, (2, 9), generator=torch.Generator().manual_seed(4))
        outs = []
        for m in (m0, patched):
            m.zero_grad(set_to_none=True)
            y = m(input_ids=ids).last_hidden_state
            # a mean, as a loss is (embed_norm of the tiny embeddings scales their gradients up ~50x)
            (y * torch.linspace(-1, 1, y.shape[-1])).mean().backward()
            outs.append((y.detach(), grads(m)))
        torch.testing.assert_close(outs[1][0], outs[0][0], **TOL)
        grads_close(outs[1][1], outs[0][1])
        mp.revert_liger_kernel(model=patched)
        assert not any(type(m).__module__.startswith("liger_cpp") for m in patched.modules())


def test_muse_glimmer_non_silu_mlp_is_a_clear_error():
    model = build("muse_glimmer", hidden_activation="gelu_pytorch_tanh")
    classes = {n: type(m) for n, m in model.named_modules()}
    with pytest.raises(ValueError, match="hidden_activation"):
        lt.apply_liger_kernel_to_muse_glimmer(model=model)
    assert {n: type(m) for n, m in model.named_modules()} == classes and "forward" not in vars(model)
    lt.apply_liger_kernel_to_muse_glimmer()
    with pytest.raises(ValueError, match="hidden_activation"):
        build("muse_glimmer", hidden_activation="gelu_pytorch_tanh")
    lt.apply_liger_kernel_to_muse_glimmer(swiglu=False)  # the other flags still apply
    mp.revert_liger_kernel()
    lt.apply_liger_kernel_to_muse_glimmer(swiglu=False)
    assert any(type(m).__module__.startswith("liger_cpp") for m in build("muse_glimmer").modules())


# The newer families' rows (the older ones: tests/test_monkey_patch.py).
ROPE_TYPES = sorted(set(TEXT_SPECS) | set(MULTIMODAL_SPECS))


def _capture(mod, fn_names, run):
    """(fn name, args, kwargs) of every call the model makes to the modeling module's functions."""
    calls = []
    saved = {n: vars(mod)[n] for n in fn_names if n in vars(mod)}

    def recorder(name, fn):
        def rec(*args, **kwargs):
            calls.append((name, args, kwargs))
            return fn(*args, **kwargs)

        return rec

    try:
        for n, fn in saved.items():
            setattr(mod, n, recorder(n, fn))
        run()
    finally:
        for n, fn in saved.items():
            setattr(mod, n, fn)
    return saved, calls


def _detached(x):
    return x.detach().clone().requires_grad_(x.is_floating_point()) if torch.is_tensor(x) else x


@pytest.mark.parametrize("model_type", [t for t in ROPE_TYPES if specs.SPECS[t].rope])
def test_rope_replacements_on_the_models_own_arguments(model_type):
    spec = specs.SPECS[model_type]
    mod = __import__(spec.module, fromlist=["_"])
    fns = [fn for fn, _ in spec.rope]
    build_type = {"llama4": "llama4_text", "gemma3n": "gemma3n_text", "pixtral": "llava"}.get(
        model_type, model_type
    )
    model = build(build_type)
    if build_type in IMAGE_TYPES:
        ids, labels, kw = image_batch(build_type, model)
    else:
        ids = torch.randint(8, 96, (2, 9), generator=torch.Generator().manual_seed(0))
        labels, kw = ids, {}
    saved, calls = _capture(mod, fns, lambda: model(input_ids=ids, labels=labels, **kw))
    assert calls, f"{model_type}: none of {fns} was called"
    impls = {fn: specs.ROPE_IMPLS[kind] for fn, kind in spec.rope}
    seen = set()
    for name, args, kwargs in calls:
        if name in seen:
            continue
        seen.add(name)
        a0 = [_detached(a) for a in args]
        k0 = {k: _detached(v) for k, v in kwargs.items()}
        a1 = [_detached(a) for a in args]
        k1 = {k: _detached(v) for k, v in kwargs.items()}
        want = saved[name](*a0, **k0)
        got = impls[name](*a1, **k1)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        for w, o in zip(want, got):
            torch.testing.assert_close(o, w, **TOL, msg=lambda m, n=name: f"{model_type}.{n}: {m}")
        gs = [torch.randn_like(w) for w in want]
        torch.autograd.backward(want, gs)
        torch.autograd.backward(got, gs)
        for x0, x1 in zip(a0 + list(k0.values()), a1 + list(k1.values())):
            if torch.is_tensor(x0) and x0.grad is not None:
                torch.testing.assert_close(
                    x1.grad, x0.grad, **TOL, msg=lambda m, n=name: f"{model_type}.{n} grad: {m}"
                )
    # every replaced function was exercised (Llama 4's vision one: test_llama4_vision_encoder_matches_hf)
    assert seen == set(saved) - ({"vision_apply_rotary_emb"} if model_type == "llama4" else set()), seen


def test_class_level_warns_for_missing_rope_functions_only():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for model_type in ("qwen3_next", "qwen3_5", "gemma4_text", "deepseek_v2", "glm4v_moe", "nemotron"):
            apply_fn(model_type)(rope=True)
