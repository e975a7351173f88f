"""Fused linear cross entropy against a pure-PyTorch reference that materialises the logits (float64
for the exact values, the input dtype for the low-precision baseline): every option and combination,
odd shapes, forced small and uneven chunks, ignore_index inside and outside the batch, all-ignored
batches, class weights, grad_output != 1, reduction none with per-token gradients, frozen weight
(LoRA), input without grad, no_grad, accum_dtype, autocast, retain_graph, opcheck, torch.compile,
errors; on CUDA also large shapes and tokens x vocab above 2^31."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import CUDA_OK, DEVICES
from utils import ULP, assert_close_to_ref, forced

import liger_cpp  # noqa: F401
from liger_cpp.ops.ce_output import CrossEntropyOutput
from liger_cpp.ops.fused_linear_cross_entropy import _grad_flags, fused_linear_cross_entropy
from liger_cpp.transformers import LigerFusedLinearCrossEntropyLoss, liger_fused_linear_cross_entropy

CPU_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
LOW = (torch.float16, torch.bfloat16)


def _dtypes(device):
    return CPU_DTYPES if device == "cpu" else CPU_DTYPES[:3]


def flce_ref(
    x,
    w,
    target,
    bias=None,
    ce_weight=None,
    ignore_index=-100,
    lse_square_scale=0.0,
    label_smoothing=0.0,
    reduction="mean",
    softcap=None,
    logit_scale=1.0,
):
    """The unfused computation as a model would write it: logits = x @ w.T (+ bias), times
    logit_scale, in x's dtype; the CE math in float32 (float64 for float64 inputs), Liger's option
    semantics. Returns (loss, z_loss, the CE's logits as (rows, V))."""
    logits = x @ w.t()
    if bias is not None:
        logits = logits + bias
    if logit_scale != 1.0:
        logits = logits * logit_scale
    lf = logits.float() if logits.dtype in LOW else logits
    if softcap is not None:
        lf = softcap * torch.tanh(lf / softcap)
    V = lf.shape[-1]
    lf = lf.reshape(-1, V)
    t = target.reshape(-1)
    valid = t != ignore_index
    tt = torch.where(valid, t, torch.zeros_like(t))
    lse = torch.logsumexp(lf, -1)
    wts = ce_weight.to(lf.dtype) if ce_weight is not None else torch.ones(V, dtype=lf.dtype, device=lf.device)
    nll = (lse - lf.gather(1, tt[:, None]).squeeze(1)) * wts[tt]
    smooth = (wts * (lse[:, None] - lf)).sum(-1)
    ce = (1 - label_smoothing) * nll + (label_smoothing / V) * smooth
    z = lse_square_scale * lse * lse
    zero = torch.zeros((), dtype=lf.dtype, device=lf.device)
    ce, z = torch.where(valid, ce, zero), torch.where(valid, z, zero)
    if reduction == "none":
        return (ce + z).reshape(target.shape), z.reshape(target.shape), lf
    if reduction == "sum":
        return ce.sum() + z.sum(), z.sum(), lf
    n = valid.sum().to(lf.dtype)
    denom = (wts[tt] * valid).sum() if ce_weight is not None else n
    one = torch.ones((), dtype=lf.dtype, device=lf.device)
    ce_mean = ce.sum() / torch.where(denom != 0, denom, one)
    z_mean = z.sum() / torch.where(n != 0, n, one)
    return ce_mean + z_mean, z_mean, lf


def _make(device, dtype, batch, H, V, bias=False, ce_weight=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, H, generator=gen).to(device, dtype).requires_grad_(True)
    # logits of std ~3: a softmax far from uniform, yet no class dominating every row
    w = (torch.randn(V, H, generator=gen) * (3.0 / math.sqrt(H))).to(device, dtype).requires_grad_(True)
    b = (torch.randn(V, generator=gen) * 0.5).to(device, dtype).requires_grad_(True) if bias else None
    cw = (torch.rand(V, generator=gen) + 0.5).to(device) if ce_weight else None
    return x, w, b, cw


def _targets(device, batch, V, ignore_index, n_ignored, logits64=None, seed=1):
    gen = torch.Generator().manual_seed(seed)
    t = torch.randint(0, V, batch, generator=gen)
    flat = t.view(-1)
    if logits64 is not None:
        # make about half the rows "correct" so token accuracy is not trivially 0
        am = logits64.detach().reshape(-1, V).argmax(-1).cpu()
        half = torch.randperm(flat.numel(), generator=gen)[: flat.numel() // 2]
        flat[half] = am[half]
    if n_ignored:
        flat[torch.randperm(flat.numel(), generator=gen)[:n_ignored]] = ignore_index
    return t.to(device)


def _close(name, out, ref64, ref_lo, dtype, in_ulps=None):
    """Error <= 2 x the low-precision PyTorch formula's error + a floor of `in_ulps` units of the
    *input* dtype at the reference's magnitude (the loss is float32 but computed from logits rounded
    to the input dtype). The floor is 8 ulps for float32 (the row step's float32 softmax and
    softcap derivative; at one row the PyTorch error sample is a single draw) and 1 ulp for 16-bit
    inputs. float64 inputs: the loss and the gradient scales are float32, so relative 2e-6."""
    if dtype == torch.float64:
        torch.testing.assert_close(out.double(), ref64.double(), rtol=2e-6, atol=1e-6, msg=name)
        return
    if in_ulps is None:
        in_ulps = 8.0 if dtype == torch.float32 else 1.0
    extra = in_ulps * ULP[dtype] / ULP[out.dtype]
    assert_close_to_ref(out, ref64, ref_lo, name, factor=2.0, extra_ulps=extra)


def _run_case(
    device,
    dtype,
    batch=(3, 7),
    H=32,
    V=123,
    reduction="mean",
    chunk_rows=5,
    bias=False,
    ce_weight=False,
    ignore_index=-100,
    n_ignored=3,
    label_smoothing=0.0,
    lse_square_scale=0.0,
    softcap=None,
    logit_scale=1.0,
    accum_dtype=None,
    grad="scaled",
    fp32_ulps=8.0,
    chunk_budget_mib=None,
):
    x, w, b, cw = _make(device, dtype, batch, H, V, bias, ce_weight)
    opts = dict(
        ce_weight=cw,
        ignore_index=ignore_index,
        lse_square_scale=lse_square_scale,
        label_smoothing=label_smoothing,
        reduction=reduction,
        softcap=softcap,
        logit_scale=logit_scale,
    )
    with torch.no_grad():
        _, _, lf64 = flce_ref(
            x.double(),
            w.double(),
            torch.zeros(batch, dtype=torch.long, device=device),
            b.double() if b is not None else None,
            softcap=softcap,
            logit_scale=logit_scale,
        )
    t = _targets(device, batch, V, ignore_index, n_ignored, lf64)

    loss, z_loss, acc, pred = fused_linear_cross_entropy(
        x,
        w,
        t,
        b,
        accum_dtype=accum_dtype,
        chunk_rows=chunk_rows,
        chunk_budget_mib=chunk_budget_mib,
        return_z_loss=True,
        return_token_accuracy=True,
        return_predicted_tokens=True,
        **opts,
    )
    assert loss.dtype == torch.float32 and z_loss.dtype == torch.float32
    if grad == "one":
        go = torch.ones_like(loss)
    elif reduction == "none":
        go = torch.randn(batch, device=device)
        go.view(-1)[:2] = 0.0  # a zero and negative per-token weights
    else:
        go = torch.full((), 2.5, device=device)
    loss.backward(go)

    def ref(conv):
        xr, wr = conv(x).requires_grad_(True), conv(w).requires_grad_(True)
        br = conv(b).requires_grad_(True) if b is not None else None
        lr, zr, lfr = flce_ref(xr, wr, t, br, **opts)
        lr.backward(go.to(lr.dtype))
        return lr, zr, lfr, xr.grad, wr.grad, (br.grad if br is not None else None)

    l64, z64, lf64, dx64, dw64, db64 = ref(lambda u: u.detach().double())
    lf64 = lf64.detach()
    llo, zlo, _, dxlo, dwlo, dblo = ref(lambda u: u.detach().clone())
    ulps = fp32_ulps if dtype == torch.float32 else None
    _close("loss", loss, l64, llo, dtype, ulps)
    _close("z_loss", z_loss, z64, zlo, dtype, ulps)
    assert x.grad.dtype == dtype and w.grad.dtype == dtype
    _close("dX", x.grad, dx64, dxlo, dtype, ulps)
    # dW in the input dtype accumulates over chunks with one rounding each (Liger's default): up to
    # half an ulp per chunk on top of the single GEMM's error.
    M = x.numel() // H
    chunks = math.ceil(M / chunk_rows) if chunk_rows else 1  # these small shapes fit one auto chunk
    dw_ulps = fp32_ulps if dtype == torch.float32 else 1.0 + (0.5 * chunks if accum_dtype is None else 0.0)
    _close("dW", w.grad, dw64, dwlo, dtype, in_ulps=dw_ulps)
    if b is not None:
        assert b.grad.dtype == dtype
        _close("dB", b.grad, db64, dblo, dtype, ulps)

    # predicted tokens: -1 on ignored rows, else an argmax of the logits (exact in fp32/fp64; within
    # the input dtype's rounding of the logits otherwise); accuracy consistent with them.
    tf, pf = t.reshape(-1), pred.reshape(-1)
    assert pred.shape == t.shape and pred.dtype == torch.int64
    valid = tf != ignore_index
    assert torch.all(pf[~valid] == -1)
    rows = valid.nonzero().squeeze(1)
    picked = lf64[rows, pf[rows]]
    best = lf64[rows].max(-1).values
    tol = 0.0 if dtype in (torch.float32, torch.float64) else 2 * best.abs().max().item() * ULP[dtype]
    assert torch.all(picked >= best - tol), (picked - best).min()
    correct = ((pf == tf) & valid).float()
    if reduction == "none":
        assert torch.equal(acc, correct.view(t.shape))
    else:
        n = int(valid.sum())
        want = correct.sum() / n if n else torch.zeros(())
        torch.testing.assert_close(acc.cpu(), want.cpu(), rtol=1e-6, atol=0)
        assert n < 8 or 0.2 < float(acc) < 0.9  # the targets were half argmaxes: the check has teeth


OPTIONS = {
    "plain": {},
    "no_ignored": dict(n_ignored=0),
    "ignore_outside_batch": dict(ignore_index=123456, n_ignored=0),
    "ignore_positive": dict(ignore_index=2),
    "label_smoothing": dict(label_smoothing=0.1),
    "z_loss": dict(lse_square_scale=0.05),
    "softcap": dict(softcap=4.0),
    "ce_weight": dict(ce_weight=True),
    "logit_scale": dict(logit_scale=0.7),
    "bias": dict(bias=True),
    "weight_smoothing": dict(ce_weight=True, label_smoothing=0.25),
    "all": dict(
        bias=True,
        ce_weight=True,
        ignore_index=5,
        label_smoothing=0.2,
        lse_square_scale=0.03,
        softcap=6.0,
        logit_scale=1.3,
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("opt", list(OPTIONS))
def test_options(device, dtype, reduction, opt):
    if dtype not in _dtypes(device):
        pytest.skip("float64 is CPU-only")
    if dtype == torch.float16 and opt not in ("plain", "all"):
        pytest.skip("float16 shares bfloat16's code path; two option sets suffice")
    # 21 rows in chunks of 5: four full chunks and a one-row tail
    _run_case(device, dtype, reduction=reduction, **OPTIONS[opt])


SHAPES = [((3, 7), 32, 123), ((2, 9), 64, 257), ((1,), 16, 7), ((5,), 8, 1), ((4, 1, 3), 24, 2)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("chunk_rows", [3, 0])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_shapes_and_chunks(device, dtype, shape, chunk_rows, reduction):
    batch, H, V = shape
    M = math.prod(batch)
    _run_case(
        device,
        dtype,
        batch=batch,
        H=H,
        V=V,
        reduction=reduction,
        chunk_rows=chunk_rows,
        n_ignored=min(2, M - 1),
        **{k: v for k, v in OPTIONS["all"].items() if k != "ignore_index"},
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_odd_rows_large_vocab(device, reduction):
    # 3 x 423 rows, V = 32000 (and 123): the automatic chunking (on the CPU with a 1 MiB budget:
    # chunks of 8 rows, the last one short) and an uneven explicit one.
    rows = (3, 423) if device == "cuda" else (3, 11)
    # dX sums 32000 products per element: the float32 GEMM's own rounding (which MKL/cuBLAS kernel a
    # chunk's shape selects) dominates, up to ~sqrt(V) ulps; still 70x tighter than Liger's 5e-4.
    _run_case(
        device,
        torch.float32,
        batch=rows,
        H=64,
        V=32000,
        reduction=reduction,
        chunk_rows=0,
        n_ignored=9,
        fp32_ulps=64.0,
        chunk_budget_mib=1.0 if device == "cpu" else None,
    )
    _run_case(device, torch.float32, batch=(3, 423), H=64, V=123, reduction=reduction, chunk_rows=100)


def test_reference_matches_f_cross_entropy():
    # The reference itself against PyTorch's cross entropy (class weights + label smoothing).
    x, w, b, cw = _make("cpu", torch.float64, (6, 5), 16, 37, bias=True, ce_weight=True)
    t = _targets("cpu", (6, 5), 37, -100, 4)
    for red in ("mean", "sum", "none"):
        ours, _, _ = flce_ref(x, w, t, b, cw, label_smoothing=0.3, reduction=red)
        logits = (x @ w.t() + b).reshape(-1, 37)
        want = F.cross_entropy(logits, t.reshape(-1), weight=cw.double(), label_smoothing=0.3, reduction=red)
        torch.testing.assert_close(ours.reshape(want.shape), want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_all_ignored(device, reduction):
    x, w, b, cw = _make(device, torch.float32, (4, 3), 16, 50, bias=True, ce_weight=True)
    t = torch.full((4, 3), -100, device=device)
    loss, z, acc, pred = fused_linear_cross_entropy(
        x,
        w,
        t,
        b,
        ce_weight=cw,
        reduction=reduction,
        lse_square_scale=0.1,
        return_z_loss=True,
        return_token_accuracy=True,
        return_predicted_tokens=True,
        chunk_rows=5,
    )
    assert torch.equal(loss, torch.zeros_like(loss)) and not torch.isnan(loss).any()
    assert torch.equal(z, torch.zeros_like(z)) and torch.equal(acc, torch.zeros_like(acc))
    assert torch.equal(pred, torch.full_like(pred, -1))
    loss.backward(torch.ones_like(loss) * 3)
    for p in (x, w, b):
        assert torch.equal(p.grad, torch.zeros_like(p))


@pytest.mark.parametrize("device", DEVICES)
def test_grad_output_one_and_scaled(device):
    x, w, b, _ = _make(device, torch.float32, (2, 11), 32, 99, bias=True)
    t = _targets(device, (2, 11), 99, -100, 2)
    grads = []
    for scale in (None, 3.0, 0.0):
        for p in (x, w, b):
            p.grad = None
        loss, *_ = fused_linear_cross_entropy(x, w, t, b, chunk_rows=4)
        (loss if scale is None else loss * scale).backward()
        grads.append([p.grad.clone() for p in (x, w, b)])
    for g1, g3, g0 in zip(*grads):
        torch.testing.assert_close(g3, 3 * g1, rtol=1e-6, atol=1e-7)
        assert torch.equal(g0, torch.zeros_like(g0))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_frozen_weight_lora(device, reduction):
    # LoRA: lm_head frozen, only the input (and an adapter before it) trains: no dW anywhere.
    x, w, b, _ = _make(device, torch.float32, (3, 5), 32, 77, bias=True)
    w.requires_grad_(False)
    b.requires_grad_(False)
    t = _targets(device, (3, 5), 77, -100, 2)
    assert _grad_flags(x, w, b, reduction) == ((True, False, False) if reduction == "mean" else (False,) * 3)
    loss, *_ = fused_linear_cross_entropy(x, w, t, b, reduction=reduction, chunk_rows=4)
    loss.sum().backward()
    assert w.grad is None and b.grad is None
    x64 = x.detach().double().requires_grad_(True)
    flce_ref(x64, w.double(), t, b.double(), reduction=reduction)[0].sum().backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_input_without_grad(device, reduction):
    x, w, b, _ = _make(device, torch.float32, (3, 5), 32, 77, bias=True)
    x.requires_grad_(False)
    t = _targets(device, (3, 5), 77, -100, 2)
    assert _grad_flags(x, w, b, reduction) == ((False, True, True) if reduction == "mean" else (False,) * 3)
    loss, *_ = fused_linear_cross_entropy(x, w, t, b, reduction=reduction, chunk_rows=4)
    loss.sum().backward()
    assert x.grad is None
    w64, b64 = (p.detach().double().requires_grad_(True) for p in (w, b))
    flce_ref(x.double(), w64, t, b64, reduction=reduction)[0].sum().backward()
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b.grad.double(), b64.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_forward(device):
    x, w, b, _ = _make(device, torch.float32, (3, 5), 32, 77, bias=True)
    t = _targets(device, (3, 5), 77, -100, 2)
    with torch.no_grad():
        assert _grad_flags(x, w, b, "mean") == (False, False, False)
        loss, *_ = fused_linear_cross_entropy(x, w, t, b, chunk_rows=4)
    assert loss.grad_fn is None
    want, _, _ = flce_ref(x.detach().double(), w.detach().double(), t, b.detach().double())
    torch.testing.assert_close(loss.double(), want, rtol=1e-6, atol=1e-6)
    # The op itself: without compute flags it returns no gradients at all.
    out = torch.ops.liger.fused_linear_cross_entropy_fwd(x.detach(), w.detach(), t, b.detach())
    assert all(g.numel() == 0 for g in out[4:])
    torch.testing.assert_close(out[0], loss)


@pytest.mark.parametrize("device", DEVICES)
def test_op_grads_and_recompute_agree(device):
    # The forward's in-loop gradients (mean/sum) equal the backward op's recomputation.
    x, w, b, cw = _make(device, torch.float32, (4, 6), 32, 91, bias=True, ce_weight=True)
    t = _targets(device, (4, 6), 91, -100, 3)
    args = (cw, -100, 0.02, 0.1)
    for red in ("mean", "sum"):
        out = torch.ops.liger.fused_linear_cross_entropy_fwd(
            x.detach(),
            w.detach(),
            t,
            b.detach(),
            *args,
            red,
            3.0,
            0.9,
            compute_dx=True,
            compute_dw=True,
            compute_db=True,
            chunk_rows=5,
        )
        g = torch.full((), 1.7, device=device)
        back = torch.ops.liger.fused_linear_cross_entropy_bwd(
            g, x.detach(), w.detach(), t, b.detach(), *args, red, 3.0, 0.9, chunk_rows=7
        )
        for fwd_grad, bwd_grad in zip(out[4:], back):
            torch.testing.assert_close(fwd_grad * 1.7, bwd_grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_accum_dtype(device):
    # bf16, many chunks: float32 accumulation of dW is at least as accurate as the low-precision
    # PyTorch baseline; the default (one bf16 rounding per chunk) is looser but bounded.
    x, w, b, _ = _make(device, torch.bfloat16, (4, 8), 64, 300, bias=True)
    t = _targets(device, (4, 8), 300, -100, 5)
    grads = {}
    for acc in (None, torch.float32):
        for p in (x, w, b):
            p.grad = None
        fused_linear_cross_entropy(x, w, t, b, accum_dtype=acc, chunk_rows=2)[0].backward()
        assert w.grad.dtype == torch.bfloat16
        grads[acc] = (x.grad.clone(), w.grad.clone(), b.grad.clone())
    w64 = w.detach().double().requires_grad_(True)
    flce_ref(x.detach().double(), w64, t, b.detach().double())[0].backward()
    wlo = w.detach().clone().requires_grad_(True)
    flce_ref(x.detach(), wlo, t, b.detach())[0].backward()
    assert_close_to_ref(grads[torch.float32][1], w64.grad, wlo.grad, "dW accum fp32")
    err = {k: (v[1].double() - w64.grad).abs().max().item() for k, v in grads.items()}
    assert err[torch.float32] <= err[None]
    assert torch.equal(grads[None][0], grads[torch.float32][0])  # dX does not depend on it
    # float32 inputs: accum_dtype=float32 changes nothing
    x32, w32 = x.detach().float().requires_grad_(True), w.detach().float().requires_grad_(True)
    a = torch.autograd.grad(fused_linear_cross_entropy(x32, w32, t, chunk_rows=3)[0], [w32])[0]
    c = torch.autograd.grad(
        fused_linear_cross_entropy(x32, w32, t, chunk_rows=3, accum_dtype=torch.float32)[0], [w32]
    )[0]
    assert torch.equal(a, c)


@pytest.mark.parametrize("device", DEVICES)
def test_retain_graph(device):
    x, w, b, _ = _make(device, torch.float32, (2, 5), 16, 33, bias=True)
    t = _targets(device, (2, 5), 33, -100, 1)
    loss, *_ = fused_linear_cross_entropy(x, w, t, b, chunk_rows=3)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="retain_graph"):
        loss.backward()
    # reduction none recomputes in its backward: a second backward is exact
    x.grad = None
    loss, *_ = fused_linear_cross_entropy(x, w, t, b, reduction="none", chunk_rows=3)
    g = torch.rand_like(loss)
    loss.backward(g, retain_graph=True)
    first = x.grad.clone()
    loss.backward(g)
    torch.testing.assert_close(x.grad, 2 * first)


@pytest.mark.parametrize("device", DEVICES)
def test_chunk_budget_argument(device):
    # chunk_budget_mib sets the logits held per chunk: 0.001 MiB = 1048 bytes, 2 fp32 rows of V = 100
    # (uneven chunks over 21 rows); the result equals one row at a time, the gradients too.
    x, w, b, _ = _make(device, torch.float32, (3, 7), 32, 100, bias=True)
    t = _targets(device, (3, 7), 100, -100, 2)
    for reduction in ("none", "mean"):
        ref = fused_linear_cross_entropy(x, w, t, b, reduction=reduction, chunk_rows=1)[0]
        gref = torch.autograd.grad(ref.sum(), [x, w, b])
        out = fused_linear_cross_entropy(x, w, t, b, reduction=reduction, chunk_budget_mib=0.001)[0]
        torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
        for a, e in zip(torch.autograd.grad(out.sum(), [x, w, b]), gref):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)
    # the module and the functional take it too
    ref_none = fused_linear_cross_entropy(x, w, t, b, reduction="none", chunk_rows=1)[0]
    mod = LigerFusedLinearCrossEntropyLoss(reduction="none", chunk_budget_mib=0.001)
    torch.testing.assert_close(mod(w, x, t, b), ref_none)
    lf = liger_fused_linear_cross_entropy(x, w, t, b, reduction="none", chunk_budget_mib=0.001)
    torch.testing.assert_close(lf, ref_none)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="chunk_budget_mib"):
            fused_linear_cross_entropy(x, w, t, chunk_budget_mib=bad)
        with pytest.raises(ValueError, match="chunk_budget_mib"):
            LigerFusedLinearCrossEntropyLoss(chunk_budget_mib=bad)
    with pytest.raises(RuntimeError, match="'chunk_budget_mib'"):
        torch.ops.liger.fused_linear_cross_entropy_fwd(x.detach(), w.detach(), t, chunk_budget_mib=-2.0)


def test_chunk_budget_env():
    # LIGER_CPP_FLCE_CHUNK_MB is read once per process (in a child process here): it sets the budget
    # like chunk_budget_mib, the argument wins over it, and an invalid value raises on every call.
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import torch, liger_cpp
        from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy as f
        g = torch.Generator().manual_seed(0)
        x, w = torch.randn(21, 32, generator=g), torch.randn(100, 32, generator=g)
        t = torch.randint(0, 100, (21,), generator=g)
        ref = f(x, w, t, reduction="none", chunk_rows=1)[0]
        torch.testing.assert_close(f(x, w, t, reduction="none")[0], ref, rtol=1e-6, atol=1e-6)
        big = f(x, w, t, reduction="none", chunk_budget_mib=64.0)[0]
        torch.testing.assert_close(big, ref, rtol=1e-6, atol=1e-6)
        print("ok")
        """
    )
    import os

    env = dict(os.environ, LIGER_CPP_FLCE_CHUNK_MB="0.001")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr
    bad = textwrap.dedent(
        """
        import torch, liger_cpp
        from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy as f
        x, w, t = torch.randn(4, 8), torch.randn(10, 8), torch.zeros(4, dtype=torch.long)
        for _ in range(2):
            try:
                f(x, w, t)
            except RuntimeError as e:
                assert "LIGER_CPP_FLCE_CHUNK_MB" in str(e), e
            else:
                raise SystemExit("no error")
        f(x, w, t, chunk_budget_mib=1.0)  # an explicit budget does not need the environment's
        print("ok")
        """
    )
    env["LIGER_CPP_FLCE_CHUNK_MB"] = "lots"
    r = subprocess.run([sys.executable, "-c", bad], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr


@pytest.mark.parametrize("device", DEVICES)
def test_autocast(device):
    # Under autocast the GEMMs run in the autocast dtype (as F.linear would) and fp32 parameters get
    # fp32 gradients through the cast, dW accumulated in fp32 over the chunks.
    x, w, b, _ = _make(device, torch.float32, (3, 5), 32, 64, bias=True)
    t = _targets(device, (3, 5), 64, -100, 2)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss, *_ = fused_linear_cross_entropy(x, w, t, b, chunk_rows=4)
    loss.backward()
    assert w.grad.dtype == torch.float32 and x.grad.dtype == torch.float32
    xb, wb, bb = (p.detach().bfloat16().requires_grad_(True) for p in (x, w, b))
    lb, *_ = fused_linear_cross_entropy(xb, wb, t, bb, chunk_rows=4, accum_dtype=torch.float32)
    lb.backward()
    assert torch.equal(loss, lb)
    assert torch.equal(w.grad, wb.grad.float()) and torch.equal(x.grad, xb.grad.float())


@pytest.mark.parametrize("device", DEVICES)
def test_int32_target_and_1d_input(device):
    x, w, b, _ = _make(device, torch.float32, (), 16, 20)
    assert x.shape == (16,)
    t = _targets(device, (), 20, -100, 0)
    loss, *_ = fused_linear_cross_entropy(x, w, t, reduction="none")
    assert loss.shape == ()
    torch.testing.assert_close(loss, F.cross_entropy((w @ x)[None], t[None], reduction="none")[0])
    t2 = _targets(device, (3, 4), 20, -100, 2)
    x2 = torch.randn(3, 4, 16, device=device)
    a = fused_linear_cross_entropy(x2, w.detach(), t2)[0]
    c = fused_linear_cross_entropy(x2, w.detach(), t2.int())[0]
    assert torch.equal(a, c)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch(device):
    x = torch.randn(0, 16, device=device, requires_grad=True)
    w = torch.randn(10, 16, device=device, requires_grad=True)
    t = torch.zeros(0, dtype=torch.long, device=device)
    loss, *_ = fused_linear_cross_entropy(x, w, t)
    assert loss.item() == 0.0
    loss.backward()
    assert x.grad.shape == (0, 16) and torch.equal(w.grad, torch.zeros_like(w))


@pytest.mark.parametrize("device", DEVICES)
def test_module_and_functional(device):
    x, w, b, cw = _make(device, torch.float32, (2, 6), 32, 50, bias=True, ce_weight=True)
    t = _targets(device, (2, 6), 50, -100, 2)
    mod = LigerFusedLinearCrossEntropyLoss(ce_weight=cw, label_smoothing=0.1, softcap=10.0)
    loss = mod(w, x, t, b)  # weight first, as Liger
    assert isinstance(loss, torch.Tensor) and loss.shape == ()
    torch.testing.assert_close(
        loss, liger_fused_linear_cross_entropy(x, w, t, b, ce_weight=cw, label_smoothing=0.1, softcap=10.0)
    )
    want, _, _ = flce_ref(x.double(), w.double(), t, b.double(), cw, label_smoothing=0.1, softcap=10.0)
    torch.testing.assert_close(loss.double(), want, rtol=1e-5, atol=1e-6)
    out = LigerFusedLinearCrossEntropyLoss(return_z_loss=True, return_token_accuracy=True)(w, x, t)
    assert isinstance(out, CrossEntropyOutput)
    assert out.z_loss.shape == () and out.token_accuracy.shape == () and out.predicted_tokens is None
    out = liger_fused_linear_cross_entropy(x, w, t, reduction="none", return_predicted_tokens=True)
    assert out.loss.shape == (2, 6) and out.predicted_tokens.shape == (2, 6) and out.z_loss is None
    with pytest.raises(ValueError, match="'label_smoothing'"):
        LigerFusedLinearCrossEntropyLoss(label_smoothing=1.5)
    with pytest.raises(ValueError, match="'reduction'"):
        LigerFusedLinearCrossEntropyLoss(reduction="batchmean")
    with pytest.raises(ValueError, match="'softcap'"):
        LigerFusedLinearCrossEntropyLoss(softcap=0.0)


def _opcheck_args(device, dtype):
    x, w, b, cw = _make(device, dtype, (3, 5), 16, 40, bias=True, ce_weight=True)
    t = _targets(device, (3, 5), 40, -100, 2)
    return x, w, b, cw, t


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck(device, dtype):
    x, w, b, cw, t = _opcheck_args(device, dtype)
    op = torch.ops.liger.fused_linear_cross_entropy_fwd
    for red in ("mean", "none") if dtype == torch.float32 else ("sum",):
        flags = red != "none"
        torch.library.opcheck(
            op,
            (x, w, t, b, cw, -100, 0.01, 0.1, red, 5.0, 0.8, True, True, True, flags, flags, flags, None, 4),
        )
    kw = {"chunk_rows": 2, "compute_dx": True, "accum_dtype": torch.float32}
    torch.library.opcheck(op, (x, w.detach(), t), kw, test_utils=("test_schema", "test_faketensor"))
    xd, wd, bd = x.detach(), w.detach(), b.detach()
    torch.library.opcheck(
        torch.ops.liger.fused_linear_cross_entropy_bwd,
        (
            torch.rand(3, 5, device=device),
            xd,
            wd,
            t,
            bd,
            cw,
            -100,
            0.01,
            0.1,
            "none",
            5.0,
            0.8,
            True,
            True,
            True,
        ),
    )
    out = op(xd, wd, t, bd, compute_dx=True, compute_dw=True, compute_db=True)
    torch.library.opcheck(
        torch.ops.liger.fused_linear_cross_entropy_scale_,
        (out[4].clone(), out[5].clone(), out[6].clone(), torch.tensor(1.5, device=device)),
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_torch_compile_fullgraph(device, reduction):
    torch._dynamo.reset()
    x, w, b, cw = _make(device, torch.float32, (4, 6), 32, 57, bias=True, ce_weight=True)
    t = _targets(device, (4, 6), 57, -100, 3)
    mod = LigerFusedLinearCrossEntropyLoss(
        ce_weight=cw, reduction=reduction, lse_square_scale=0.01, softcap=8.0
    )

    def f(x, w, b):
        out = mod(w, x * 1.5, t, b)
        return out.sum() * 2.0 if reduction == "none" else out * 2.0

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    cf(x, w, b).backward()
    got = [p.grad.clone() for p in (x, w, b)]
    for p in (x, w, b):
        p.grad = None
    f(x, w, b).backward()
    for g, p in zip(got, (x, w, b)):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_name_the_argument(device):
    x, w, b, cw = _make(device, torch.float32, (2, 3), 16, 20, bias=True, ce_weight=True)
    x, w, b = x.detach(), w.detach(), b.detach()
    t = _targets(device, (2, 3), 20, -100, 1)
    flce = fused_linear_cross_entropy
    with pytest.raises(RuntimeError, match="'weight'.*shape"):
        flce(x, torch.randn(20, 15, device=device), t)
    with pytest.raises(RuntimeError, match="'weight'.*dtype"):
        flce(x, w.double(), t)
    with pytest.raises(RuntimeError, match="'weight'.*vocabulary"):
        flce(x, torch.randn(0, 16, device=device), t[:0].reshape(0), reduction="sum")
    with pytest.raises(RuntimeError, match="'bias'.*shape"):
        flce(x, w, t, torch.randn(19, device=device))
    with pytest.raises(RuntimeError, match="'bias'.*dtype"):
        flce(x, w, t, b.double())
    with pytest.raises(RuntimeError, match="'ce_weight'.*shape"):
        flce(x, w, t, ce_weight=cw[:5])
    with pytest.raises(RuntimeError, match="'target'.*elements"):
        flce(x, w, t[:, :2])
    with pytest.raises(RuntimeError, match="'target'.*int64"):
        flce(x, w, t.float())
    with pytest.raises(RuntimeError, match="'input'.*float32"):
        flce(x.int(), w.int(), t)
    with pytest.raises(RuntimeError, match="'label_smoothing'"):
        flce(x, w, t, label_smoothing=-0.1)
    with pytest.raises(RuntimeError, match="'accum_dtype'"):
        flce(x, w, t, accum_dtype=torch.float16)
    with pytest.raises(RuntimeError, match="'chunk_rows'"):
        flce(x, w, t, chunk_rows=-1)
    with pytest.raises(ValueError, match="'reduction'"):
        flce(x, w, t, reduction="batchmean")
    with pytest.raises(RuntimeError, match="'reduction'"):
        torch.ops.liger.fused_linear_cross_entropy_fwd(x, w, t, reduction="avg")
    with pytest.raises(ValueError, match="'softcap'"):
        flce(x, w, t, softcap=-1.0)
    if device == "cpu":  # on CUDA the range check is an asynchronous device assert
        bad = t.clone()
        bad[1, 2] = 20
        with pytest.raises(ValueError, match="'target'.*got 20 at position 5"):
            flce(x, w, bad)
    with pytest.raises(RuntimeError, match="'grad_loss'.*one per row"):
        torch.ops.liger.fused_linear_cross_entropy_bwd(
            torch.ones(5, device=device), x, w, t, reduction="none"
        )
    with pytest.raises(RuntimeError, match="'grad_output'"):
        torch.ops.liger.fused_linear_cross_entropy_scale_(x.clone(), w.clone(), b.clone(), torch.ones(2))
    # the forward computed no dX, yet autograd asks for one (only by calling the op by hand)
    xg = x.clone().requires_grad_(True)
    loss = torch.ops.liger.fused_linear_cross_entropy_fwd(xg, w, t)[0]
    with pytest.raises(RuntimeError, match="compute_dx=False"):
        loss.backward()


# ---------------------------------------------------------------------------------------------
# CUDA only: realistic and very large shapes


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "shape", [((8, 128), 1024, 4096), ((4, 47), 31, 123), ((2, 1000), 2048, 32000)], ids=str
)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cuda_shapes(dtype, shape, reduction):
    batch, H, V = shape
    _run_case(
        "cuda",
        dtype,
        batch=batch,
        H=H,
        V=V,
        reduction=reduction,
        chunk_rows=0,
        n_ignored=17,
        label_smoothing=0.1,
        lse_square_scale=1e-3,
        softcap=30.0,
        bias=True,
        accum_dtype=torch.float32,
    )


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "H, V, chunk_rows",
    [(256, 1000, 512), (512, 4096, 1000), (264, 2051, 1024), (2304, 4104, 448), (8, 136, 64)],
    ids=str,
)
@pytest.mark.parametrize("dw_gemm", [None, "aten"])
def test_cuda_weight_grad_in_weight_dtype_over_chunks(dtype, H, V, chunk_rows, dw_gemm):
    # dW in the weight's dtype accumulated over several chunks of at most 1024 rows with 16-byte
    # aligned rows: on sm_90 the chunk loops run this GEMM through cuBLASLt with a fixed algorithm
    # (csrc/aten/cuda/dw_gemm_cuda.cpp), elsewhere ATen's; the first chunk writes dW, the rest add.
    # Both are run here (dw_gemm=aten forces ATen's on sm_90 too). V 2051's unaligned logits rows
    # take ATen's either way; the heuristic offers no 128 x 160 tile for some shapes (ATen's too).
    with forced(dw_gemm=dw_gemm):
        _run_case(
            "cuda",
            dtype,
            batch=(2600,),
            H=H,
            V=V,
            reduction="mean",
            chunk_rows=chunk_rows,
            n_ignored=40,
            bias=True,
        )


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("chunk_mb", [None, "8192"])
def test_cuda_tokens_times_vocab_above_2_31(chunk_mb, monkeypatch):
    # 17000 x 128256 = 2.18e9 logits > 2^31: int64 offsets everywhere. With the default budget the
    # chunks are small; with 8 GiB one chunk holds all 2.18e9 logits (the row kernel's and cuBLAS's
    # own offsets). Reference: the same math in float32 (logits rounded to bf16) on 2048-row slices.
    if chunk_mb is not None:
        monkeypatch.setenv("LIGER_CPP_FLCE_CHUNK_MB", chunk_mb)
    M, H, V = 17000, 128, 128256
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, H, device="cuda", generator=gen).bfloat16().requires_grad_(True)
    w = (torch.randn(V, H, device="cuda", generator=gen) * (3 / math.sqrt(H))).bfloat16().requires_grad_(True)
    t = torch.randint(0, V, (M,), device="cuda", generator=gen)
    t[::7] = -100
    loss, *_ = fused_linear_cross_entropy(x, w, t, reduction="sum", accum_dtype=torch.float32)
    loss.backward()
    xr = x.detach().float().requires_grad_(True)
    wr = w.detach().float().requires_grad_(True)
    total = torch.zeros((), device="cuda", dtype=torch.float64)
    for s in range(0, M, 2048):
        # Logits rounded to bf16, as the op (and HF's bf16 lm_head) produce them: that rounding (3 %
        # of p at |logit| ~ 8) is the op's documented precision and dominated the comparison with
        # float32 logits (H200, 28a4c06: 63 of 2.2M dX elements beyond atol 5e-3).
        lg = (xr[s : s + 2048] @ wr.t()).bfloat16().float()
        part = F.cross_entropy(lg, t[s : s + 2048], reduction="sum")
        part.backward()
        total += part.detach().double()
    torch.testing.assert_close(loss.double(), total, rtol=2e-3, atol=0)
    torch.testing.assert_close(x.grad.float(), xr.grad, rtol=5e-2, atol=5e-3)
    torch.testing.assert_close(w.grad.float(), wr.grad, rtol=5e-2, atol=5e-2)


def test_forward_and_backward_allocate_one_weight_sized_buffer():
    # dW, computed in the forward, is the only weight-sized allocation (no zero-filled "gradient" for
    # the dW output from autograd, no copy into .grad).
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 256, requires_grad=True)
    w = torch.randn(30000, 256, requires_grad=True)
    t = torch.randint(0, 30000, (64,))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fused_linear_cross_entropy(x, w, t)
        (out[0] if isinstance(out, (tuple, list)) else out).backward()
    big = [e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage >= w.numel() * 4]
    assert big == [w.numel() * 4], big


def _auto_chunk_mib(M, H, V, elem):
    # The documented rule: the larger of Liger's chunk rows (next_pow2(ceil(M / ceil(V / H)))) and
    # H / 4 rows, as logits bytes, within 64..251 MiB.
    liger_rows = 1 << max(0, math.ceil(math.log2(math.ceil(M / math.ceil(V / H)))))
    return min(max(max(liger_rows, H / 4) * V * elem / 2**20, 64.0), 251.0)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("M, H", [(4096, 1024), (32768, 1024), (4096, 4096)])
def test_cuda_default_chunk_budget(M, H):
    # At V = 128256 bf16: (4096, 1024) -> 64 MiB (the floor; H / 4 = 256 rows = 62.6 MiB, Liger's 64
    # rows), (32768, 1024) -> Liger's 512 rows = 125 MiB, (4096, 4096) -> 251 MiB (1024 rows, H / 4).
    # The op's peak above its inputs is dX + dW + that chunk + small buffers (per-row floats); the
    # fixed 251 MiB chunks used before would exceed this bound by 117-179 MiB in the first two.
    V = 128256
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, H, device="cuda", generator=gen).bfloat16().requires_grad_(True)
    w = (torch.randn(V, H, device="cuda", generator=gen) / math.sqrt(H)).bfloat16().requires_grad_(True)
    t = torch.randint(0, V, (M,), device="cuda", generator=gen)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    loss, *_ = fused_linear_cross_entropy(x, w, t)
    torch.cuda.synchronize()
    extra_mib = (torch.cuda.max_memory_allocated() - base) / 2**20
    dx_dw_mib = (M * H + V * H) * 2 / 2**20
    chunk_mib = _auto_chunk_mib(M, H, V, 2)
    assert extra_mib <= dx_dw_mib + chunk_mib + 8, (extra_mib, dx_dw_mib, chunk_mib)
    assert torch.isfinite(loss)
