"""Llama 4's complex RoPE (liger::llama4_rope_fwd / _bwd): forward and backward against a float64
complex reference, every dtype, HF's (B, S, H, D) views and the heads-first layout, frequency tables
per sample or broadcast, GQA and odd head counts, grad_output != 1; equality with transformers'
apply_rotary_emb / vision_apply_rotary_emb (Llama 4) and apply_rotary_emb (DeepSeek-V2) on their
own frequency tables; opcheck, torch.compile, float64 gradcheck (with the frequencies' gradient);
output layout; errors."""

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from utils import assert_close_to_ref

import liger_cpp  # noqa: F401
from liger_cpp.ops.llama4_rope import llama4_rope
from liger_cpp.transformers import liger_llama4_text_rotary_pos_emb, liger_llama4_vision_rotary_pos_emb

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (B, S, Hq, Hk, D): one token, GQA, odd head counts, D not a multiple of the vector (6, 10)
SHAPES = [(1, 1, 1, 1, 2), (2, 7, 4, 2, 64), (1, 5, 5, 3, 10), (2, 9, 8, 1, 128), (3, 4, 5, 7, 6)]
CUDA_SHAPES = [(1, 8192, 40, 8, 128), (4, 577, 16, 16, 88), (2, 333, 12, 4, 256), (8, 4096, 32, 8, 6)]


def _ref(x, freqs, heads_first):
    """x (.., D) as complex pairs times freqs (complex, (B or 1, S, P)), in float64."""
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    f = freqs.to(torch.complex128)
    f = f[:, None] if heads_first else f[:, :, None]
    return torch.view_as_real(z * f).flatten(-2)


def _ref_lo(x, freqs, heads_first):
    """HF's formula at its precision: x.float() times complex64 freqs, cast back."""
    z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
    f = freqs[:, None] if heads_first else freqs[:, :, None]
    return torch.view_as_real(z * f).flatten(-2).to(x.dtype)


def _freqs(B, S, P, device, batch=True):
    angle = torch.rand(B if batch else 1, S, P, device=device) * 6.3
    return torch.polar(torch.ones_like(angle), angle) * (1 + 0.1 * torch.rand_like(angle))


