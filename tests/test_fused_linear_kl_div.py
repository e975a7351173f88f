"""The KL divergence of a given target distribution fused with the student head
(liger_cpp.transformers.LigerFusedLinearKLDivLoss, Liger-Kernel's offline-distillation loss; the op
liger::fused_linear_kl_div_fwd) against an independent pure-PyTorch reference with full logits
(torch.nn.functional.kl_div's formula on log_softmax, differentiated by autograd), in float64 and
in the input's precision."""

import inspect
import math

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from rl_reference import acc_ulps, leaf, tol_close

from liger_cpp._testing import plan_override
from liger_cpp.ops.fused_linear_kl_div import fused_linear_kl_div
from liger_cpp.transformers import LigerFusedLinearKLDivLoss


def reference(x, w, b, q, labels, reduction="batchmean", ignore_index=-100, temperature=1.0, eps=1e-10):
    """KL(q || softmax((x W^T + b) / T)) per row, over the rows kept, reduced as nn.KLDivLoss."""
    z = x @ w.t()
    if b is not None:
        z = z + b
    lp = torch.log_softmax(z.to(q.dtype if q.dtype == torch.float64 else torch.float32) / temperature, -1)
    qq = q.to(lp.dtype)
    rows = (qq * (qq.clamp_min(eps).log() - lp)).sum(-1)
    keep = torch.ones_like(rows, dtype=torch.bool) if labels is None else labels != ignore_index
    rows = torch.where(keep, rows, torch.zeros_like(rows))
    n = keep.sum().clamp_min(1).to(rows.dtype)
    total = rows.sum()
    if reduction == "batchmean":
        return total / n
    if reduction == "mean":
        return total / (n * q.shape[-1])
    return total


def _make(
    device, dtype, M=94, H=31, V=123, bias=True, n_ignored=9, seed=0, zeros=True, q_dtype=torch.float32
):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 is CPU-only")
    gen = torch.Generator().manual_seed(seed)

    def rn(*s, scale=1.0):
        return (torch.randn(*s, generator=gen, dtype=torch.float64) * scale).to(device, dtype)

    x = rn(M, H).requires_grad_(True)
    w = rn(V, H, scale=2.0 / math.sqrt(H)).requires_grad_(True)
    b = rn(V, scale=0.5).requires_grad_(True) if bias else None
    # cached teacher probabilities (float32, as a dataset would store them), some exact zeros
    q = torch.softmax(torch.randn(M, V, generator=gen, dtype=torch.float64) * 2.0, -1)
    if zeros:
        q[:, :5] = 0.0
        q = q / q.sum(-1, keepdim=True)
    labels = torch.randint(0, V, (M,), generator=gen)
    if n_ignored:
        labels[torch.randperm(M, generator=gen)[:n_ignored]] = -100
    return x, w, b, q.to(device, q_dtype), labels.to(device)


def _check(device, dtype, *, reduction="batchmean", temperature=1.0, grad_out=1.0, bias=True, labels=True,
           frozen_w=False, chunk_rows=0, accum=None, **make):  # fmt: skip
    x, w, b, q, lab = _make(device, dtype, bias=bias, **make)
    if frozen_w:
        w.requires_grad_(False)
    lab = lab if labels else None
    loss = fused_linear_kl_div(
        x,
        w,
        q,
        lab,
        b,
        reduction=reduction,
        temperature=temperature,
        chunk_rows=chunk_rows,
        accum_dtype=accum,
    )
    (loss * grad_out).backward()
    lo = torch.float32 if dtype == torch.float64 else dtype
    res = {}
    for rdt in (torch.float64, lo):
        rx, rw, rb = leaf(x, rdt), leaf(w, rdt), leaf(b, rdt)
        r = reference(rx, rw, rb, q.to(torch.float64 if rdt == torch.float64 else torch.float32), lab,
                      reduction, temperature=temperature)  # fmt: skip
        (r * grad_out).backward()
        res[rdt] = (r, rx, rw, rb)
    r64, rlo = res[torch.float64], res[lo]
    assert loss.shape == () and loss.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    tol_close("loss", loss, r64[0], rlo[0], dtype)
    tol_close("dX", x.grad, r64[1].grad, rlo[1].grad, dtype)
    chunks = 1 if chunk_rows == 0 else math.ceil(x.shape[0] / chunk_rows)
    ulps = None if accum == torch.float32 else acc_ulps(dtype, chunks)
    if frozen_w:
        assert w.grad is None
    else:
        tol_close("dW", w.grad, r64[2].grad, rlo[2].grad, dtype, in_ulps=ulps)
    if bias:
        tol_close("dB", b.grad, r64[3].grad, rlo[3].grad, dtype, in_ulps=ulps)
    return loss


