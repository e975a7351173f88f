"""Cross entropy on given logits against a pure-PyTorch reference (F.cross_entropy on float64 logits
plus explicit z-loss / softcap / accuracy formulas): every option and their combinations, every
dtype, odd shapes, ignore_index present / absent / inside [0, V), all-ignored batches, class weights,
grad_output != 1, per-token gradients (reduction "none"), the in-place option and its visibility to
autograd, retain_graph, opcheck, torch.compile(fullgraph=True), bad inputs, and on the GPU: no host
synchronisation, CUDA-graph capture and a tokens x vocab > 2^31 shape."""

import itertools
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from reference import cross_entropy_argmax_ref, cross_entropy_ref
from utils import assert_close_to_ref, needs_compiled_autograd_cpp

import liger_cpp  # noqa: F401
from liger_cpp._testing import plan_override
from liger_cpp.ops.cross_entropy import cross_entropy
from liger_cpp.transformers import CrossEntropyOutput, LigerCrossEntropyLoss, liger_cross_entropy

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
REDUCTIONS = ["mean", "sum", "none"]
# (ignore_index, fraction of targets set to it): present and negative, present and inside [0, V),
# absent from the batch and outside [0, V).
IGNORES = [(-100, 0.25), (2, 0.2), (1000003, 0.0)]
IGNORE_IDS = ["ign-100", "ign2", "ign_absent"]


def _inputs(shape, V, dtype, device, ignore_index=-100, frac=0.25, scale=3.0):
    x = (torch.randn(*shape, V, device=device) * scale).to(dtype)
    t = torch.randint(0, V, shape, device=device)
    if frac:
        t[torch.rand(shape, device=device) < frac] = ignore_index
    return x, t


def _grad_output(t, reduction):
    if reduction == "none":
        return torch.rand(t.shape, device=t.device) + 0.5
    return torch.tensor(0.37, device=t.device)


def _check(x0, t, weight=None, inplace=False, go=None, **kw):
    """Runs liger_cpp and the references on x0 and compares every output and the gradient."""
    reduction = kw.get("reduction", "mean")
    ignore_index = kw.get("ignore_index", -100)
    x = x0.detach().clone().requires_grad_(True)
    xin = x * 1 if inplace else x  # a non-leaf for the in-place option (as logits are)
    out = cross_entropy(
        xin,
        t,
        weight,
        return_z_loss=True,
        return_token_accuracy=True,
        return_predicted_tokens=True,
        inplace=inplace,
        **kw,
    )
    assert isinstance(out, CrossEntropyOutput)
    loss_shape = t.shape if reduction == "none" else ()
    assert out.loss.dtype == torch.float32 and out.loss.shape == loss_shape
    assert out.z_loss.dtype == torch.float32 and out.z_loss.shape == loss_shape
    go = _grad_output(t, reduction) if go is None else go
    out.loss.backward(go)
    assert x.grad.dtype == x0.dtype and x.grad.shape == x0.shape

    # exact: float64; low precision: HF's pipeline (logits upcast to float32, gradient cast back)
    x64 = x0.detach().double().requires_grad_(True)
    l64, z64 = cross_entropy_ref(x64, t, None if weight is None else weight.double(), **kw)
    l64.backward(go.double())
    xlo = x0.detach().clone().requires_grad_(True)
    llo, zlo = cross_entropy_ref(xlo.float(), t, None if weight is None else weight.float(), **kw)
    llo.backward(go.float())
    # A reduced loss is one number: a sum of rounded rows, 1-2 ulps off in float32, whose
    # comparison has no maximum over many elements to even out a lucky PyTorch rounding.
    ulps = 1.0 if reduction == "none" else 4.0
    assert_close_to_ref(out.loss, l64, llo, "loss", extra_ulps=ulps)
    assert_close_to_ref(out.z_loss, z64, zlo, "z_loss", extra_ulps=ulps)
    assert_close_to_ref(x.grad, x64.grad, xlo.grad, "dlogits")

    am = cross_entropy_argmax_ref(x0, t, ignore_index, kw.get("softcap"))
    assert out.predicted_tokens.dtype == torch.int64
    torch.testing.assert_close(out.predicted_tokens, am, rtol=0, atol=0)
    valid = t != ignore_index
    hit = ((am == t) & valid).float()
    acc = hit if reduction == "none" else hit.sum() / max(int(valid.sum()), 1)
    torch.testing.assert_close(out.token_accuracy, acc, rtol=1e-6, atol=0)
    return x, xin, out


