"""Softmax, sparsemax, group norm and modulated RMSNorm
(liger_cpp.transformers.torch_composed_ops, composed of PyTorch's ops; Liger's names through the
compatibility package): forward and every
gradient against independent float64 references written here from the papers' formulas (sparsemax
by its definition, a loop over each row's support), every dtype, odd shapes, grad_output != 1,
gradcheck, Liger's calling conventions, errors."""

import pytest
import torch
from conftest import DEVICES
from utils import assert_close_to_ref, check_against_ref

from liger_cpp.transformers.dyt import LigerDyT, LigerDyTFunction
from liger_cpp.transformers.poly_norm import LigerPolyNorm, LigerPolyNormFunction
from liger_cpp.transformers.torch_composed_ops import (
    LigerAttnResFunction,
    LigerGroupNorm,
    LigerGroupNormFunction,
    LigerModulatedRMSNorm,
    LigerModulatedRMSNormFunction,
    LigerMultiTokenAttentionFunction,
    LigerSoftmax,
    LigerSoftmaxFunction,
    LigerSparsemax,
    LigerSparsemaxFunction,
    liger_sparsemax,
)

DTYPES = [torch.float32, torch.bfloat16]
SHAPES = [(1, 1), (3, 5), (2, 7, 33), (4, 1000)]


def _sparsemax_ref(x, dim):
    """By the definition: for each slice, the largest k with 1 + k z_(k) > sum of the k largest,
    tau = (that sum - 1) / k, out = max(x - tau, 0); slice by slice in Python."""
    x = x.movedim(dim, -1)
    flat = x.reshape(-1, x.shape[-1])
    out = torch.empty_like(flat)
    for i, row in enumerate(flat):
        z = sorted(row.tolist(), reverse=True)
        total, k_best, s_best = 0.0, 1, z[0]
        for k, v in enumerate(z, start=1):
            total += v
            if 1 + k * v > total:
                k_best, s_best = k, total
        tau = (s_best - 1) / k_best
        out[i] = torch.clamp(row - tau, min=0)
    return out.reshape(x.shape).movedim(-1, dim)


