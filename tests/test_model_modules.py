"""The newer families' norm and MLP modules against their Hugging Face classes (same weights) and
against float64 references of HF's formulas, in float32, bfloat16 and float16, forward and backward
with grad_output != 1: every liger_cpp result within twice HF's own low-precision error."""

import pytest
import torch
import torch.nn.functional as F
from utils import assert_close_to_ref

transformers = pytest.importorskip("transformers")

from hf_models import tiny_config  # noqa: E402

import liger_cpp.transformers as lt  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _modeling(name):
    return __import__(f"transformers.models.{name}.modeling_{name}", fromlist=["_"])


def _run(module, inputs, g):
    """Output and the gradients of the inputs and parameters for grad_output g."""
    xs = [x.detach().clone().requires_grad_(True) for x in inputs]
    params = [p for p in module.parameters()]
    y = module(*xs)
    leaves = xs + params
    grads = torch.autograd.grad(y, leaves, g.to(y.dtype), allow_unused=True)
    return [y, *grads]


def _compare(ours, hf, ref64_fn, inputs, dtype, params64=None):
    """ours / hf: modules with the same weights, in `dtype`; ref64_fn(*inputs64, *params64) the
    float64 formula. Every output and gradient of ours within 2x hf's error against float64."""
    inputs = [x.to(dtype) for x in inputs]
    ours, hf = ours.to(dtype), hf.to(dtype)
    out_shape = hf(*inputs).shape
    g = torch.randn(out_shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    got, lo = _run(ours, inputs, g), _run(hf, inputs, g)
    p64 = [p.detach().double().requires_grad_(True) for p in hf.parameters()]
    x64 = [x.detach().double().requires_grad_(True) for x in inputs]
    y64 = ref64_fn(*x64, *p64)
    ref = [y64, *torch.autograd.grad(y64, x64 + p64, g, allow_unused=True)]
    names = (
        ["out"] + [f"d input {i}" for i in range(len(inputs))] + [f"d {n}" for n, _ in hf.named_parameters()]
    )
    for a, b, r, n in zip(got, lo, ref, names):
        if r is None:
            assert a is None or not a.abs().any(), n
            continue
        assert_close_to_ref(a, r, b, f"{type(ours).__name__} {dtype} {n}")


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _rstd(x, eps):
    return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qwen3_next_norms(dtype):
    m = _modeling("qwen3_next")
    hf = m.Qwen3NextRMSNorm(48, eps=1e-6)
    with torch.no_grad():
        hf.weight.normal_(0, 0.3)
    ours = lt.LigerRMSNormForQwen3Next(48, eps=1e-6)
    ours.load_state_dict(hf.state_dict())
    _compare(ours, hf, lambda x, w: x * _rstd(x, 1e-6) * (1 + w), [_x(3, 5, 48)], dtype)
    hf = m.Qwen3NextRMSNormGated(16, eps=1e-6)
    with torch.no_grad():
        hf.weight.normal_(1, 0.3)
    ours = lt.LigerRMSNormGated(16, eps=1e-6)
    ours.load_state_dict(hf.state_dict())
    _compare(
        ours, hf, lambda x, z, w: w * (x * _rstd(x, 1e-6)) * F.silu(z), [_x(7, 16), _x(7, 16, seed=1)], dtype
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemma4_and_llama4_weightless_norms(dtype):
    m = _modeling("gemma4")
    for with_scale in (True, False):
        hf = m.Gemma4RMSNorm(40, eps=1e-6, with_scale=with_scale)
        if with_scale:
            with torch.no_grad():
                hf.weight.normal_(1, 0.3)
        ours = lt.LigerRMSNormForGemma4(40, eps=1e-6, with_scale=with_scale)
        ours.load_state_dict(hf.state_dict())
        ref = (lambda x, w: x * _rstd(x, 1e-6) * w) if with_scale else (lambda x: x * _rstd(x, 1e-6))
        _compare(ours, hf, ref, [_x(2, 3, 40)], dtype)
    hf = _modeling("llama4").Llama4TextL2Norm(1e-5)
    _compare(lt.LigerL2Norm(1e-5), hf, lambda x: x * _rstd(x, 1e-5), [_x(2, 3, 4, 32)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_weight_first_norms(dtype):
    """OLMo 3 / GPT-OSS / DeepSeek-V4: (w * x_normed).to(dtype)."""
    for name, cls in (
        ("olmo3", "Olmo3RMSNorm"),
        ("gpt_oss", "GptOssRMSNorm"),
        ("deepseek_v4", "DeepseekV4RMSNorm"),
    ):
        hf = getattr(_modeling(name), cls)(24, eps=1e-6)
        with torch.no_grad():
            hf.weight.normal_(1, 0.3)
        ours = lt.LigerRMSNormForOlmo3(24, eps=1e-6)
        ours.load_state_dict(hf.state_dict())
        _compare(ours, hf, lambda x, w: w * (x * _rstd(x, 1e-6)), [_x(5, 24)], dtype)


def _mlp_pair(model_type, hf_cls, liger_cls, *args, **kw):
    cfg = tiny_config(model_type).get_text_config()
    hf = hf_cls(cfg, *args, **kw)
    ours = liger_cls(cfg, *args, **kw)
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.5)
    ours.load_state_dict(hf.state_dict())
    return cfg, hf, ours


def _swiglu_ref(x, wg, wu, wd, gm=1.0, dm=1.0, limit=None):
    g, u = x @ wg.T * gm, x @ wu.T
    if limit is not None:
        g, u = g.clamp(max=limit), u.clamp(-limit, limit)
    return (F.silu(g) * u) @ wd.T * dm


@pytest.mark.parametrize("dtype", DTYPES)
def test_falcon_h1_deepseek_v4_hunyuan_mlps(dtype):
    cfg, hf, ours = _mlp_pair("falcon_h1", _modeling("falcon_h1").FalconH1MLP, lt.LigerFalconH1SwiGLUMLP)
    gm, dm = cfg.mlp_multipliers
    assert (gm, dm) == (0.5, 2.0)
    _compare(ours, hf, lambda x, wg, wu, wd: _swiglu_ref(x, wg, wu, wd, gm, dm), [_x(2, 5, 32)], dtype)
    cfg, hf, ours = _mlp_pair(
        "deepseek_v4", _modeling("deepseek_v4").DeepseekV4MLP, lt.LigerDeepseekV4SwiGLUMLP
    )
    cfg.swiglu_limit = hf.limit = ours.limit = 1.5  # the clamps bite at these magnitudes
    _compare(ours, hf, lambda x, wg, wu, wd: _swiglu_ref(x, wg, wu, wd, limit=1.5), [_x(2, 5, 32) * 3], dtype)
    _, hf, ours = _mlp_pair(
        "hunyuan_v1_dense", _modeling("hunyuan_v1_dense").HunYuanDenseV1MLP, lt.LigerHunyuanV1SwiGLUMLP
    )
    _compare(ours, hf, _swiglu_ref, [_x(2, 5, 32)], dtype)


def _gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemma4_gemma3n_geglu_mlps(dtype):
    # Gemma 4: the KV-shared layer (the last of the tiny config's three) is double-wide
    cfg = tiny_config("gemma4_text")
    from liger_cpp.transformers.geglu import gemma4_kv_shared

    assert cfg.use_double_wide_mlp and [gemma4_kv_shared(cfg, i) for i in range(3)] == [False, False, True]
    for layer in (0, 2):
        hf = _modeling("gemma4").Gemma4TextMLP(cfg, layer)
        ours = lt.LigerGEGLUMLPForGemma4(cfg, layer_idx=layer)
        assert (
            ours.intermediate_size == hf.intermediate_size == cfg.intermediate_size * (2 if layer == 2 else 1)
        )
        ours.load_state_dict(hf.state_dict())
        ref = lambda x, wg, wu, wd: (_gelu_tanh(x @ wg.T) * (x @ wu.T)) @ wd.T  # noqa: E731
        _compare(ours, hf, ref, [_x(2, 5, 32)], dtype)
    # Gemma 3n: layer 0 has activation sparsity 0.95 (the Gaussian top-k of the gate), layer 1 none
    cfg = tiny_config("gemma3n_text")
    for layer in (0, 1):
        hf = _modeling("gemma3n").Gemma3nTextMLP(cfg, layer_idx=layer)
        ours = lt.LigerGEGLUMLPForGemma3n(cfg, layer_idx=layer)
        ours.load_state_dict(hf.state_dict())
        if layer == 1:  # no sparsity: a float64 reference (the top-k's cutoff is HF's computation)
            ref = lambda x, wg, wu, wd: (_gelu_tanh(x @ wg.T) * (x @ wu.T)) @ wd.T  # noqa: E731
            _compare(ours, hf, ref, [_x(2, 5, 32)], dtype)
        else:
            x = _x(2, 5, 32).to(dtype)
            ours, hf = ours.to(dtype), hf.to(dtype)
            tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
            torch.testing.assert_close(ours(x), hf(x), **tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_muse_glimmer_norms_and_mlp(dtype):
    m = _modeling("muse_glimmer")
    for with_scale in (True, False):  # the final norm; qk_norm / embed_norm / perception_emb_norm
        hf = m.MuseGlimmerRMSNorm(40 if with_scale else None, eps=1e-6, with_scale=with_scale)
        if with_scale:
            with torch.no_grad():
                hf.weight.normal_(1, 0.3)
        ours = lt.LigerRMSNormForMuseGlimmer(40 if with_scale else None, eps=1e-6, with_scale=with_scale)
        ours.load_state_dict(hf.state_dict())
        ref = (lambda x, w: x * _rstd(x, 1e-6) * w) if with_scale else (lambda x: x * _rstd(x, 1e-6))
        _compare(ours, hf, ref, [_x(2, 3, 40)], dtype)
    # qk_norm sees the (B, H, T, D) view of a (B, T, H, D) projection: not contiguous
    hf, ours = (
        m.MuseGlimmerRMSNorm(eps=1e-5, with_scale=False),
        lt.LigerRMSNormForMuseGlimmer(eps=1e-5, with_scale=False),
    )
    _compare(ours, hf, lambda x: x * _rstd(x, 1e-5), [_x(2, 5, 4, 8).transpose(1, 2)], dtype)
    hf = m.MuseGlimmerTextCenteredRMSNorm(24, eps=1e-8)
    with torch.no_grad():
        hf.weight.normal_(0, 0.3)
    ours = lt.LigerRMSNormForMuseGlimmerTextCentered(24, eps=1e-8)
    ours.load_state_dict(hf.state_dict())
    _compare(ours, hf, lambda x, w: x * _rstd(x, 1e-8) * (1 + w), [_x(5, 24)], dtype)
    _, hf, ours = _mlp_pair("muse_glimmer", m.MuseGlimmerTextMLP, lt.LigerSwiGLUMLPForMuseGlimmer)
    _compare(ours, hf, _swiglu_ref, [_x(2, 5, 32)], dtype)
