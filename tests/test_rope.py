"""RoPE and Qwen2-VL mRoPE: forward and backward against independent float64 references (HF
formulas), every dtype, cos/sin layout and dtype, HF's strided views, unsqueeze_dim 1 and 2, odd
head counts and head dims, GQA; equality with transformers' own functions; opcheck, torch.compile,
gradcheck (including cos/sin gradients), layout of the outputs, errors."""

import types

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from reference import mrope_ref, rope_ref
from utils import assert_close_to_ref

import liger_cpp  # noqa: F401
from liger_cpp.ops.rope import mrope, rope
from liger_cpp.transformers import (
    liger_multimodal_rotary_pos_emb,
    liger_qwen2vl_mrope,
    liger_rope,
    liger_rotary_pos_emb,
)

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (B, S, Hq, Hk, D): one token, odd head dims/counts (Liger's 73 heads, D = 92), GQA 32/8, D = 2
SHAPES = [(1, 1, 1, 1, 2), (2, 7, 4, 2, 64), (1, 5, 73, 1, 92), (2, 9, 32, 8, 128), (3, 4, 5, 7, 6)]
# the last one has more work items than the launch's grid (the kernel's grid-stride loop)
CUDA_SHAPES = [
    (3, 423, 73, 213, 92),
    (1, 8192, 32, 8, 128),
    (4, 1024, 32, 8, 128),
    (2, 333, 12, 4, 256),
    (8, 4096, 32, 8, 92),
]


def _all_dtypes(device):
    return DTYPES + ([torch.float64] if device == "cpu" else [])


def _leaf_and_view(data, layout):
    """data: (B, S, H, D). Returns (leaf, view passed to the op).
    hf: proj(x).view(B, S, H, D).transpose(1, 2) (a strided (B, H, S, D) view, no copy);
    contiguous: a contiguous (B, H, S, D) tensor; bshd: (B, S, H, D) as is (unsqueeze_dim=2)."""
    B, S, H, D = data.shape
    if layout == "hf":
        leaf = data.reshape(B, S, H * D).clone().requires_grad_(True)
        return leaf, leaf.view(B, S, H, D).transpose(1, 2)
    if layout == "contiguous":
        leaf = data.transpose(1, 2).contiguous().requires_grad_(True)
        return leaf, leaf
    leaf = data.clone().requires_grad_(True)
    return leaf, leaf


def _view(leaf, layout, shape):
    B, S, H, D = shape
    return leaf.view(B, S, H, D).transpose(1, 2) if layout == "hf" else leaf


def _tables(kind, B, S, D, device, general=True, planes=None):
    """cos, sin in float32. general: independent values in every column (HF's cat(f, f) is a
    special case; the kernels must not assume it); else HF's cat(freqs, freqs) of positions."""
    if planes is None:
        shape = {"1sd": (1, S, D), "bsd": (B, S, D), "sd": (S, D)}[kind]
    else:  # mRoPE: (3, B or 1, S, D)
        shape = (3, planes, S, D)
    if general:
        cos = torch.rand(shape, device=device) * 2 - 1
        sin = torch.rand(shape, device=device) * 2 - 1
        return cos, sin
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, device=device, dtype=torch.float32) / D))
    pos = torch.arange(S, device=device, dtype=torch.float32) + 3
    f = torch.outer(pos, inv)
    emb = torch.cat((f, f), -1).expand(*shape[:-2], S, D)
    return emb.cos().contiguous(), emb.sin().contiguous()