def _run(device, dtype, shape, heads_first, per_sample, hf_view):
    B, S, Hq, Hk, D = shape
    freqs = _freqs(B, S, D // 2, device, per_sample)
    qd = torch.randn(B, S, Hq, D, device=device).to(dtype)
    kd = torch.randn(B, S, Hk, D, device=device).to(dtype)
    if hf_view:  # proj(x).view(B, S, H, D): dense, (B, S, H, D)
        q_leaf = qd.reshape(B, S, Hq * D).clone().requires_grad_(True)
        k_leaf = kd.reshape(B, S, Hk * D).clone().requires_grad_(True)
        q, k = q_leaf.view(B, S, Hq, D), k_leaf.view(B, S, Hk, D)
    else:
        q_leaf, k_leaf = qd.clone().requires_grad_(True), kd.clone().requires_grad_(True)
        q, k = q_leaf, k_leaf
    if heads_first:
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    qo, ko = llama4_rope(q, k, freqs, heads_first=heads_first)
    gq, gk = torch.randn_like(qo), torch.randn_like(ko)
    dq, dk = torch.autograd.grad((qo, ko), (q_leaf, k_leaf), (gq, gk))
    for out, x, name in ((qo, q, "q_out"), (ko, k, "k_out")):
        assert out.dtype == dtype and out.shape == x.shape
        assert_close_to_ref(out, _ref(x, freqs, heads_first), _ref_lo(x, freqs, heads_first), name)
    # the backward is the rotation by the conjugate frequencies
    for dx, g, name in ((dq, gq, "dq"), (dk, gk, "dk")):
        want = _ref(g, freqs.conj(), heads_first)
        lo = _ref_lo(g, freqs.conj(), heads_first)
        if heads_first:
            want, lo = want.transpose(1, 2), lo.transpose(1, 2)
        assert_close_to_ref(dx.reshape(want.shape), want, lo, name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("heads_first", [False, True])
def test_forward_backward(device, shape, heads_first):
    for dtype in DTYPES + ([torch.float64] if device == "cpu" else []):
        for per_sample, hf_view in ((True, True), (False, False)):
            _run(device, dtype, shape, heads_first, per_sample, hf_view)


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA kernels and a GPU")
@pytest.mark.parametrize("shape", CUDA_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_shapes(shape, dtype):
    _run("cuda", dtype, shape, False, True, True)
    _run("cuda", dtype, shape, True, False, False)


@pytest.mark.parametrize("device", DEVICES)
def test_equals_transformers(device):
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import apply_rotary_emb as ds_rope
    from transformers.models.llama4 import modeling_llama4 as m

    cfg = m.Llama4VisionConfig(hidden_size=64, num_attention_heads=4, image_size=56, patch_size=14)
    freqs_ci = m.Llama4VisionRotaryEmbedding(cfg).freqs_ci.to(device)  # (N, 1, D/2), HF's vision table
    n = freqs_ci.shape[0]
    for dtype in DTYPES:
        q = torch.randn(3, n, 4, 16, device=device).to(dtype)
        k = torch.randn(3, n, 4, 16, device=device).to(dtype)
        for got, want in zip(
            liger_llama4_vision_rotary_pos_emb(q, k, freqs_ci), m.vision_apply_rotary_emb(q, k, freqs_ci)
        ):
            torch.testing.assert_close(got, want, rtol=0, atol=0 if dtype != torch.float32 else 2e-6)
        angle = torch.rand(2, 7, 8, device=device) * 6.3
        freqs_cis = torch.polar(torch.ones_like(angle), angle)  # (B, S, D/2), as the text rotary embedding
        q, k = (
            torch.randn(2, 7, 4, 16, device=device).to(dtype),
            torch.randn(2, 7, 1, 16, device=device).to(dtype),
        )
        for got, want in zip(
            liger_llama4_text_rotary_pos_emb(q, k, freqs_cis), m.apply_rotary_emb(q, k, freqs_cis)
        ):
            torch.testing.assert_close(got, want, rtol=0, atol=0 if dtype != torch.float32 else 2e-6)
        qh, kh = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous()  # DeepSeek-V2: heads first
        for got, want in zip(llama4_rope(qh, kh, freqs_cis, heads_first=True), ds_rope(qh, kh, freqs_cis)):
            torch.testing.assert_close(got, want, rtol=0, atol=0 if dtype != torch.float32 else 2e-6)


def test_layout_of_outputs():
    q = torch.randn(2, 5, 3 * 8).view(2, 5, 3, 8)
    k = torch.randn(2, 3, 5, 8).transpose(1, 2)  # a (B, S, H, D) view of heads-first memory
    qo, ko = llama4_rope(q, k, _freqs(2, 5, 4, "cpu"))
    assert qo.stride() == q.stride() and ko.stride() == k.stride()


def test_gradcheck_with_frequency_gradient_opcheck_compile():
    q = torch.randn(2, 3, 2, 6, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 3, 1, 6, dtype=torch.float64, requires_grad=True)
    f = torch.view_as_real(_freqs(1, 3, 3, "cpu").to(torch.complex128)).clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda q, k, f: llama4_rope(q, k, f), (q, k, f))
    fb = torch.view_as_real(_freqs(2, 3, 3, "cpu").to(torch.complex128)).clone().requires_grad_(True)
    qh, kh = q.detach().transpose(1, 2).requires_grad_(True), k.detach().transpose(1, 2).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda q, k, f: llama4_rope(q, k, f, heads_first=True), (qh, kh, fb))
    qf, kf, ff = q.detach().float(), k.detach().float(), torch.view_as_real(_freqs(2, 3, 3, "cpu"))
    torch.library.opcheck(torch.ops.liger.llama4_rope_fwd, (qf, kf, ff, False))
    torch.library.opcheck(torch.ops.liger.llama4_rope_bwd, (qf, kf, ff, False))
    compiled = torch.compile(lambda q, k, f: llama4_rope(q, k, f), fullgraph=True)
    for got, want in zip(compiled(qf, kf, ff), llama4_rope(qf, kf, ff)):
        torch.testing.assert_close(got, want)


def test_only_one_output_used():
    q = torch.randn(1, 4, 2, 8, requires_grad=True)
    k = torch.randn(1, 4, 2, 8, requires_grad=True)
    qo, _ = llama4_rope(q, k, _freqs(1, 4, 4, "cpu"))
    qo.sum().backward()
    assert q.grad is not None and k.grad is None


def test_errors():
    q, k, f = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8), torch.view_as_real(_freqs(1, 4, 4, "cpu"))
    with pytest.raises(RuntimeError, match="argument 'q': expected a 4-D"):
        torch.ops.liger.llama4_rope_fwd(q[0], k, f)
    with pytest.raises(RuntimeError, match="argument 'q': expected an even"):
        torch.ops.liger.llama4_rope_fwd(q[..., :7], k[..., :7], f)
    with pytest.raises(RuntimeError, match="argument 'freqs': expected D/2"):
        torch.ops.liger.llama4_rope_fwd(q, k, f[:, :, :3])
    with pytest.raises(RuntimeError, match="argument 'freqs': expected the sequence length"):
        torch.ops.liger.llama4_rope_fwd(q, k, f[:, :3])
    with pytest.raises(RuntimeError, match="argument 'k': expected q's dtype"):
        torch.ops.liger.llama4_rope_fwd(q, k.double(), f)
    with pytest.raises(RuntimeError, match="argument 'freqs': expected float32"):
        torch.ops.liger.llama4_rope_fwd(q, k, f.half())


def test_apply_liger_llama4_rope_full_and_revert():
    """Liger-Kernel's helper binds both replacements in a modeling module; revert restores HF's."""
    from transformers.models.llama4 import modeling_llama4 as m

    from liger_cpp.transformers import revert_liger_kernel
    from liger_cpp.transformers.llama4_rope import apply_liger_llama4_rope_full

    orig = (m.apply_rotary_emb, m.vision_apply_rotary_emb)
    apply_liger_llama4_rope_full(m)
    try:
        assert m.apply_rotary_emb is liger_llama4_text_rotary_pos_emb
        assert m.vision_apply_rotary_emb is liger_llama4_vision_rotary_pos_emb
    finally:
        revert_liger_kernel("llama4")
    assert (m.apply_rotary_emb, m.vision_apply_rotary_emb) == orig
