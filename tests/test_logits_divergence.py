"""Divergences of given distributions (liger_cpp.transformers.LigerJSD / liger_jsd, LigerKLDIVLoss /
liger_kl_div, LigerTVDLoss / liger_tvd) against pure-PyTorch float64 references: Liger's formulas
(ops/jsd.py, kl_div.py, tvd.py; PyTorch's F.kl_div for the KL), every reduction, shift labels with
ignored rows, differentiated by autograd."""

import pytest
import torch
import torch.nn.functional as F
from conftest import CUDA_OK, DEVICES
from rl_reference import liger_jsd_reference, tol_close

from liger_cpp.transformers import LigerJSD, LigerKLDIVLoss, LigerTVDLoss, liger_jsd, liger_kl_div, liger_tvd

pytestmark = pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")

DTYPES = [torch.float32, torch.bfloat16, torch.float64] + ([torch.float16] if CUDA_OK else [])


def _skip64(device, dtype):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 is CPU-only")


def _logprobs(BT, V, device, dtype, seed, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(BT, V, generator=gen, dtype=torch.float64) * scale, -1).to(
        device, dtype
    )


def _labels(BT, device, n_ignored=3, seed=5):
    gen = torch.Generator().manual_seed(seed)
    t = torch.randint(0, 10, (BT,), generator=gen)
    t[torch.randperm(BT, generator=gen)[:n_ignored]] = -100
    return t.to(device)


def _compare(fn, ref, inputs, dtype, grad_shape=None, name="loss"):
    """fn(x, y) vs ref(x, y) in float64 and in the input dtype: the loss and the first input's gradient
    (grad_output 2.5 for reduced losses, a random one for reduction none)."""
    x, y = inputs
    x = x.detach().requires_grad_(True)
    out = fn(x, y)
    g = (
        torch.full((), 2.5)
        if out.dim() == 0
        else torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    )
    out.backward(g.to(out.device, out.dtype))
    lo = torch.float32 if dtype == torch.float64 else dtype
    res = {}
    for rdt in (torch.float64, lo):
        xr = x.detach().to(rdt).requires_grad_(True)
        r = ref(xr, y.to(rdt))
        r.backward(g.to(r.device, r.dtype))
        res[rdt] = (r, xr.grad)
    assert out.dtype == torch.float32
    tol_close(name, out, res[torch.float64][0], res[lo][0], dtype)
    tol_close("grad", x.grad, res[torch.float64][1], res[lo][1], dtype)


# ---------------------------------------------------------------- JSD
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("labels", [False, True])
def test_jsd(device, dtype, beta, labels):
    _skip64(device, dtype)
    BT, V = 37, 123
    q, p = _logprobs(BT, V, device, dtype, 0), _logprobs(BT, V, device, dtype, 1)
    sl = _labels(BT, device) if labels else None
    _compare(
        lambda a, b: LigerJSD(beta=beta)(a, b, sl),
        lambda a, b: liger_jsd_reference(a, b, sl, beta=beta),
        (q, p),
        dtype,
    )


@pytest.mark.parametrize("device", DEVICES)
def test_jsd_functional_and_all_ignored(device):
    q, p = _logprobs(8, 20, device, torch.float32, 0), _logprobs(8, 20, device, torch.float32, 1)
    sl = torch.full((8,), -100, device=device)
    sl[2] = 4
    torch.testing.assert_close(liger_jsd(q, p, sl, beta=0.2), LigerJSD(beta=0.2)(q, p, sl))
    q = q.requires_grad_(True)
    loss = liger_jsd(q, p, torch.full((8,), -100, device=device))
    loss.backward()
    assert loss.item() == 0.0 and (q.grad == 0).all()  # 0 and a zero gradient, not NaN


# ---------------------------------------------------------------- KL
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean", "batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(device, dtype, reduction, log_target):
    _skip64(device, dtype)
    BT, V = 29, 123
    q, p = _logprobs(BT, V, device, dtype, 0), _logprobs(BT, V, device, dtype, 1)
    if not log_target:
        p = p.exp()

    def ref(a, b):  # PyTorch's own KL divergence (Liger's eps clamp only matters where the target is 0)
        return F.kl_div(a, b, reduction=reduction, log_target=log_target)

    _compare(
        lambda a, b: LigerKLDIVLoss(reduction=reduction, log_target=log_target)(a, b), ref, (q, p), dtype
    )


@pytest.mark.parametrize("device", DEVICES)
def test_kl_div_eps_zero_targets_and_functional(device):
    q = _logprobs(6, 10, device, torch.float32, 0).requires_grad_(True)
    p = torch.zeros(6, 10, device=device)
    p[:, 3] = 1.0
    loss = liger_kl_div(q, p, reduction="batchmean")  # Liger's functional default is "mean"; this is explicit
    e = (p * (torch.log(p.clamp(min=1e-10)) - q)).sum() / 6
    torch.testing.assert_close(loss, e)
    loss.backward()
    torch.testing.assert_close(q.grad, -p / 6)
    assert LigerKLDIVLoss().reduction == "mean" and LigerKLDIVLoss(eps=1e-6).eps == 1e-6
    torch.testing.assert_close(liger_kl_div(q, p), F.kl_div(q.detach(), p, reduction="mean"))