def _run(
    device,
    dtype,
    shape,
    layout="hf",
    cos_kind="1sd",
    cos_dtype="same",
    general=True,
    grad_layout="like",
    sections=None,
    planes=1,
):
    B, S, Hq, Hk, D = shape
    ud = 2 if layout == "bshd" else 1
    qd = torch.randn(B, S, Hq, D, device=device, dtype=dtype)
    kd = torch.randn(B, S, Hk, D, device=device, dtype=dtype) * 2
    if sections is None:
        cos, sin = _tables(cos_kind, B, S, D, device, general)
    else:
        cos, sin = _tables(None, B, S, D, device, general, planes=planes)
    tdt = dtype if cos_dtype == "same" else torch.float32
    if dtype == torch.float64 and cos_dtype == "same":
        tdt = torch.float64
    cos, sin = cos.to(tdt), sin.to(tdt)

    def apply(q, k, c, s):
        if sections is None:
            return rope(q, k, c, s, unsqueeze_dim=ud)
        return mrope(q, k, c, s, sections, unsqueeze_dim=ud)

    def apply_ref(q, k, c, s):
        if sections is None:
            return rope_ref(q, k, c, s, ud)
        return mrope_ref(q, k, c, s, sections, ud)

    ql, q = _leaf_and_view(qd, layout)
    kl, k = _leaf_and_view(kd, layout)
    q_before, k_before = q.detach().clone(), k.detach().clone()
    qo, ko = apply(q, k, cos, sin)
    assert qo.dtype == dtype and ko.dtype == dtype and qo.shape == q.shape and ko.shape == k.shape
    assert torch.equal(q.detach(), q_before) and torch.equal(k.detach(), k_before), "inputs were modified"
    # outputs keep the inputs' memory layout (HF's transposed view stays (B, S, H, D) in memory)
    assert qo.stride() == q.stride() and ko.stride() == k.stride()

    # gradients of the outputs: in SDPA's layout (like the outputs) or contiguous (B, H, S, D)
    def grad_like(t):
        g = torch.randn(t.shape, device=device, dtype=dtype)
        if grad_layout == "like":
            g = torch.empty_like(t).copy_(g)
        return g

    gq, gk = grad_like(qo), grad_like(ko)
    torch.autograd.backward([qo, ko], [gq, gk])
    if grad_layout == "like":
        assert ql.grad.is_contiguous() and kl.grad.is_contiguous()

    # float64 reference (HF formula) and the same formula in the inputs' precision
    q64l, q64 = _leaf_and_view(qd.double(), layout)
    k64l, k64 = _leaf_and_view(kd.double(), layout)
    r64 = apply_ref(q64, k64, cos.double(), sin.double())
    torch.autograd.backward(list(r64), [gq.double(), gk.double()])
    qlo_l, qlo = _leaf_and_view(qd, layout)
    klo_l, klo = _leaf_and_view(kd, layout)
    rlo = apply_ref(qlo, klo, cos, sin)
    torch.autograd.backward(list(rlo), [gq.to(rlo[0].dtype), gk.to(rlo[1].dtype)])
    assert_close_to_ref(qo, r64[0], rlo[0], "q_embed")
    assert_close_to_ref(ko, r64[1], rlo[1], "k_embed")
    assert_close_to_ref(ql.grad, q64l.grad, qlo_l.grad, "dq")
    assert_close_to_ref(kl.grad, k64l.grad, klo_l.grad, "dk")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("cos_kind", ["1sd", "bsd", "sd"])
def test_forward_backward(device, shape, cos_kind):
    for dtype in _all_dtypes(device):
        _run(device, dtype, shape, cos_kind=cos_kind)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["hf", "contiguous", "bshd"])
@pytest.mark.parametrize("cos_dtype", ["same", "fp32"])
@pytest.mark.parametrize("grad_layout", ["like", "contiguous"])
def test_layouts_and_table_dtypes(device, layout, cos_dtype, grad_layout):
    for dtype in _all_dtypes(device):
        for shape in [(2, 6, 6, 2, 128), (2, 3, 3, 5, 92)]:
            _run(device, dtype, shape, layout, "bsd", cos_dtype, grad_layout=grad_layout)
            _run(device, dtype, shape, layout, "sd", cos_dtype, general=False, grad_layout=grad_layout)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("shape", CUDA_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_large(shape, dtype):
    _run("cuda", dtype, shape, "hf", "1sd", "same", general=False)
    _run("cuda", dtype, shape, "contiguous", "bsd", "fp32", grad_layout="contiguous")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "D,sections", [(128, [16, 24, 24]), (8, [1, 2, 1]), (8, [0, 4, 0]), (92, [10, 20, 16]), (2, [0, 0, 1])]
)
@pytest.mark.parametrize("layout", ["hf", "bshd"])
def test_mrope(device, D, sections, layout):
    for dtype in _all_dtypes(device):
        for planes in (2, 1):  # per-batch tables and (3, 1, S, D) broadcast over the batch
            _run(device, dtype, (2, 5, 6, 2, D), layout, sections=sections, planes=planes)
    _run(device, torch.bfloat16, (2, 5, 6, 2, D), layout, cos_dtype="fp32", sections=sections, planes=2)