def _group_norm_ref(x, w, b, groups, eps):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    mean = g.mean(-1, keepdim=True)
    var = ((g - mean) ** 2).mean(-1, keepdim=True)
    y = ((g - mean) / torch.sqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.dim() - 2)
    return y * w.reshape(shape) + b.reshape(shape)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax(device, dtype, shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(2)) * 3
    check_against_ref(
        LigerSoftmaxFunction.apply,
        lambda x: torch.exp(x - torch.logsumexp(x, -1, keepdim=True)),
        [x],
        dtype,
        device,
        ["x"],
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,dim", [((3, 5), -1), ((2, 7, 33), 1), ((4, 300), 0), ((1, 1), -1)])
def test_sparsemax(device, dtype, shape, dim):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3)) * 2
    y = LigerSparsemaxFunction.apply(x.to(device, dtype), dim)
    y64 = _sparsemax_ref(x.double(), dim).to(device)
    y_lo = _sparsemax_ref(x.to(dtype).double(), dim).to(device, dtype)
    assert_close_to_ref(y, y64, y_lo, "y", factor=4.0, extra_ulps=4.0)
    torch.testing.assert_close(y.double().sum(dim), torch.ones_like(y64.sum(dim)), rtol=0, atol=2e-2)
    # gradient: the support's Jacobian, diag(s) - s s^T / |s| (from the definition)
    xd = x.double().to(device).requires_grad_()
    dy = torch.randn(shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(device)
    liger_sparsemax(xd, dim).backward(dy)
    s = (_sparsemax_ref(x.double(), dim).to(device) > 0).double()
    sd = (s * dy).sum(dim, keepdim=True) / s.sum(dim, keepdim=True)
    torch.testing.assert_close(xd.grad, s * (dy - sd), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,groups", [((2, 6, 5), 3), ((1, 4, 3, 3), 2), ((3, 8, 17), 8), ((2, 5, 1), 1)])
def test_group_norm(device, dtype, shape, groups):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(shape, generator=g) + 1
    w, b = torch.randn(shape[1], generator=g), torch.randn(shape[1], generator=g)
    check_against_ref(
        lambda x, w, b: LigerGroupNormFunction.apply(x, w, b, shape[1], groups, 1e-6),
        lambda x, w, b: _group_norm_ref(x, w, b, groups, 1e-6),
        [x, w, b],
        dtype,
        device,
        ["x", "w", "b"],
    )


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(6)

    def r(*s):
        return torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)

    assert torch.autograd.gradcheck(LigerSoftmaxFunction.apply, (r(3, 5),))
    assert torch.autograd.gradcheck(lambda x: LigerSparsemaxFunction.apply(x, -1), (r(3, 6),))
    assert torch.autograd.gradcheck(
        lambda x, w, b: LigerGroupNormFunction.apply(x, w, b, 4, 2, 1e-5), (r(2, 4, 3), r(4), r(4))
    )


def test_modules_and_liger_names():
    """Liger's modules (constructors, initialisation) and the compatibility package's names are
    these objects."""
    from compat_env import ensure_compat

    ensure_compat()
    import liger_kernel.ops as lko
    import liger_kernel.transformers as lkt
    from liger_kernel.transformers import functional as lkf

    d = LigerDyT(8)
    assert d.alpha.item() == 0.5 and d.beta is not None and torch.equal(d.gamma, torch.ones(8))
    assert LigerDyT(8, beta=False).beta is None
    p = LigerPolyNorm()
    assert torch.allclose(p.weight, torch.full((3,), 1 / 3)) and p.bias.item() == 1.0
    x = torch.randn(2, 8)
    torch.testing.assert_close(LigerSoftmax()(x), torch.softmax(x, -1))
    assert LigerSparsemax(dim=0)(x).sum(0).allclose(torch.ones(8))
    gn = LigerGroupNorm(4, 2)
    assert torch.equal(gn.weight, torch.ones(4)) and torch.equal(gn.bias, torch.zeros(4))
    assert torch.equal(LigerGroupNorm(4, 2, init_fn="zeros").weight, torch.zeros(4))
    for name in ("LigerDyT", "LigerPolyNorm", "LigerSoftmax", "LigerSparsemax"):
        assert getattr(lkt, name) is globals()[name]
    for name in (
        "LigerDyTFunction",
        "LigerPolyNormFunction",
        "LigerSoftmaxFunction",
        "LigerGroupNormFunction",
    ):
        assert getattr(lko, name) is globals()[name]
    torch.testing.assert_close(lkf.liger_sparsemax(x), liger_sparsemax(x))
    y = lkf.liger_dyt(x, torch.tensor([0.5]), torch.ones(8), None)
    torch.testing.assert_close(y, torch.tanh(0.5 * x))


def test_errors():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="argument 'gamma'"):
        LigerDyTFunction.apply(x, torch.tensor([0.5]), torch.ones(7), None)
    with pytest.raises(ValueError, match="argument 'W'"):
        LigerPolyNormFunction.apply(x, torch.ones(2), torch.tensor(0.0))
    with pytest.raises(ValueError, match="argument 'X'"):
        LigerGroupNormFunction.apply(x, torch.ones(8), torch.zeros(8), 8, 2, 1e-6)
    with pytest.raises(ValueError, match="argument 'num_groups'"):
        LigerGroupNorm(6, 4)
    with pytest.raises(ValueError, match="argument 'init_fn'"):
        LigerGroupNorm(4, 2, init_fn="normal")