_DTYPES = [torch.float64, torch.float32, torch.bfloat16] + ([torch.float16] if CUDA_OK else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", _DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["batchmean", "mean", "sum"])
@pytest.mark.parametrize("temperature", [1.0, 2.5])
def test_losses_and_gradients(device, dtype, reduction, temperature):
    _check(device, dtype, reduction=reduction, temperature=temperature, grad_out=0.7)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "opt",
    [
        dict(bias=False),
        dict(labels=False),
        dict(frozen_w=True),
        dict(chunk_rows=7),  # chunks that do not divide the 94 rows
        dict(chunk_rows=1),
        dict(n_ignored=94),  # every row ignored: a zero loss and zero gradients
        dict(M=1, n_ignored=0),
        dict(M=0, n_ignored=0),  # no rows: a zero loss, zero weight gradients
        dict(grad_out=-3.0),
        dict(zeros=False, temperature=0.5),
    ],
    ids=str,
)
def test_options(device, opt):
    _check(device, torch.float32, **opt)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16] + ([torch.float16] if CUDA_OK else []), ids=str)
def test_accum_dtype_float32(device, dtype):
    """accum_dtype=torch.float32: dW summed over the chunks in float32 (one rounding at the end), so
    within the single-rounding tolerance however many chunks."""
    _check(device, dtype, chunk_rows=8, accum=torch.float32)
    _check(device, dtype, accum=torch.float32, M=0, n_ignored=0)
    x, w, b, q, lab = _make(device, dtype)
    kw = dict(chunk_rows=8)
    g = [
        torch.autograd.grad(fused_linear_kl_div(x, w, q, lab, b, accum_dtype=a, **kw), w)[0]
        for a in (None, torch.float32)
    ]
    assert g[0].dtype == g[1].dtype == dtype  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("q_dtype", [torch.bfloat16, torch.float64], ids=str)
def test_target_dtypes(device, q_dtype):
    """q in the logits' dtype (read as is) or in a third dtype (converted to float32 on CUDA)."""
    if q_dtype == torch.float64 and device != "cpu":
        q_dtype = torch.float16
    _check(device, torch.bfloat16, q_dtype=q_dtype, grad_out=0.7)