def _hf_llama_apply():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    return apply_rotary_pos_emb


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equals_transformers_apply_rotary_pos_emb(device, dtype):
    if device == "cuda" and dtype == torch.float64:
        pytest.skip("float64 is CPU-only")
    hf = _hf_llama_apply()
    B, S, Hq, Hk, D = 2, 11, 6, 2, 64
    q = torch.randn(B, S, Hq * D, device=device, dtype=dtype).view(B, S, Hq, D).transpose(1, 2)
    k = torch.randn(B, S, Hk * D, device=device, dtype=dtype).view(B, S, Hk, D).transpose(1, 2)
    for general in (False, True):
        cos, sin = (t.to(dtype) for t in _tables("bsd", B, S, D, device, general))
        want = hf(q, k, cos, sin)
        got = liger_rotary_pos_emb(q, k, cos, sin, position_ids=torch.arange(S, device=device)[None])
        tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, **tol)
        # unsqueeze_dim=2 on (B, S, H, D) tensors
        got2 = liger_rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin, unsqueeze_dim=2)
        want2 = hf(q.transpose(1, 2), k.transpose(1, 2), cos, sin, unsqueeze_dim=2)
        for g, w in zip(got2, want2):
            torch.testing.assert_close(g, w, **tol)


@pytest.mark.parametrize("device", DEVICES)
def test_mrope_equals_transformers_qwen2_vl(device):
    """transformers 5.x: Qwen2VLRotaryEmbedding recomposes the (3, B, S, D/2) frequencies by
    mrope_section and calls the plain apply_rotary_pos_emb; Liger's API takes the (3, B, S, D)
    cos/sin of cat(freqs, freqs) per plane and the sections. Both must agree."""
    from transformers.models.qwen2_vl import modeling_qwen2_vl as m

    B, S, H, D = 2, 7, 4, 32
    section = [4, 6, 6]
    pos = torch.randint(0, 50, (3, B, S), device=device).double()
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, device=device, dtype=torch.float64) / D))
    freqs = pos[..., None] * inv  # (3, B, S, D/2)
    emb = types.SimpleNamespace(mrope_section=section)
    cos_hf = m.Qwen2VLRotaryEmbedding.recomposition_frequencies(emb, freqs.cos())
    sin_hf = m.Qwen2VLRotaryEmbedding.recomposition_frequencies(emb, freqs.sin())
    q = torch.randn(B, H, S, D, device=device, dtype=torch.float64)
    k = torch.randn(B, 2, S, D, device=device, dtype=torch.float64)
    if device == "cuda":
        q, k, cos_hf, sin_hf, freqs = (t.float() for t in (q, k, cos_hf, sin_hf, freqs))
    want = m.apply_rotary_pos_emb(q, k, cos_hf, sin_hf)
    full = torch.cat((freqs, freqs), -1)
    got = liger_multimodal_rotary_pos_emb(q, k, full.cos(), full.sin(), section)
    got2 = liger_qwen2vl_mrope(q, k, full.cos(), full.sin(), section)
    for g, g2, w in zip(got, got2, want):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(g2, g, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_inputs_without_contiguous_copies(device):
    """Views HF builds: q, k sliced from a fused qkv projection (Phi-3), the rotary part of a
    head (partial rotary), tables sliced from a cached (max_pos, D) buffer and expanded over the
    batch, and a non-unit last stride (copied)."""
    B, S, H, D = 2, 5, 4, 64
    qkv = torch.randn(B, S, (H + 2 + 2) * D, device=device)
    q = qkv[..., : H * D].view(B, S, H, D).transpose(1, 2)
    k = qkv[..., H * D : (H + 2) * D].view(B, S, 2, D).transpose(1, 2)
    cache_c, cache_s = _tables("sd", B, 40, D, device, True)
    cos = cache_c[7 : 7 + S][None].expand(B, S, D)
    sin = cache_s[7 : 7 + S][None].expand(B, S, D)
    for args in [
        (q, k, cos, sin),
        (q[..., :32], k[..., :32], cos[..., :32], sin[..., :32]),  # partial rotary
        (q.transpose(-1, -2).contiguous().transpose(-1, -2), k, cos, sin),  # last stride != 1
    ]:
        got = rope(*args)
        want = rope_ref(*(t.double() for t in args))
        for g, w in zip(got, want):
            torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5)
            assert g.stride(-1) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_misaligned_and_odd_strides(device):
    """Storage offsets and strides that rule out 16-byte vectors (narrower vector widths)."""
    B, S, H, D = 2, 6, 3, 128
    for dtype in (torch.bfloat16, torch.float32):
        base = torch.randn(B * S * H * D + 3, device=device, dtype=dtype)
        q = base[1 : 1 + B * S * H * D].view(B, S, H, D).transpose(1, 2)  # offset 1 element
        big = torch.randn(B, S, H, D + 2, device=device, dtype=dtype)
        k = big[..., 2:].transpose(1, 2)  # row stride D + 2
        cb = torch.rand(S * D + 1, device=device)
        cos = cb[1:].view(1, S, D).to(dtype)
        sin = (torch.rand(1, S, D, device=device) * 2 - 1).to(dtype)
        got = rope(q, k, cos, sin)
        want = rope_ref(q.double(), k.double(), cos.double(), sin.double())
        for g, w in zip(got, want):
            tol = 1e-5 if dtype == torch.float32 else 2e-2
            torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_layout_follows_grad_output(device):
    B, S, H, D = 2, 4, 3, 16
    cos, sin = _tables("1sd", B, S, D, device)
    gq = torch.randn(B, S, H, D, device=device).transpose(1, 2)  # flash-attention's dq layout
    dq, dk = torch.ops.liger.rope_bwd(gq, gq.contiguous(), cos, sin)
    assert dq.stride() == gq.stride() and dk.is_contiguous()
    torch.testing.assert_close(dq, dk)