def _modulated_ref(x, w, scale, shift, eps, offset, rows):
    """(1 + scale) * x / rms(x) * (offset + w) + shift, scale's row r on x's r-th block of rows."""
    h = x.shape[-1]
    n = x.numel() // h
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    if w is not None:
        y = y * (offset + w)
    y = y.reshape(rows, n // rows, h) * (1 + scale.reshape(rows, 1, h))
    if shift is not None:
        y = y + shift.reshape(rows, 1, h)
    return y.reshape(x.shape)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("casting", ["llama", "gemma", "none"])
@pytest.mark.parametrize("rows,with_shift,with_w", [(1, True, True), (2, False, True), (6, True, False)])
def test_modulated_rms_norm(device, dtype, casting, rows, with_shift, with_w):
    """Scale / shift of 1 (per batch of one), 2 (per sample: (B, 1, H)) and 6 (per token) rows."""
    g = torch.Generator().manual_seed(7)
    h, offset = 48, 1.0 if casting == "gemma" else 0.0
    x = torch.randn(2, 3, h, generator=g)
    w = torch.randn(h, generator=g) * 0.3 + 1
    scale = torch.randn(rows, h, generator=g) * 0.2
    shift = torch.randn(rows, h, generator=g) if with_shift else None
    ins = [x, scale] + ([shift] if with_shift else []) + ([w] if with_w else [])

    def split(args):
        x_, s_ = args[0], args[1]
        sh = args[2] if with_shift else None
        w_ = args[-1] if with_w else None
        return x_, w_, s_, sh

    def ours(*args):
        x_, w_, s_, sh = split(args)
        return LigerModulatedRMSNormFunction.apply(x_, w_, s_, sh, 1e-6, offset, casting)

    def ref(*args):
        x_, w_, s_, sh = split(args)
        return _modulated_ref(x_, w_, s_, sh, 1e-6, offset, rows)

    names = ["x", "scale"] + (["shift"] if with_shift else []) + (["w"] if with_w else [])
    check_against_ref(ours, ref, ins, dtype, device, names)


def test_modulated_rms_norm_module_and_errors():
    m = LigerModulatedRMSNorm(8, init_fn="zeros", offset=1.0, casting_mode="gemma")
    assert torch.equal(m.weight, torch.zeros(8)) and m.in_place is False
    x = torch.randn(4, 8)
    torch.testing.assert_close(
        m(x, torch.zeros(1, 8)), x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)
    )
    assert LigerModulatedRMSNorm(8, elementwise_affine=False).weight is None
    with pytest.raises(ValueError, match="argument 'scale'"):
        m(x, torch.zeros(3, 8))
    with pytest.raises(ValueError, match="argument 'shift'"):
        m(x, torch.zeros(2, 8), torch.zeros(1, 8))


def _attn_res_ref(v, wq, wn, eps):
    k = v / torch.sqrt((v * v).mean(-1, keepdim=True) + eps) * wn
    alpha = torch.softmax((k * wq).sum(-1), dim=0)
    return (alpha.unsqueeze(-1) * v).sum(0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(8, 2, 5, 64), (3, 7, 33), (1, 4, 16)])
def test_attn_res(device, dtype, shape):
    """N blocks [N, B, T, D] or [N, B*T, D]; one block is the identity."""
    g = torch.Generator().manual_seed(8)
    v = torch.randn(shape, generator=g)
    wq = torch.randn(shape[-1], generator=g) * 0.5
    wn = torch.randn(shape[-1], generator=g) * 0.2 + 1
    check_against_ref(
        lambda v, q, n: LigerAttnResFunction.apply(v, q, n, 1e-6),
        lambda v, q, n: _attn_res_ref(v, q, n, 1e-6),
        [v, wq, wn],
        dtype,
        device,
        ["V", "w_query", "w_norm"],
    )


def test_attn_res_list_and_errors():
    from liger_cpp.transformers.torch_composed_ops import liger_attn_res

    v = torch.randn(4, 3, 8)
    wq, wn = torch.randn(8), torch.ones(8)
    torch.testing.assert_close(liger_attn_res(list(v), wq, wn), liger_attn_res(v, wq, wn))
    torch.testing.assert_close(liger_attn_res(v[:1], wq, wn), v[0])
    with pytest.raises(ValueError, match="'w_query'"):
        liger_attn_res(v, torch.randn(7), wn)


