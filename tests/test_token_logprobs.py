"""Per-token log-probabilities and entropy from hidden states (liger_cpp.ops.fused_linear_token_logprobs,
Liger's LigerFusedLinearScaledCrossEntropyFunction) against TRL's selective_log_softmax and the
entropy of the full logits in float64, with upstream gradients on both outputs."""

import math

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from rl_reference import acc_dtype, acc_ulps, head_logits, leaf, tol_close

from liger_cpp.ops import (
    LigerFusedLinearScaledCrossEntropyFunction,
    fused_linear_token_logprobs,
    fused_selective_log_softmax,
    selective_log_softmax,
)


def reference(x, w, b, t, temperature=1.0, ignore_index=-100):
    logits = head_logits(x, w, b).to(acc_dtype(x)) / temperature
    lps = torch.log_softmax(logits, dim=-1)
    valid = t != ignore_index
    lp = lps.gather(-1, torch.where(valid, t, 0).unsqueeze(-1)).squeeze(-1) * valid
    ent = -(lps.exp() * lps).sum(-1) * valid
    return lp, ent


def _make(device, dtype, M=94, H=31, V=123, bias=True, n_ignored=7, lead=None, seed=0):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 is CPU-only")
    gen = torch.Generator().manual_seed(seed)
    shape = lead or (M,)
    x = (torch.randn(*shape, H, generator=gen, dtype=torch.float64)).to(device, dtype).requires_grad_(True)
    w = (
        (torch.randn(V, H, generator=gen, dtype=torch.float64) * 2 / math.sqrt(H))
        .to(device, dtype)
        .requires_grad_()
    )
    b = (
        (torch.randn(V, generator=gen, dtype=torch.float64) * 0.5).to(device, dtype).requires_grad_()
        if bias
        else None
    )
    t = torch.randint(0, V, shape, generator=gen)
    if n_ignored:
        t.view(-1)[torch.randperm(t.numel(), generator=gen)[:n_ignored]] = -100
    g_lp = torch.randn(shape, generator=gen).to(device)
    g_ent = torch.randn(shape, generator=gen).to(device)
    return x, w, b, t.to(device), g_lp, g_ent


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float64] + ([torch.float16] if CUDA_OK else []), ids=str
)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("grads", ["both", "logprobs", "entropy", "no_entropy"])
def test_logprobs_and_entropy(device, dtype, temperature, grads):
    _check_logprobs_and_entropy(device, dtype, temperature, grads)