_ROW_PLANS = [
    dict(distill="block"),
    dict(distill="smem"),
    dict(distill="smem", distill_smem_blocks="1"),
    dict(distill="smem", distill_smem_blocks="8"),
    dict(distill="smem", distill_smem_blocks="16"),
]


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA")
@pytest.mark.parametrize("plan", _ROW_PLANS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
@pytest.mark.parametrize(
    "dtype,q_dtype",
    [
        (torch.bfloat16, torch.float32),
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float32),
        (torch.float16, torch.float16),
        (torch.float32, torch.float32),
    ],
    ids=str,
)
def test_row_kernels_cuda(plan, dtype, q_dtype):
    """Both row kernels (a block per row; the sm_90 shared-memory cluster kernel, at one and eight
    blocks a row) on 16-byte aligned rows of 4104 classes, with and without a gradient."""
    with plan_override(**plan):
        loss = _check(
            "cuda", dtype, M=37, H=64, V=4104, n_ignored=5, temperature=0.8, grad_out=0.7, q_dtype=q_dtype
        )
        x, w, b, q, lab = _make("cuda", dtype, M=37, H=64, V=4104, n_ignored=5, q_dtype=q_dtype)
        with torch.no_grad():
            nograd = fused_linear_kl_div(x, w, q, lab, b, temperature=0.8)
    torch.testing.assert_close(nograd, loss.detach(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_module_matches_liger_signature_and_functional(device):
    """Liger-Kernel 0.8.5's constructor (reduction, ignore_index, temperature, eps, accum_dtype) and
    forward(student_input, student_weight, target, shift_labels=None)."""
    params = list(inspect.signature(LigerFusedLinearKLDivLoss.__init__).parameters)[1:6]
    assert params == ["reduction", "ignore_index", "temperature", "eps", "accum_dtype"]
    fwd = list(inspect.signature(LigerFusedLinearKLDivLoss.forward).parameters)[1:5]
    assert fwd == ["student_input", "student_weight", "target", "shift_labels"]
    x, w, _, q, lab = _make(device, torch.float32, bias=False)
    mod = LigerFusedLinearKLDivLoss(temperature=2.0, ignore_index=-100)
    a = mod(x, w, q, lab)
    e = fused_linear_kl_div(x, w, q, lab, temperature=2.0)
    torch.testing.assert_close(a, e, rtol=0, atol=0)
    torch.testing.assert_close(mod(x, w, q), reference(x, w, None, q, None, temperature=2.0).float())
    with pytest.raises(ValueError, match="temperature"):
        LigerFusedLinearKLDivLoss(temperature=0.0)


@pytest.mark.parametrize("device", DEVICES)
def test_retain_graph_second_backward_reruns(device):
    x, w, b, q, lab = _make(device, torch.float32)
    loss = fused_linear_kl_div(x, w, q, lab, b, temperature=1.5)
    loss.backward(retain_graph=True)
    first = [p.grad.clone() for p in (x, w, b)]
    loss.backward()
    for g, p in zip(first, (x, w, b)):
        torch.testing.assert_close(p.grad, 2 * g, rtol=1e-5, atol=1e-6)


def test_gradcheck_float64_cpu():
    for reduction in ("batchmean", "mean", "sum"):
        x, w, b, q, lab = _make("cpu", torch.float64, M=6, H=4, V=7, n_ignored=2)
        q = q.double()

        def f(x, w, b, reduction=reduction, q=q, lab=lab):
            return fused_linear_kl_div(x, w, q, lab, b, reduction=reduction, temperature=1.3, chunk_rows=4)

        assert torch.autograd.gradcheck(f, (x, w, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck(device, dtype):
    x, w, b, q, lab = _make(device, dtype, M=10, H=8, V=20, n_ignored=2)
    op = torch.ops.liger.fused_linear_kl_div_fwd
    flags = {"compute_dx": True, "compute_dw": True, "compute_db": True, "chunk_rows": 3}
    torch.library.opcheck(op, (x, w, q, lab, b), flags)
    torch.library.opcheck(
        op, (x.detach(), w, q), {"compute_dw": True, "reduction": "sum", "temperature": 2.0}
    )


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    x, w, b, q, lab = _make(device, torch.float32)
    mod = LigerFusedLinearKLDivLoss(temperature=1.5)

    def f(x, w):
        return mod(x * 1.5, w, q, lab) * 2.0

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    out_c = cf(x, w)
    out_c.backward()
    got = [p.grad.clone() for p in (x, w)]
    for p in (x, w):
        p.grad = None
    out_e = f(x, w)
    out_e.backward()
    torch.testing.assert_close(out_c, out_e)
    for g, p in zip(got, (x, w)):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_ignored_rows_are_never_read_into_the_result(device):
    """A NaN in an ignored row's target or hidden state leaves the loss and the other rows' gradients
    untouched (the rows are selected away, not multiplied by 0)."""
    x, w, b, q, lab = _make(device, torch.float32, n_ignored=0)
    lab[3] = -100
    q2, x2 = q.clone(), x.detach().clone()
    q2[3] = float("nan")
    loss = fused_linear_kl_div(x, w, q, lab, b)
    loss_nan = fused_linear_kl_div(x2.requires_grad_(True), w, q2, lab, b)
    torch.testing.assert_close(loss_nan, loss, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    x, w, b, q, lab = _make(device, torch.float32, M=10, H=8, V=20)
    with pytest.raises(ValueError, match="reduction"):
        fused_linear_kl_div(x, w, q, lab, reduction="none")
    with pytest.raises(ValueError, match="temperature"):
        fused_linear_kl_div(x, w, q, lab, temperature=0.0)
    with pytest.raises(RuntimeError, match="argument 'target'"):
        fused_linear_kl_div(x, w, q[:, :19], lab)
    with pytest.raises(RuntimeError, match="argument 'target'"):
        fused_linear_kl_div(x, w, q[:9], lab)
    with pytest.raises(RuntimeError, match="argument 'shift_labels'"):
        fused_linear_kl_div(x, w, q, lab[:9])
    with pytest.raises(RuntimeError, match="argument 'shift_labels'"):
        fused_linear_kl_div(x, w, q, lab.float())
    with pytest.raises(RuntimeError, match="argument 'student_weight'"):
        fused_linear_kl_div(x, w[:, :7], q, lab)
    with pytest.raises(RuntimeError, match="argument 'accum_dtype'"):
        fused_linear_kl_div(x, w, q, lab, accum_dtype=torch.float16)
    with pytest.raises(RuntimeError, match="argument 'eps'"):
        fused_linear_kl_div(x, w, q, lab, eps=-1.0)