def _mta_ref(scores, weight, bias, padding, sparse):
    """Written out: causal mask (the future at -1e9), softmax / sparsemax per row, the conv as
    an explicit sum over channels and kernel taps, the future of the result zeroed."""
    b, c_in, L, _ = scores.shape
    future = torch.ones(L, L, dtype=torch.bool).triu(1)
    s = scores.masked_fill(future, -1e9)
    p = _sparsemax_ref(s, -1) if sparse else torch.softmax(s, -1)
    c_out, _, k, _ = weight.shape
    pp = torch.nn.functional.pad(p, (padding,) * 4)
    lo = L + 2 * padding - k + 1
    out = torch.zeros(b, c_out, lo, lo, dtype=scores.dtype)
    for i in range(k):
        for j in range(k):
            out += torch.einsum("bcxy,oc->boxy", pp[:, :, i : i + lo, j : j + lo], weight[:, :, i, j])
    if bias is not None:
        out += bias[None, :, None, None]
    return out.masked_fill(torch.ones(lo, lo, dtype=torch.bool).triu(1), 0.0)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_multi_token_attention(sparse, bias):
    """Forward against the written-out reference (float64 and float32), and gradcheck."""
    g = torch.Generator().manual_seed(9)
    scores = torch.randn(2, 3, 7, 7, generator=g, dtype=torch.float64)
    weight = torch.randn(4, 3, 3, 3, generator=g, dtype=torch.float64) * 0.3
    b = torch.randn(4, generator=g, dtype=torch.float64) if bias else None
    want = _mta_ref(scores, weight, b, 1, sparse)
    got = LigerMultiTokenAttentionFunction.apply(scores, weight, b, 1, 1, 1, 1, sparse)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    got32 = LigerMultiTokenAttentionFunction.apply(
        scores.float(), weight.float(), None if b is None else b.float(), 1, 1, 1, 1, sparse
    )
    torch.testing.assert_close(got32.double(), want, rtol=1e-5, atol=1e-5)
    ins = [scores.requires_grad_(), weight.requires_grad_()] + ([b.requires_grad_()] if bias else [])
    assert torch.autograd.gradcheck(
        lambda s, w, *bb: LigerMultiTokenAttentionFunction.apply(
            s, w, bb[0] if bb else None, 1, 1, 1, 1, sparse
        ),
        ins,
    )


def test_multi_token_attention_module():
    from liger_cpp.transformers.torch_composed_ops import LigerMultiTokenAttention

    m = LigerMultiTokenAttention(3, 3, 3, padding=1)
    assert m.weight.shape == (3, 3, 3, 3) and torch.equal(m.bias, torch.zeros(3))
    y = m(torch.randn(1, 3, 5, 5))
    assert y.shape == (1, 3, 5, 5) and torch.equal(y.triu(1), torch.zeros_like(y))
    assert LigerMultiTokenAttention(2, 2, 1, bias=False).bias is None
    with pytest.raises(ValueError, match="argument 'scores'"):
        m(torch.randn(3, 5, 5))


def test_experimental_embedding_and_ce_output():
    """Liger's experimental LigerEmbedding (padding row zeroed, padding positions' output zero)
    and CrossEntropyOutput are liger_cpp's objects through the compatibility package."""
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.ops import LigerEmbeddingFunction
    from liger_kernel.transformers.experimental import LigerEmbedding
    from liger_kernel.transformers.functional import CrossEntropyOutput

    from liger_cpp.ops.ce_output import CrossEntropyOutput as ours

    assert CrossEntropyOutput is ours
    torch.manual_seed(0)
    e = LigerEmbedding(10, 4, padding_idx=2)
    assert torch.equal(e.weight[2], torch.zeros(4))
    idx = torch.tensor([[1, 2, 9], [2, 0, 3]])
    y = e(idx)
    torch.testing.assert_close(y[0, 0], e.weight[1])
    assert torch.equal(y[idx == 2], torch.zeros(2, 4))
    y.sum().backward()
    assert e.weight.grad[1].eq(1).all() and e.weight.grad[0].eq(1).all()
    w = torch.randn(5, 3, requires_grad=True)
    torch.testing.assert_close(LigerEmbeddingFunction.apply(w, torch.tensor([4, 0])), w[[4, 0]])