# ---------------------------------------------------------------- TVD
def tvd_reference(p, q, shift_labels=None, reduction="batchmean", ignore_index=-100):
    el = 0.5 * (p - q).abs()
    if shift_labels is not None:
        keep = (shift_labels != ignore_index).unsqueeze(-1)
        el = el * keep
        n = keep.sum()
    else:
        n = p.shape[0]
    if reduction == "none":
        return el
    if reduction == "sum":
        return el.sum()
    if reduction == "mean":
        return el.sum() / (n * p.shape[-1])
    return el.sum() / n


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean", "batchmean"])
@pytest.mark.parametrize("labels", [False, True])
def test_tvd(device, dtype, reduction, labels):
    _skip64(device, dtype)
    BT, V = 31, 123
    p, q = _logprobs(BT, V, device, dtype, 0).exp(), _logprobs(BT, V, device, dtype, 1).exp()
    sl = _labels(BT, device) if labels else None
    _compare(
        lambda a, b: LigerTVDLoss(reduction=reduction)(a, b, sl),
        lambda a, b: tvd_reference(a, b, sl, reduction),
        (p, q),
        dtype,
    )


@pytest.mark.parametrize("device", DEVICES)
def test_tvd_ties_and_functional_default(device):
    p = torch.tensor([[0.5, 0.25, 0.25]], device=device, requires_grad=True)
    q = torch.tensor([[0.5, 0.5, 0.0]], device=device)
    liger_tvd(p, q).backward()  # functional default "mean": / (rows x V)
    torch.testing.assert_close(p.grad, torch.tensor([[0.0, -0.5, 0.5]], device=device) / 3)  # 0 at the tie


# ---------------------------------------------------------------- shapes, compile, opcheck, errors
@pytest.mark.parametrize("device", DEVICES)
def test_leading_dimensions_and_strided_rows(device):
    q = _logprobs(12, 40, device, torch.float32, 0).view(3, 4, 40)
    p = _logprobs(12, 40, device, torch.float32, 1).view(3, 4, 40)
    wide = torch.zeros(12, 50, device=device)
    wide[:, :40] = q.reshape(12, 40)
    strided = wide[:, :40]  # rows with a stride of 50
    torch.testing.assert_close(liger_jsd(strided, p.reshape(12, 40)), liger_jsd(q, p))
    out = LigerKLDIVLoss(reduction="none", log_target=True)(q, p)
    assert out.shape == q.shape
    torch.testing.assert_close(out, F.kl_div(q, p, reduction="none", log_target=True))


@pytest.mark.parametrize("device", DEVICES)
def test_retain_graph_second_backward_reruns(device):
    q = _logprobs(8, 20, device, torch.float32, 0).requires_grad_(True)
    p = _logprobs(8, 20, device, torch.float32, 1)
    loss = liger_jsd(q, p)
    loss.backward(retain_graph=True)
    g = q.grad.clone()
    loss.backward()
    torch.testing.assert_close(q.grad, 2 * g)


def test_gradcheck_float64_cpu():
    q = _logprobs(4, 6, "cpu", torch.float64, 0).requires_grad_(True)
    p = _logprobs(4, 6, "cpu", torch.float64, 1)
    sl = torch.tensor([1, -100, 2, 3])
    # the losses are float32 even for float64 inputs: a larger step keeps their rounding out
    kw = dict(eps=1e-3, atol=1e-3, rtol=1e-3)
    assert torch.autograd.gradcheck(lambda a: liger_jsd(a, p, sl, beta=0.3), (q,), **kw)
    assert torch.autograd.gradcheck(
        lambda a: liger_kl_div(a, p, reduction="none", log_target=True), (q,), **kw
    )
    pp = p.exp().detach().requires_grad_(True)
    qq = q.detach().exp() + 0.3  # held: a second backward (gradcheck's reentrancy check) reruns the op
    assert torch.autograd.gradcheck(lambda a: liger_tvd(a, qq, sl), (pp,), **kw)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    q = _logprobs(6, 16, device, torch.float32, 0).requires_grad_(True)
    p = _logprobs(6, 16, device, torch.float32, 1)
    sl = torch.tensor([1, -100, 2, 3, 4, -100], device=device)
    torch.library.opcheck(torch.ops.liger.jsd_fwd, (q, p, sl, 0.4, -100, True))
    torch.library.opcheck(torch.ops.liger.kl_div_fwd, (q, p, "none", True, 1e-10, True))
    torch.library.opcheck(
        torch.ops.liger.tvd_fwd, (q.exp().detach().requires_grad_(True), p.exp(), sl, "mean")
    )


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    q = _logprobs(6, 16, device, torch.float32, 0).requires_grad_(True)
    p = _logprobs(6, 16, device, torch.float32, 1)
    sl = torch.tensor([1, -100, 2, 3, 4, -100], device=device)

    def f(q):
        return (
            liger_jsd(q * 1.0, p, sl)
            + LigerKLDIVLoss(reduction="none", log_target=True)(q, p).sum()
            + liger_tvd(q.exp(), p.exp(), sl)
        )

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    out = cf(q)
    out.backward()
    g = q.grad.clone()
    q.grad = None
    e = f(q)
    e.backward()
    torch.testing.assert_close(out, e)
    torch.testing.assert_close(g, q.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    q = _logprobs(6, 16, device, torch.float32, 0)
    p = _logprobs(6, 16, device, torch.float32, 1)
    with pytest.raises(RuntimeError, match="argument 'target'"):
        liger_jsd(q, p[:, :8])
    with pytest.raises(RuntimeError, match="argument 'target'"):
        liger_jsd(q, p.double())
    with pytest.raises(RuntimeError, match="argument 'shift_labels'"):
        liger_jsd(q, p, torch.zeros(5, dtype=torch.long, device=device))
    with pytest.raises(RuntimeError, match="argument 'beta'"):
        liger_jsd(q, p, beta=1.5)
    with pytest.raises(ValueError, match="argument 'reduction'"):
        liger_tvd(q, p, reduction="avg")
    with pytest.raises(RuntimeError, match="argument 'input'"):
        liger_kl_div(q.long(), p.long())