@pytest.mark.parametrize("device", DEVICES)
def test_forward_only_and_partial_grads(device):
    B, S, H, D = 2, 3, 2, 8
    q = torch.randn(B, H, S, D, device=device, requires_grad=True)
    k = torch.randn(B, H, S, D, device=device)
    cos, sin = _tables("1sd", B, S, D, device)
    with torch.no_grad():
        qo, ko = rope(q, k, cos, sin)
    assert not qo.requires_grad
    qo, ko = rope(q, k, cos, sin)  # only q requires grad; only q's output is used
    (qo * 3).sum().backward()
    q2 = q.detach().clone().requires_grad_(True)
    (rope_ref(q2, k, cos, sin)[0] * 3).sum().backward()
    torch.testing.assert_close(q.grad, q2.grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mrope_case", [False, True])
@pytest.mark.parametrize("used", ["q", "k"])
@pytest.mark.parametrize("layout", ["hf", "bshd"])
def test_one_output_used(device, mrope_case, used, layout):
    """Only one of q_out, k_out reaches the loss: the other's gradient is absent (not zero-filled),
    its operand enters the backward kernel with zero heads, its input gets no gradient; the tables'
    gradients (when they require grad) still match the reference."""
    B, S, Hq, Hk, D = 2, 5, 3, 2, 24
    ud = 2 if layout == "bshd" else 1
    qd = torch.randn(B, S, Hq, D, device=device, dtype=torch.float64 if device == "cpu" else torch.float32)
    kd = torch.randn(B, S, Hk, D, device=device, dtype=qd.dtype)
    planes = B if mrope_case else None
    cos, sin = (t.to(qd.dtype) for t in _tables("1sd", B, S, D, device, planes=planes))

    def run(fn, ref):
        ql, q = _leaf_and_view(qd, layout)
        kl, k = _leaf_and_view(kd, layout)
        c, s_ = cos.clone().requires_grad_(True), sin.clone().requires_grad_(True)
        args = (q, k, c, s_, [3, 4, 5]) if mrope_case else (q, k, c, s_)
        qo, ko = fn(*args, unsqueeze_dim=ud) if not ref else fn(*args, ud)
        out = qo if used == "q" else ko
        (out * torch.arange(out.numel(), device=device).view(out.shape)).sum().backward()
        return ql.grad, kl.grad, c.grad, s_.grad

    got = run(mrope if mrope_case else rope, False)
    want = run(mrope_ref if mrope_case else rope_ref, True)
    unused = 1 if used == "q" else 0
    assert got[unused] is None or not got[unused].any()
    for i in range(4):
        if i != unused:
            torch.testing.assert_close(got[i], want[i], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_autograd_is_cpp(device):
    """The backward runs in C++ (csrc/aten/autograd/rope_autograd.cpp), not as a Python autograd.Function:
    at these kernels' speed a Python backward cost as much as the GPU work of a fwd+bwd step."""
    B, S, H, D = 1, 3, 2, 8
    q = torch.randn(B, H, S, D, device=device, requires_grad=True)
    cos, sin = _tables("1sd", B, S, D, device)
    c3, s3 = _tables(None, B, S, D, device, planes=1)
    for qo, ko in (rope(q, q, cos, sin), mrope(q, q, c3, s3, [1, 1, 2])):
        assert qo.grad_fn is not None and qo.grad_fn is ko.grad_fn
        assert not isinstance(qo.grad_fn, torch.autograd.function.BackwardCFunction)


@pytest.mark.parametrize("device", DEVICES)
def test_empty(device):
    for B, S, H in [(0, 4, 2), (2, 0, 2), (2, 3, 0)]:
        q = torch.randn(B, H, S, 8, device=device, requires_grad=True)
        k = torch.randn(B, 1, S, 8, device=device, requires_grad=True)
        cos, sin = torch.rand(S, 8, device=device), torch.rand(S, 8, device=device)
        qo, ko = rope(q, k, cos, sin)
        assert qo.shape == q.shape and ko.shape == k.shape
        (qo.sum() + ko.sum()).backward()
        assert q.grad.shape == q.shape


def test_gradcheck_float64_cpu():
    B, S, D = 2, 3, 6
    kw = dict(dtype=torch.float64, requires_grad=True)
    for tshape in [(1, S, D), (B, S, D), (S, D)]:
        q = torch.randn(B, 3, S, D, **kw)
        k = torch.randn(B, 1, S, D, **kw)
        cos = torch.randn(tshape, **kw)
        sin = torch.randn(tshape, **kw)
        assert torch.autograd.gradcheck(lambda *a: rope(*a), (q, k, cos, sin))
        qs = torch.randn(B, S, 3, D, **kw)
        ks = torch.randn(B, S, 2, D, **kw)
        assert torch.autograd.gradcheck(lambda *a: rope(*a, unsqueeze_dim=2), (qs, ks, cos, sin))
    for planes in (B, 1):
        q = torch.randn(B, 2, S, 8, **kw)
        k = torch.randn(B, 1, S, 8, **kw)
        cos = torch.randn(3, planes, S, 8, **kw)
        sin = torch.randn(3, planes, S, 8, **kw)
        assert torch.autograd.gradcheck(lambda *a: mrope(*a, [1, 2, 1]), (q, k, cos, sin))
    # a q/k-only gradient (tables without grad, the usual case) and a strided HF view
    x = torch.randn(B, S, 2 * D, **kw)
    cos, sin = torch.randn(S, D, dtype=torch.float64), torch.randn(S, D, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda x: rope(x.view(B, S, 2, D).transpose(1, 2), x.view(B, S, 2, D).transpose(1, 2), cos, sin), (x,)
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    B, S, H, D = 2, 5, 3, 16
    x = torch.randn(B, S, H * D, device=device, dtype=dtype)
    q_hf = x.view(B, S, H, D).transpose(1, 2)
    k_c = torch.randn(B, 1, S, D, device=device, dtype=dtype)
    cos, sin = (t.to(dtype) for t in _tables("1sd", B, S, D, device))
    cos32, sin32 = _tables("sd", B, S, D, device)
    q_g = x.clone().requires_grad_(True).view(B, S, H, D).transpose(1, 2)
    # autograd through an HF view with float32 tables; (B, S, H, D) inputs with a non-dense k
    torch.library.opcheck(torch.ops.liger.rope_fwd, (q_g, k_c, cos32, sin32, 1))
    torch.library.opcheck(
        torch.ops.liger.rope_fwd, (x.view(B, S, H, D), x.view(B, S, H, D)[:, :, :1], cos, sin, 2)
    )
    torch.library.opcheck(torch.ops.liger.rope_bwd, (q_hf, k_c, cos, sin, 1))
    c3, s3 = (t.to(dtype) for t in _tables(None, B, S, D, device, planes=B))
    q = q_hf.detach().requires_grad_(True)
    torch.library.opcheck(torch.ops.liger.mrope_fwd, (q, k_c, c3, s3, [2, 3, 3], 1))
    torch.library.opcheck(torch.ops.liger.mrope_bwd, (q.detach(), k_c, c3, s3, [2, 3, 3], 1))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    B, S, H, D = 2, 6, 4, 32
    cos, sin = _tables("1sd", B, S, D, device, general=False)
    c3, s3 = _tables(None, B, S, D, device, planes=B)

    def f(xq, xk):
        q = xq.view(B, S, H, D).transpose(1, 2)
        k = xk.view(B, S, 2, D).transpose(1, 2)
        qo, ko = liger_rotary_pos_emb(q, k, cos, sin)
        qm, km = liger_multimodal_rotary_pos_emb(qo, ko, c3, s3, [4, 6, 6])
        return (qm.square().sum() + (km * 2).square().sum()) + qo.sum()

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    xq = torch.randn(B, S, H * D, device=device, requires_grad=True)
    xk = torch.randn(B, S, 2 * D, device=device, requires_grad=True)
    cf(xq, xk).backward()
    got = [xq.grad.clone(), xk.grad.clone()]
    xq.grad = xk.grad = None
    f(xq, xk).backward()
    torch.testing.assert_close(got[0], xq.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], xk.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_name_the_argument(device):
    B, S, H, D = 2, 4, 3, 8
    q = torch.randn(B, H, S, D, device=device)
    k = torch.randn(B, 1, S, D, device=device)
    cos, sin = torch.rand(1, S, D, device=device), torch.rand(1, S, D, device=device)
    op, bwd, mop = torch.ops.liger.rope_fwd, torch.ops.liger.rope_bwd, torch.ops.liger.mrope_fwd
    cases = [
        (lambda: op(q[..., :7], k[..., :7], cos[..., :7], sin[..., :7]), "'q'.*even"),
        (lambda: op(q, k[..., :6], cos, sin), "'k'.*head dim"),
        (lambda: op(q, k[:, :, :3], cos, sin), "'k'.*sequence"),
        (lambda: op(q, k[:1], cos, sin), "'k'.*batch"),
        (lambda: op(q, k, cos[:, :3], sin), "'cos'.*sequence length"),
        (lambda: op(q, k, cos, sin[..., :6]), "'sin'.*head dim"),
        (lambda: op(q, k, cos.expand(3, S, D), sin), "'cos'.*batch"),
        (lambda: op(q, k, cos[0, 0], sin), "'cos'.*shape"),
        (lambda: op(q.int(), k.int(), cos, sin), "'q'.*float32"),
        (lambda: op(q, k.double(), cos, sin), "'k'.*dtype"),
        (lambda: op(q.bfloat16(), k.bfloat16(), cos.half(), sin.half()), "'cos'.*float32 or q's dtype"),
        (lambda: op(q.bfloat16(), k.bfloat16(), cos, sin.bfloat16()), "'sin'.*dtype"),
        (lambda: op(q[0], k[0], cos, sin), "'q'.*4-D"),
        (lambda: op(q, k, cos, sin, 0), "'unsqueeze_dim'"),
        (lambda: op(q, k, cos, sin, 3), "'unsqueeze_dim'"),
        (lambda: bwd(q[..., :7], k[..., :7], cos[..., :7], sin[..., :7]), "'dq_out'.*even"),
        (lambda: bwd(q, k[:, :, :3], cos, sin), "'dk_out'"),
        (lambda: mop(q, k, cos, sin, [1, 1, 2]), "'cos'.*\\(3, B, S, D\\)"),
        (lambda: mop(q, k, cos.expand(3, B, S, D), sin.expand(3, B, S, D), [1, 1, 1]), "'mrope_section'"),
        (lambda: mop(q, k, cos.expand(3, B, S, D), sin.expand(3, B, S, D), [2, 2]), "'mrope_section'"),
        (lambda: mop(q, k, cos.expand(3, B, S, D), sin.expand(3, B, S, D), [5, -1, 0]), "'mrope_section'"),
    ]
    for fn, pattern in cases:
        with pytest.raises(RuntimeError, match=pattern):
            fn()
    if CUDA_OK and device == "cpu":  # mixed devices: CPU tables with CUDA q, k
        qc, kc = q.cuda(), k.cuda()
        with pytest.raises(RuntimeError, match="'cos'.*device"):
            op(qc, kc, cos, sin.cuda())
        with pytest.raises(RuntimeError, match="'k'.*device"):
            op(qc, k, cos.cuda(), sin.cuda())


def test_functional_signatures():
    import inspect

    from liger_cpp.transformers import functional

    assert list(inspect.signature(liger_rotary_pos_emb).parameters) == [
        "q",
        "k",
        "cos",
        "sin",
        "position_ids",
        "unsqueeze_dim",
        "rotary_dim",
    ]
    assert list(inspect.signature(functional.liger_rope).parameters) == list(
        inspect.signature(liger_rotary_pos_emb).parameters
    )
    for f in (functional.liger_qwen2vl_mrope, liger_multimodal_rotary_pos_emb):
        assert list(inspect.signature(f).parameters) == [
            "q",
            "k",
            "cos",
            "sin",
            "mrope_section",
            "unsqueeze_dim",
        ]