# Every combination for float32; for float16 / bfloat16 the smoothing, z-loss and softcap options
# all on or all off (their math is the same, only the rounding of the output differs).
OPTIONS = list(
    itertools.product(
        REDUCTIONS,
        [False, True],  # class weights
        [0.0, 0.1],  # label smoothing
        [0.0, 0.01],  # z-loss
        [None, 4.0],  # softcap
        range(len(IGNORES)),
    )
)
CASES = [(torch.float32, o) for o in OPTIONS] + [
    (dt, o) for dt in DTYPES[1:] for o in OPTIONS if len({bool(o[2]), bool(o[3]), bool(o[4])}) == 1
]


def _opt_id(o):
    r, w, ls, lss, sc, ig = o
    return f"{r}-w{int(w)}-ls{ls}-z{lss}-sc{sc}-{IGNORE_IDS[ig]}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,opts", CASES, ids=[f"{str(d)[6:]}-{_opt_id(o)}" for d, o in CASES])
def test_every_option_combination(device, dtype, opts):
    reduction, use_w, ls, lss, softcap, ig = opts
    ignore_index, frac = IGNORES[ig]
    V = 123
    x0, t = _inputs((2, 37), V, dtype, device, ignore_index, frac)
    w = torch.rand(V, device=device) + 0.1 if use_w else None
    _check(
        x0,
        t,
        w,
        ignore_index=ignore_index,
        label_smoothing=ls,
        lse_square_scale=lss,
        softcap=softcap,
        reduction=reduction,
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,V",
    [((3, 423), 123), ((4,), 32000), ((1,), 1), ((5, 2), 7), ((), 50), ((0,), 9), ((3, 0, 2), 11)],
    ids=["3x423xV123", "4xV32000", "1xV1", "5x2xV7", "unbatched", "empty", "empty3d"],
)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_odd_shapes(device, dtype, shape, V, reduction):
    x0, t = _inputs(shape, V, dtype, device)
    _check(x0, t, reduction=reduction, label_smoothing=0.05, lse_square_scale=1e-3)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,V", [((3, 423), 32000), ((2, 4096), 32000), ((37,), 262144), ((5, 41), 151936), ((1000,), 128256)]
)
@pytest.mark.parametrize("opts", [{}, {"label_smoothing": 0.1, "lse_square_scale": 1e-4, "softcap": 30.0}])
def test_cuda_llm_shapes(dtype, shape, V, opts):
    for reduction in REDUCTIONS:
        x0, t = _inputs(shape, V, dtype, "cuda")
        w = torch.rand(V, device="cuda") + 0.1 if opts else None
        _check(x0, t, w, reduction=reduction, **opts)