def _check_logprobs_and_entropy(device, dtype, temperature, grads, **make_kw):
    """fused_linear_token_logprobs against the float64 and same-dtype references: outputs and
    dX / dW / dB under upstream gradients on the outputs `grads` names."""
    x, w, b, t, g_lp, g_ent = _make(device, dtype, **make_kw)
    entropy = grads != "no_entropy"
    out = fused_linear_token_logprobs(
        x, w, t, b, temperature=temperature, return_entropy=entropy, chunk_rows=40
    )
    lp, ent = out if entropy else (out, None)
    assert lp.dtype == torch.float32 and lp.shape == t.shape
    total = (lp * g_lp).sum() if grads != "entropy" else 0.0
    if grads in ("both", "entropy"):
        total = total + (ent * g_ent).sum()
    total.backward()
    lo = torch.float32 if dtype == torch.float64 else dtype
    res = {}
    for rdt in (torch.float64, lo):
        xr, wr, br = leaf(x, rdt), leaf(w, rdt), leaf(b, rdt)
        rlp, rent = reference(xr, wr, br, t, temperature)
        rt = (rlp * g_lp.to(rdt)).sum() if grads != "entropy" else 0.0
        if grads in ("both", "entropy"):
            rt = rt + (rent * g_ent.to(rdt)).sum()
        rt.backward()
        res[rdt] = (rlp, rent, xr, wr, br)
    r64, rlo = res[torch.float64], res[lo]
    tol_close("logprobs", lp, r64[0], rlo[0], dtype)
    if entropy:
        assert ent.dtype == torch.float32
        tol_close("entropy", ent, r64[1], rlo[1], dtype)
    ulps = acc_ulps(dtype, 3)
    tol_close("dX", x.grad, r64[2].grad, rlo[2].grad, dtype)
    tol_close("dW", w.grad, r64[3].grad, rlo[3].grad, dtype, in_ulps=ulps)
    tol_close("dB", b.grad, r64[4].grad, rlo[4].grad, dtype, in_ulps=ulps)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "opt", [{"bias": False}, {"lead": (2, 47)}, {"n_ignored": 94}, {"M": 1, "n_ignored": 0}], ids=str
)
@pytest.mark.parametrize("chunk_rows", [0, 7])
def test_shapes_and_options(device, opt, chunk_rows):
    x, w, b, t, g_lp, g_ent = _make(device, torch.float32, **opt)
    lp, ent = fused_linear_token_logprobs(x, w, t, b, return_entropy=True, chunk_rows=chunk_rows)
    ((lp * g_lp).sum() + (ent * g_ent).sum()).backward()
    xr, wr, br = leaf(x, torch.float64), leaf(w, torch.float64), leaf(b, torch.float64)
    rlp, rent = reference(xr, wr, br, t)
    ((rlp * g_lp.double()).sum() + (rent * g_ent.double()).sum()).backward()
    torch.testing.assert_close(lp, rlp.float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, rent.float(), rtol=1e-5, atol=1e-5)
    for a, e in ((x, xr), (w, wr)) + (((b, br),) if b is not None else ()):
        torch.testing.assert_close(a.grad, e.grad.float(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_liger_scaled_cross_entropy_function(device):
    x, w, _, t, g_lp, g_ent = _make(device, torch.bfloat16, bias=False)
    nll, ent = LigerFusedLinearScaledCrossEntropyFunction.apply(x, w, t, 0.8, -100, 1, True)
    assert nll.dtype == torch.float32 and ent.dtype == torch.bfloat16  # Liger's dtypes
    lp, ent32 = fused_linear_token_logprobs(x, w, t, temperature=0.8, return_entropy=True)
    torch.testing.assert_close(nll, -lp)
    torch.testing.assert_close(ent, ent32.to(torch.bfloat16))
    nll2 = LigerFusedLinearScaledCrossEntropyFunction.apply(x, w, t, 0.8)
    assert isinstance(nll2, torch.Tensor)  # Liger 0.8.5: the NLL alone when nothing else is asked for
    torch.testing.assert_close(nll2, nll)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("return_entropy", [True, False])
def test_liger_scaled_cross_entropy_selected_token_ids(device, dtype, return_entropy):
    """selected_token_ids (Liger 0.8.5): the log-probabilities [M, K] of given vocabulary ids over the
    whole vocabulary, float32, 0 in ignored rows, order and repeats kept, differentiable (upstream
    gradients on every output), against float64 and same-dtype references."""
    x, w, _, t, g_lp, g_ent = _make(device, dtype, bias=False, lead=(2, 47))
    ids = torch.tensor([5, 0, 122, 5], device=device)
    out = LigerFusedLinearScaledCrossEntropyFunction.apply(x, w, t, 0.7, -100, 1, return_entropy, ids)
    assert len(out) == (3 if return_entropy else 2)
    nll, sel = out[0], out[-1]
    assert nll.dtype == torch.float32 and sel.shape == (2, 47, 4)
    assert sel.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    g_sel = torch.randn(sel.shape, generator=torch.Generator().manual_seed(3)).to(device)
    total = (nll * g_lp).sum() + (sel * g_sel).sum()
    if return_entropy:
        total = total + (out[1].float() * g_ent).sum()
    total.backward()
    lo = torch.float32 if dtype == torch.float64 else dtype
    res = {}
    for rdt in (torch.float64, lo):
        xr, wr = leaf(x, rdt), leaf(w, rdt)
        rlp, rent = reference(xr, wr, None, t, 0.7)
        rnll = -rlp
        lps = torch.log_softmax(head_logits(xr, wr).to(acc_dtype(xr)) / 0.7, dim=-1)
        rsel = lps[..., ids] * (t != -100).unsqueeze(-1)
        rt = (rnll * g_lp.to(rdt)).sum() + (rsel * g_sel.to(rdt)).sum()
        if return_entropy:
            rt = rt + (rent * g_ent.to(rdt)).sum()
        rt.backward()
        res[rdt] = (rnll, rsel, xr, wr)
    r64, rlo = res[torch.float64], res[lo]
    tol_close("nll", nll, r64[0], rlo[0], dtype)
    tol_close("selected", sel, r64[1], rlo[1], dtype)
    assert not sel[t == -100].any()
    torch.testing.assert_close(sel[..., 0], sel[..., 3], rtol=0, atol=0)
    tol_close("dX", x.grad, r64[2].grad, rlo[2].grad, dtype)
    tol_close("dW", w.grad, r64[3].grad, rlo[3].grad, dtype, in_ulps=acc_ulps(dtype, 3))


def test_liger_scaled_cross_entropy_bad_arguments():
    x, w, _, t, _, _ = _make("cpu", torch.float32, bias=False)
    apply = LigerFusedLinearScaledCrossEntropyFunction.apply
    with pytest.raises(TypeError, match="'selected_token_ids': expected a 1-D int64 tensor"):
        apply(x, w, t, 1.0, -100, 1, False, torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(TypeError, match="'selected_token_ids': expected a 1-D int64 tensor"):
        apply(x, w, t, 1.0, -100, 1, False, torch.tensor([[1]]))
    with pytest.raises(ValueError, match=r"'selected_token_ids': expected ids in \[0, 123\)"):
        apply(x, w, t, 1.0, -100, 1, False, torch.tensor([0, 123]))
    with pytest.raises(ValueError, match=r"'selected_token_ids': expected ids in \[0, 123\)"):
        apply(x, w, t, 1.0, -100, 1, False, torch.tensor([-1]))
    with pytest.raises(ValueError, match="'m_tiles_per_cluster': expected >= 1"):
        apply(x, w, t, 1.0, -100, 0)
    with pytest.raises(TypeError, match="'m_tiles_per_cluster': expected an int"):
        apply(x, w, t, 1.0, -100, True)
    with pytest.raises(TypeError, match="'return_entropy': expected a bool"):
        apply(x, w, t, 1.0, -100, 1, 1)


@pytest.mark.parametrize("device", DEVICES)
def test_second_backward(device):
    x, w, b, t, g_lp, g_ent = _make(device, torch.float32)
    lp, ent = fused_linear_token_logprobs(x, w, t, b, return_entropy=True)
    total = (lp * g_lp).sum() + (ent * g_ent).sum()
    total.backward(retain_graph=True)
    first = x.grad.clone()
    total.backward()
    torch.testing.assert_close(x.grad, 2 * first)


def test_gradcheck_float64_cpu():
    x, w, b, t, g_lp, g_ent = _make("cpu", torch.float64, M=5, H=4, V=7, n_ignored=1)

    def f(x, w, b):
        lp, ent = fused_linear_token_logprobs(x, w, t, b, temperature=0.9, return_entropy=True, chunk_rows=2)
        return lp, ent

    # float32 outputs for float64 inputs: a larger step keeps their rounding out
    assert torch.autograd.gradcheck(f, (x, w, b), eps=1e-3, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    x, w, b, t, g_lp, g_ent = _make(device, torch.float32, M=10, H=8, V=20, n_ignored=2)
    fwd = torch.ops.liger.fused_linear_logprobs_fwd
    torch.library.opcheck(fwd, (x, w, t, b, 0.7, -100, True, 3))
    torch.library.opcheck(fwd, (x, w, t, None, 1.0, -100, False, 0))
    _, ent, stats = fwd(x.detach(), w.detach(), t, b.detach(), 0.7, -100, True, 3)
    torch.library.opcheck(
        torch.ops.liger.fused_linear_logprobs_bwd,
        (g_lp, g_ent, x.detach(), w.detach(), t, b.detach(), stats, ent, 0.7, -100, 3),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    x, w, b, t, g_lp, g_ent = _make(device, torch.float32)

    def f(x, w, b):
        lp, ent = fused_linear_token_logprobs(x * 1.5, w, t, b, temperature=0.7, return_entropy=True)
        return (lp * g_lp).sum() + (ent * g_ent).sum()

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    out = cf(x, w, b)
    out.backward()
    got = [p.grad.clone() for p in (x, w, b)]
    for p in (x, w, b):
        p.grad = None
    e = f(x, w, b)
    e.backward()
    torch.testing.assert_close(out, e)
    for g, p in zip(got, (x, w, b)):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    x, w, b, t, _, _ = _make(device, torch.float32, M=10, H=8, V=20)
    with pytest.raises(ValueError, match="temperature"):
        fused_linear_token_logprobs(x, w, t, temperature=0.0)
    op = torch.ops.liger.fused_linear_logprobs_fwd
    with pytest.raises(RuntimeError, match="argument 'target'"):
        op(x.detach(), w.detach(), t[:4])
    with pytest.raises(RuntimeError, match="argument 'weight'"):
        op(x.detach(), w.detach()[:, :3], t)
    with pytest.raises(RuntimeError, match="argument 'bias'"):
        op(x.detach(), w.detach(), t, b.detach()[:2])
    if device == "cpu":
        bad = t.clone()
        bad[0] = 20
        with pytest.raises(ValueError, match="target"):
            op(x.detach(), w.detach(), bad)


# ---- log-probs of given tokens from given logits: selective_log_softmax, Liger's fused_selective_log_softmax


def _selective_reference(logits, target, temperature, ignore_index=-100):
    valid = target != ignore_index
    lps = torch.log_softmax(logits.double() / temperature, -1)
    return lps.gather(-1, torch.where(valid, target, 0).unsqueeze(-1)).squeeze(-1) * valid


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float64] + ([torch.float16] if CUDA_OK else []), ids=str
)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
# 40000 columns: 16-byte vectors, two a trip in the forward kernel, and a last single one
@pytest.mark.parametrize("shape", [(94, 123), (3, 47, 2049), (2, 3, 40000)], ids=str)
def test_selective_log_softmax(device, dtype, temperature, shape):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 is CPU-only")
    gen = torch.Generator().manual_seed(1)
    logits = (torch.randn(*shape, generator=gen, dtype=torch.float64) * 3).to(device, dtype)
    t = torch.randint(0, shape[-1], shape[:-1], generator=gen)
    t.view(-1)[:5] = -100
    t = t.to(device)
    out = selective_log_softmax(logits, t, temperature)
    assert out.dtype == torch.float32 and out.shape == t.shape
    ref64 = _selective_reference(logits, t, temperature)
    lo = torch.float32 if dtype == torch.float64 else dtype
    # PyTorch on the same low-precision logits, its log-softmax in float32 (what TRL computes)
    ref_lo = _selective_reference(logits.to(lo).float(), t, temperature).float()
    tol_close("logprobs", out, ref64, ref_lo, dtype)
    assert (out[t == -100] == 0).all()
    # a strided view of logits (rows not contiguous) reads the same rows
    wide = torch.zeros(*shape[:-1], shape[-1] + 8, device=device, dtype=dtype)
    wide[..., : shape[-1]] = logits
    torch.testing.assert_close(selective_log_softmax(wide[..., : shape[-1]], t, temperature), out)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16] + ([torch.float16] if CUDA_OK else []), ids=str
)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_selective_log_softmax_masked_vocab(device, dtype, temperature):
    # Masked columns (-inf, as a padded vocabulary or a constrained decoder gives): whole vectors
    # and whole threads' shares of a row are -inf, one row has a single finite column, and one row
    # peaks late (its running max moves up after many columns).
    gen = torch.Generator().manual_seed(3)
    R, V = 6, 40000
    logits = torch.randn(R, V, generator=gen, dtype=torch.float64) * 2
    logits[:, :9000] = -math.inf
    logits[:, 39000:] = -math.inf
    logits[1] = -math.inf
    logits[1, 20000] = 5.0
    logits[2, 38990] = 40.0
    logits = logits.to(device, dtype)
    t = torch.randint(9000, 39000, (R,), generator=gen)
    t[1], t[2] = 20000, 38990
    t = t.to(device)
    out = selective_log_softmax(logits, t, temperature)
    assert torch.isfinite(out).all()
    ref64 = _selective_reference(logits, t, temperature)
    ref_lo = _selective_reference(logits.float(), t, temperature).float()
    tol_close("logprobs", out, ref64, ref_lo, dtype)
    assert out[1].item() == 0.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16] + ([torch.float16] if CUDA_OK else []), ids=str
)
def test_logprobs_and_entropy_long_rows(device, dtype):
    # V 40000: the forward kernel's vector path with the entropy (V 123 above reads element-wise)
    _check_logprobs_and_entropy(device, dtype, 0.7, "both", M=24, H=16, V=40000, n_ignored=3)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_selective_log_softmax_liger_layout(device):
    gen = torch.Generator().manual_seed(2)
    B, L, V = 3, 9, 77
    logits = torch.randn(B, L + 1, V, generator=gen).to(device, torch.bfloat16)
    ids = torch.randint(0, V, (B, L + 4), generator=gen).to(device)  # prompt ids before the L scored
    mask = (torch.rand(B, L + 4, generator=gen) > 0.3).to(device)
    out = fused_selective_log_softmax(logits, ids, 0.9, mask)
    assert out.shape == (B, L) and out.dtype == torch.float32
    scored, m = ids[:, -L:], mask[:, -L:]
    ref = _selective_reference(logits[:, :-1], scored, 0.9) * m
    torch.testing.assert_close(out, ref.float(), rtol=1e-5, atol=1e-5)
    assert (out[~m] == 0).all()
    unmasked = fused_selective_log_softmax(logits, ids)  # Liger's default temperature 0.9, no mask
    torch.testing.assert_close(
        unmasked, _selective_reference(logits[:, :-1], scored, 0.9).float(), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("device", DEVICES)
def test_selective_logprobs_opcheck_and_errors(device):
    logits = torch.randn(6, 5, 33, device=device)
    t = torch.randint(0, 33, (6, 5), device=device)
    torch.library.opcheck(torch.ops.liger.selective_logprobs, (logits, t, 0.8, -100))
    with pytest.raises(RuntimeError, match="argument 'target'"):
        selective_log_softmax(logits, t[:, :4])
    with pytest.raises(RuntimeError, match="argument 'temperature'"):
        selective_log_softmax(logits, t, 0.0)
    with pytest.raises(ValueError, match="argument 'logits'"):
        fused_selective_log_softmax(logits[0], t)
    with pytest.raises(ValueError, match="argument 'input_ids'"):
        fused_selective_log_softmax(logits, t[:, :2])