# Every CUDA row kernel through the plan override (csrc/kernels/cross_entropy/cross_entropy.cu's plan,
# docs/kernels/cross_entropy.md): the shared-memory cluster kernel (the sm_90 default; TMA bulk copies
# of each block's slice) with its automatic or a forced number of blocks per row, the register
# cluster kernel (ce=cluster) and the two-pass kernel (ce=two_pass; the only one off sm_90 and below
# 2048 classes). A slice too large for shared memory (float32 V = 151936 in one block) takes the
# register kernel, so that case checks the fallback.
CE_PLANS = [
    {},
    {"ce": "cluster"},
    {"ce": "two_pass"},
    {"ce_smem_blocks": "1"},
    {"ce_smem_blocks": "2"},
    {"ce_smem_blocks": "4"},
    {"ce_smem_blocks": "8"},
]
CE_PLAN_IDS = [",".join(f"{k}={v}" for k, v in p.items()) or "default" for p in CE_PLANS]


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("plan", CE_PLANS, ids=CE_PLAN_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,V", [((3, 41), 2048), ((37,), 32000), ((5, 9), 151936), ((1,), 4104)])
@pytest.mark.parametrize("opts", [{}, {"label_smoothing": 0.1, "lse_square_scale": 1e-4, "softcap": 30.0}])
def test_cuda_row_kernels(plan, dtype, shape, V, opts):
    x0, t = _inputs(shape, V, dtype, "cuda")
    w = torch.rand(V, device="cuda") + 0.1 if opts else None
    with plan_override(**plan):
        for reduction in REDUCTIONS:
            _check(x0, t, w, reduction=reduction, **opts)
        _check(x0, t, w, inplace=True, **opts)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_all_ignored_gives_zero_not_nan(device, dtype, reduction):
    x0 = torch.randn(3, 5, 64, device=device, dtype=dtype)
    t = torch.full((3, 5), -100, device=device)
    for w in (None, torch.rand(64, device=device)):
        x = x0.clone().requires_grad_(True)
        out = cross_entropy(
            x,
            t,
            w,
            label_smoothing=0.1,
            lse_square_scale=0.1,
            reduction=reduction,
            return_z_loss=True,
            return_token_accuracy=True,
            return_predicted_tokens=True,
        )
        out.loss.backward(_grad_output(t, reduction))
        for v in (out.loss, out.z_loss, out.token_accuracy, x.grad):
            assert not v.isnan().any()
            assert torch.all(v == 0)
        assert torch.all(out.predicted_tokens == -1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_unit_grad_output_and_int32_targets(device, dtype):
    x0, t = _inputs((6, 9), 300, dtype, device)
    for reduction in REDUCTIONS:
        go = torch.ones(t.shape, device=device) if reduction == "none" else torch.tensor(1.0, device=device)
        _check(x0, t, reduction=reduction, go=go)
        _check(x0, t.int(), reduction=reduction, label_smoothing=0.2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_true_class_gradient_when_softmax_saturates(device, dtype):
    # p_y -> 1: the target's p_y - 1 must be formed before rounding (Liger PR #1268).
    x0, t = _inputs((64,), 2048, dtype, device, frac=0.0, scale=1.0)
    x0 = x0.clone()
    x0[torch.arange(64, device=device), t] = (torch.linspace(4, 14, 64, device=device)).to(dtype)
    for reduction in ("sum", "mean"):
        _check(x0, t, reduction=reduction)


@pytest.mark.parametrize("device", DEVICES)
def test_masked_classes(device):
    # -inf logits (padded vocabulary): zero probability and gradient, finite loss without smoothing.
    x0, t = _inputs((8,), 100, torch.float32, device, frac=0.0)
    x0[:, 90:] = float("-inf")
    t = t % 90
    _check(x0, t, reduction="none", lse_square_scale=1e-2)
    _check(x0, t, torch.rand(100, device=device) + 0.5, reduction="mean", softcap=5.0)


@pytest.mark.parametrize("device", DEVICES)
def test_plain_call_returns_tensor_and_leaves_logits_alone(device):
    x0, t = _inputs((4, 7), 50, torch.bfloat16, device)
    x = x0.clone().requires_grad_(True)
    loss = cross_entropy(x, t)
    assert isinstance(loss, torch.Tensor) and loss.shape == ()
    loss.backward()
    assert torch.equal(x.detach(), x0), "the default path must not write into the logits"
    out = cross_entropy(x.detach(), t, return_z_loss=True)
    assert isinstance(out, CrossEntropyOutput) and out.token_accuracy is None and out.predicted_tokens is None
    torch.testing.assert_close(out.z_loss, torch.zeros((), device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_computes_no_gradient(device):
    x0, t = _inputs((5,), 40, torch.float32, device)
    x = x0.clone().requires_grad_(True)
    with torch.no_grad():
        loss = cross_entropy(x, t)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, cross_entropy_ref(x0, t)[0])
    loss, z, dl, am = torch.ops.liger.cross_entropy_fwd(
        x0, t, None, -100, 0.0, 0.0, 0.0, "mean", False, False
    )
    assert dl.shape == (0,) and am.shape == (0,)


# ---- in place ----


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_inplace_option(device, dtype, reduction):
    x0, t = _inputs((3, 11), 257, dtype, device)
    kw = dict(reduction=reduction, label_smoothing=0.1, lse_square_scale=1e-3, softcap=8.0)
    x, xin, _ = _check(x0, t, torch.rand(257, device=device) + 0.1, inplace=True, **kw)
    assert xin._version > 0, "the write into the logits must bump their version"
    torch.testing.assert_close(xin.detach(), x.grad, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_inplace_is_visible_to_other_users_of_the_logits(device):
    x0, t = _inputs((4, 6), 33, torch.float32, device)
    # logits also used (and saved) by another loss: the in-place write must make that loud
    x = x0.clone().requires_grad_(True)
    logits = x * 1
    other = (logits * logits).sum()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (other + cross_entropy(logits, t, inplace=True)).backward()
    # the default path gives both gradients correctly
    x = x0.clone().requires_grad_(True)
    logits = x * 1
    (logits * logits).sum().add(cross_entropy(logits, t)).backward()
    x2 = x0.clone().requires_grad_(True)
    ((x2 * x2).sum() + cross_entropy_ref(x2, t)[0]).backward()
    torch.testing.assert_close(x.grad, x2.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_inplace_falls_back_when_rows_need_a_copy(device):
    x0, t = _inputs((5, 3), 40, torch.float32, device)
    x = x0.transpose(0, 1).contiguous().transpose(0, 1).requires_grad_(True)  # (5, 3, V), not flattenable
    logits = x * 1
    before = logits.detach().clone()
    cross_entropy(logits, t, inplace=True).backward()
    assert torch.equal(logits.detach(), before)
    x2 = x0.clone().requires_grad_(True)
    cross_entropy_ref(x2, t)[0].backward()
    torch.testing.assert_close(x.grad, x2.grad)
    with pytest.raises(RuntimeError, match="argument 'logits'.*without a copy"):
        torch.ops.liger.cross_entropy_fwd_(logits.detach(), t)


@pytest.mark.parametrize("device", DEVICES)
def test_inplace_op_writes_the_gradient(device):
    x0, t = _inputs((6,), 70, torch.bfloat16, device)
    loss, z, dl, am = torch.ops.liger.cross_entropy_fwd(x0, t, None, -100, 0.1, 0.0, 0.0, "sum", True, True)
    x = x0.clone()
    v = x._version
    loss2, z2, am2 = torch.ops.liger.cross_entropy_fwd_(x, t, None, -100, 0.1, 0.0, 0.0, "sum", True)
    assert x._version > v
    torch.testing.assert_close(x, dl, rtol=0, atol=0)
    torch.testing.assert_close(loss2, loss, rtol=0, atol=0)
    torch.testing.assert_close(am2, am, rtol=0, atol=0)
    g = dl.clone()
    v = g._version
    torch.ops.liger.cross_entropy_scale_grad_(g, torch.tensor(0.5, device=device))
    assert g._version > v
    torch.testing.assert_close(g, (dl.float() * 0.5).to(dl.dtype), rtol=0, atol=0)


# ---- retain_graph ----


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_second_backward_recomputes(device, reduction):
    x0, t = _inputs((4, 5), 64, torch.float32, device)
    x = x0.clone().requires_grad_(True)
    loss = cross_entropy(x, t, reduction=reduction, label_smoothing=0.1)
    g1, g2 = _grad_output(t, reduction), _grad_output(t, reduction) * 2
    loss.backward(g1, retain_graph=True)
    first = x.grad.clone()
    loss.backward(g2)
    x2 = x0.clone().requires_grad_(True)
    ref = cross_entropy_ref(x2, t, reduction=reduction, label_smoothing=0.1)[0]
    torch.testing.assert_close(first, torch.autograd.grad(ref, x2, g1, retain_graph=True)[0])
    ref.backward(g1 + g2)
    torch.testing.assert_close(x.grad, x2.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_second_backward_errors_when_it_cannot_recompute(device):
    x0, t = _inputs((4,), 64, torch.float32, device)
    x = x0.clone().requires_grad_(True)
    loss = cross_entropy(x * 2, t)  # the logits (x * 2) are not referenced after the call
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="no longer referenced"):
        loss.backward()
    logits = x * 2
    loss = cross_entropy(logits, t)
    loss.backward(retain_graph=True)
    with torch.no_grad():
        logits.add_(1)
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()
    loss = cross_entropy(x * 2, t, inplace=True)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="inplace=True"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_autograd_is_cpp(device):
    """The default path's backward runs in C++ (csrc/aten/autograd/cross_entropy_autograd.cpp),
    not as a Python autograd.Function: a Python backward under the GIL cost host time comparable
    to the kernels."""
    x0, t = _inputs((3,), 16, torch.float32, device)
    x = x0.clone().requires_grad_(True)
    for reduction in REDUCTIONS:
        loss = cross_entropy(x, t, reduction=reduction)
        assert loss.grad_fn is not None
        assert not isinstance(loss.grad_fn, torch.autograd.function.BackwardCFunction), type(loss.grad_fn)
        assert "CrossEntropyFunction" in loss.grad_fn.name()
        out = torch.ops.liger.cross_entropy_fwd(x, t, None, -100, 0.0, 0.0, 0.0, reduction, True, True)
        assert out[0].grad_fn is not None and all(not o.requires_grad for o in out[1:])
    # compute_grad=False keeps no gradient: a backward through it is a clear error, not zeros
    loss = torch.ops.liger.cross_entropy_fwd(x, t, None, -100, 0.0, 0.0, 0.0, "mean", False, False)[0]
    with pytest.raises(RuntimeError, match="compute_grad=False"):
        loss.backward()


@needs_compiled_autograd_cpp
@pytest.mark.parametrize("device", DEVICES)
def test_compiled_autograd(device):
    """The C++ node must stay traceable by compiled autograd (it hashes the node's saved data)."""
    from torch._dynamo import compiled_autograd

    torch._dynamo.reset()
    x0, t = _inputs((6,), 40, torch.float32, device)
    x = x0.clone().requires_grad_(True)
    with compiled_autograd._enable(torch.compile(backend="aot_eager")):
        cross_entropy(x, t, label_smoothing=0.1).backward()
    x2 = x0.clone().requires_grad_(True)
    cross_entropy_ref(x2, t, label_smoothing=0.1)[0].backward()
    torch.testing.assert_close(x.grad, x2.grad)


# ---- float64, opcheck, compile ----


def test_gradcheck_float64_cpu():
    V = 7
    x = torch.randn(2, 3, V, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, V, (2, 3))
    t[0, 1] = 4  # ignore_index 4 inside [0, V)
    w = torch.rand(V, dtype=torch.float64) + 0.1
    for reduction in REDUCTIONS:
        for kw in [{}, dict(label_smoothing=0.2, lse_square_scale=0.05, softcap=2.0)]:

            def f(x, reduction=reduction, kw=kw):
                return cross_entropy(x, t, w, ignore_index=4, reduction=reduction, **kw)

            # the loss is float32 even for float64 logits: a larger step keeps its rounding out
            assert torch.autograd.gradcheck(f, (x,), eps=1e-3, atol=1e-3, rtol=1e-3)
            ref = cross_entropy_ref(x, t, w, ignore_index=4, reduction=reduction, **kw)[0]
            torch.testing.assert_close(f(x), ref.float(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    V = 96
    x = torch.randn(5, 3, V, device=device, dtype=dtype, requires_grad=True)
    t = torch.randint(0, V, (5, 3), device=device)
    t[1, 2] = -100
    w = torch.rand(V, device=device)
    op = torch.ops.liger.cross_entropy_fwd
    for reduction in REDUCTIONS:
        torch.library.opcheck(op, (x, t, w, -100, 0.1, 1e-3, 5.0, reduction, True, True))
    torch.library.opcheck(op, (x, t, None, -100, 0.0, 0.0, 0.0, "mean", True, False))
    torch.library.opcheck(op, (x.detach(), t.clamp_min(0).int(), w, 3, 0.0, 0.0, 0.0, "none", False, True))
    torch.library.opcheck(
        torch.ops.liger.cross_entropy_fwd_, (x.detach().clone(), t, w, -100, 0.1, 0.0, 2.0, "sum")
    )
    g = torch.randn(5, 3, V, device=device, dtype=dtype)
    torch.library.opcheck(torch.ops.liger.cross_entropy_scale_grad_, (g, torch.tensor(0.5, device=device)))
    torch.library.opcheck(torch.ops.liger.cross_entropy_scale_grad_, (g, torch.rand(5, 3, device=device)))


def _compile_backend(device):
    return "aot_eager" if device == "cpu" else "inductor"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("inplace", [False, True])
def test_torch_compile_fullgraph(device, reduction, inplace):
    torch._dynamo.reset()
    V, H = 90, 16
    mod = LigerCrossEntropyLoss(
        weight=torch.rand(V, device=device) + 0.1,
        label_smoothing=0.1,
        lse_square_scale=1e-3,
        softcap=20.0,
        reduction=reduction,
        return_z_loss=True,
        return_token_accuracy=True,
        return_predicted_tokens=True,
        inplace=inplace,
    )

    def f(h, W, t):
        out = mod(h @ W.t(), t)
        return out.loss.sum(), out.z_loss, out.token_accuracy, out.predicted_tokens

    cf = torch.compile(f, fullgraph=True, backend=_compile_backend(device))
    h = torch.randn(3, 7, H, device=device, requires_grad=True)
    W = torch.randn(V, H, device=device, requires_grad=True)
    t = torch.randint(0, V, (3, 7), device=device)
    t[0, :3] = -100
    got = cf(h, W, t)
    got[0].backward()
    grads = [h.grad.clone(), W.grad.clone()]
    h.grad = W.grad = None
    want = f(h, W, t)
    want[0].backward()
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, [h.grad, W.grad]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_dynamic_shapes_and_output_object(device):
    torch._dynamo.reset()

    def f(x, t):
        return cross_entropy(x, t, return_token_accuracy=True, lse_square_scale=1e-2)

    cf = torch.compile(f, fullgraph=True, dynamic=True, backend=_compile_backend(device))
    for rows in (5, 9, 17):
        x0, t = _inputs((rows,), 33, torch.float32, device)
        x = x0.clone().requires_grad_(True)
        out = cf(x, t)
        assert isinstance(out, CrossEntropyOutput)
        out.loss.backward()
        x2 = x0.clone().requires_grad_(True)
        ref = f(x2, t)
        ref.loss.backward()
        torch.testing.assert_close(out.loss, ref.loss)
        torch.testing.assert_close(out.token_accuracy, ref.token_accuracy)
        torch.testing.assert_close(x.grad, x2.grad)


# ---- API ----


@pytest.mark.parametrize("device", DEVICES)
def test_module_and_functional_api(device):
    V = 50
    x0, t = _inputs((2, 9), V, torch.float32, device)
    w = torch.rand(V, device=device) + 0.1
    kw = dict(ignore_index=-100, lse_square_scale=1e-3, label_smoothing=0.1, reduction="sum", softcap=10.0)
    m = LigerCrossEntropyLoss(weight=w, **kw)
    assert torch.equal(m.state_dict()["weight"], w)
    ref = cross_entropy_ref(x0, t, w, **kw)[0]
    torch.testing.assert_close(m(x0, t), ref)
    torch.testing.assert_close(liger_cross_entropy(x0, t, w, **kw), ref)
    # F.cross_entropy's positional order: input, target, weight, size_average, ignore_index, reduce, reduction
    got = liger_cross_entropy(x0, t, w, None, -100, None, "sum")
    torch.testing.assert_close(got, cross_entropy_ref(x0, t, w, reduction="sum")[0])
    # the deprecated size_average / reduce are honoured as F.cross_entropy does
    with pytest.warns(UserWarning):
        got = liger_cross_entropy(x0, t, size_average=False)
    torch.testing.assert_close(got, cross_entropy_ref(x0, t, reduction="sum")[0])
    out = LigerCrossEntropyLoss(return_predicted_tokens=True)(x0, t)
    assert isinstance(out, CrossEntropyOutput) and out.predicted_tokens.shape == t.shape
    assert "inplace=False" in repr(LigerCrossEntropyLoss())
    for bad in [
        dict(label_smoothing=1.5),
        dict(reduction="avg"),
        dict(softcap=-1.0),
        dict(lse_square_scale=-1),
    ]:
        with pytest.raises(ValueError, match="argument '" + next(iter(bad))):
            LigerCrossEntropyLoss(**bad)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_name_the_argument(device):
    V = 20
    x, t = _inputs((4,), V, torch.float32, device)
    op = torch.ops.liger.cross_entropy_fwd

    def call(*args, **kw):
        return op(*args, **kw)

    with pytest.raises(RuntimeError, match="argument 'logits'.*expected float32"):
        call(x.long(), t)
    with pytest.raises(RuntimeError, match="argument 'logits'.*scalar"):
        call(torch.tensor(1.0, device=device), t)
    with pytest.raises(RuntimeError, match="argument 'logits'.*non-empty"):
        call(torch.randn(4, 0, device=device), t)
    with pytest.raises(RuntimeError, match="argument 'logits'.*unit stride"):
        call(torch.randn(V, 4, device=device).t(), t)
    with pytest.raises(RuntimeError, match="argument 'target'.*int64"):
        call(x, t.float())
    with pytest.raises(RuntimeError, match="argument 'target'.*shape"):
        call(x, t[:3])
    with pytest.raises(RuntimeError, match="argument 'weight'.*shape"):
        call(x, t, torch.rand(V + 1, device=device))
    with pytest.raises(RuntimeError, match="argument 'weight'.*floating"):
        call(x, t, torch.ones(V, device=device, dtype=torch.long))
    with pytest.raises(RuntimeError, match="argument 'label_smoothing'"):
        call(x, t, None, -100, 1.5)
    with pytest.raises(RuntimeError, match="argument 'label_smoothing'"):
        call(x, t, None, -100, float("nan"))
    with pytest.raises(RuntimeError, match="argument 'lse_square_scale'"):
        call(x, t, None, -100, 0.0, -1.0)
    with pytest.raises(RuntimeError, match="argument 'softcap'"):
        call(x, t, None, -100, 0.0, 0.0, -2.0)
    with pytest.raises(RuntimeError, match="argument 'reduction'"):
        call(x, t, None, -100, 0.0, 0.0, 0.0, "avg")
    with pytest.raises(ValueError, match="argument 'reduction'"):
        cross_entropy(x, t, reduction="batchmean")
    g = torch.randn(4, V, device=device)
    with pytest.raises(RuntimeError, match="argument 'grad_output'.*one per row"):
        torch.ops.liger.cross_entropy_scale_grad_(g, torch.ones(3, device=device))
    with pytest.raises(RuntimeError, match="argument 'grad'.*unit stride"):
        torch.ops.liger.cross_entropy_scale_grad_(
            torch.randn(V, 4, device=device).t(), torch.ones(1, device=device)
        )
    if device == "cuda":
        with pytest.raises(RuntimeError, match="argument 'target'.*device"):
            call(x, t.cpu())
        with pytest.raises(
            RuntimeError, match="argument 'logits'.*float64 on CPU|argument 'logits'.*expected"
        ):
            call(x.double(), t)


def test_out_of_range_targets_raise_on_cpu():
    x, t = _inputs((2, 5), 30, torch.float32, "cpu", frac=0.0)
    for bad in (30, -1, -101):
        tb = t.clone()
        tb[1, 3] = bad
        with pytest.raises(ValueError, match=f"argument 'target'.*got {bad} at position 8"):
            cross_entropy(x, tb)
    # ignore_index inside [0, V) is skipped, not an error; -1 is fine when it is ignore_index
    tb = t.clone()
    tb[0, 0] = -1
    cross_entropy(x, tb, ignore_index=-1)


# ---- GPU only ----


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_out_of_range_targets_fail_loudly_on_cuda():
    # A device-side assertion poisons the CUDA context, so this runs in a child process.
    code = textwrap.dedent(
        """
        import torch, liger_cpp
        from liger_cpp.ops.cross_entropy import cross_entropy
        x = torch.randn(64, 1000, device="cuda", requires_grad=True)
        t = torch.randint(0, 1000, (64,), device="cuda")
        t[17] = 1000
        loss = cross_entropy(x, t)
        loss.backward()
        torch.cuda.synchronize()
        print("NO ERROR", loss.item())
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "NO ERROR" not in r.stdout, r.stdout + r.stderr
    assert "assert" in (r.stdout + r.stderr).lower()


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cuda_no_host_synchronisation(reduction):
    x0, t = _inputs((8, 33), 1000, torch.bfloat16, "cuda")
    w = torch.rand(1000, device="cuda")
    go = _grad_output(t, reduction)
    x = x0.clone().requires_grad_(True)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = cross_entropy(
            x,
            t,
            w,
            label_smoothing=0.1,
            lse_square_scale=1e-3,
            reduction=reduction,
            return_z_loss=True,
            return_token_accuracy=True,
            return_predicted_tokens=True,
        )
        out.loss.backward(go)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    _check(x0, t, w, go=go, label_smoothing=0.1, lse_square_scale=1e-3, reduction=reduction)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_cuda_graph_capture():
    V = 5000
    sx, st = _inputs((64,), V, torch.bfloat16, "cuda")
    go = torch.tensor(0.5, device="cuda")
    args = (None, -100, 0.1, 1e-3, 0.0, "mean", True, True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            torch.ops.liger.cross_entropy_fwd(sx, st, *args)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss, z, dl, am = torch.ops.liger.cross_entropy_fwd(sx, st, *args)
        torch.ops.liger.cross_entropy_scale_grad_(dl, go)
    for _ in range(2):
        x0, t = _inputs((64,), V, torch.bfloat16, "cuda")
        sx.copy_(x0)
        st.copy_(t)
        graph.replay()
        e_loss, e_z, e_dl, e_am = torch.ops.liger.cross_entropy_fwd(x0, t, *args)
        torch.ops.liger.cross_entropy_scale_grad_(e_dl, go)
        for a, b in [(loss, e_loss), (z, e_z), (dl, e_dl), (am, e_am)]:
            torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_cuda_large_shape_over_2_31_elements():
    V = 128256
    rows = (1 << 31) // V + 64  # tokens x vocab > 2^31: int32 offsets would overflow in the last rows
    assert rows * V > (1 << 31)
    x = (torch.randn(rows, V, device="cuda", dtype=torch.bfloat16) * 2).requires_grad_(True)
    t = torch.randint(0, V, (rows,), device="cuda")
    t[::7] = -100
    go = torch.rand(rows, device="cuda") + 0.5
    loss = cross_entropy(x, t, reduction="none", label_smoothing=0.1)
    loss.backward(go)
    idx = torch.cat([torch.arange(8), torch.arange(rows - 64, rows), torch.randint(0, rows, (16,))]).cuda()
    xs = x.detach()[idx]
    x64 = xs.double().requires_grad_(True)
    l64, _ = cross_entropy_ref(x64, t[idx], reduction="none", label_smoothing=0.1)
    l64.backward(go[idx].double())
    xlo = xs.clone().requires_grad_(True)
    llo, _ = cross_entropy_ref(xlo.float(), t[idx], reduction="none", label_smoothing=0.1)
    llo.backward(go[idx])
    assert_close_to_ref(loss.detach()[idx], l64, llo, "loss rows")
    assert_close_to_ref(x.grad[idx], x64.grad, xlo.grad, "dlogits rows")
    x.grad = None
    with torch.no_grad():
        mean = cross_entropy(x, t)
        total = sum(
            torch.nn.functional.cross_entropy(
                x[i : i + 4096].float(), t[i : i + 4096], reduction="sum"
            ).double()
            for i in range(0, rows, 4096)
        )
        ref = total / (t != -100).sum()
    torch.testing.assert_close(mean.double(), ref, rtol=1e-5, atol=0)


def _big_allocations(fn, nbytes):
    """Sizes of the CPU allocations of at least nbytes made while fn() runs (torch profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return [e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage >= nbytes]


def test_forward_and_backward_allocate_one_logits_sized_buffer():
    # The gradient computed in the forward is the only logits-sized allocation: autograd must not
    # materialise a zero "gradient" for the dlogits output (it did: a second buffer and a fill, seen
    # as a doubled peak on the H200), and .grad takes the buffer without a copy.
    x = torch.randn(32, 20000, requires_grad=True)
    t = torch.randint(0, 20000, (32,))
    sizes = _big_allocations(lambda: cross_entropy(x, t).backward(), x.numel() * 4)
    # One event: the op's own allocations (the gradient plus its few small per-row buffers, which
    # it allocates without separate ATen events) are attributed to it.
    assert len(sizes) == 1 and x.numel() * 4 <= sizes[0] < x.numel() * 4 + 1024, sizes
