"""The cross-entropy row step (csrc/aten/checks/cross_entropy_core.h) through liger::_ce_rows, against a
float64 PyTorch formula that is itself checked against F.cross_entropy. On CUDA the default plan runs
the shared-memory cluster kernel (sm_90, aligned rows of >= 2048 classes, 1-8 blocks a row) and the
two-pass kernel (everything else: V 123, 5125-odd rows); test_cuda_each_row_kernel forces each kernel
through the plan override, the register cluster kernel included (bf16 V 262144 in 16 blocks of 256
threads and fp32 V 262144 in 16 of 512: the non-portable cluster sizes)."""

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES

import liger_cpp  # noqa: F401
from liger_cpp._testing import plan_override

ULP = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}


def ref_rows(x, y, w, ls, lss, sc, ignore, cs, zs):
    x = x.double()
    if sc:
        x = sc * torch.tanh(x / sc)
    rows, V = x.shape
    w = torch.ones(V, dtype=torch.float64, device=x.device) if w is None else w.double()
    valid = y != ignore
    ys = torch.where(valid, y, torch.zeros_like(y))
    lse = torch.logsumexp(x, 1)
    xy = x.gather(1, ys[:, None])[:, 0]
    wy = w[ys]
    ce = (1 - ls) * wy * (lse - xy)
    if ls:
        ce = ce + ls / V * (lse * w.sum() - (x * w).sum(1))
    z = lss * lse**2
    p = torch.softmax(x, 1)
    onehot = F.one_hot(ys, V).double()
    cs, zs = cs.double().expand(rows), zs.double().expand(rows)
    g = cs[:, None] * (
        p * ((1 - ls) * wy + ls / V * w.sum())[:, None] - ls / V * w[None] - (1 - ls) * wy[:, None] * onehot
    )
    g = g + (zs * 2 * lss * lse)[:, None] * p
    if sc:
        g = g * (1 - (x / sc) ** 2)
    m = valid.double()
    am = torch.where(valid, x.argmax(1), torch.full_like(y, -1))
    return ce * m, z * m, am, g * m[:, None]


def test_reference_matches_f_cross_entropy():
    x = torch.randn(7, 50, dtype=torch.float64)
    y = torch.randint(0, 50, (7,))
    y[2] = -100
    w = torch.rand(50, dtype=torch.float64) + 0.5
    one = torch.ones(1)
    ce, _, _, _ = ref_rows(x, y, w, 0.1, 0.0, 0.0, -100, one, one)
    expect = F.cross_entropy(x, y, weight=w, label_smoothing=0.1, reduction="none")
    torch.testing.assert_close(ce, expect)
    xg = x.clone().requires_grad_()
    F.cross_entropy(xg, y, weight=w, label_smoothing=0.1, reduction="sum").backward()
    _, _, _, g = ref_rows(x, y, w, 0.1, 0.0, 0.0, -100, one, one)
    torch.testing.assert_close(g, xg.grad)


SHAPES = [(1, 123), (37, 2048), (4, 5125), (5, 32000), (3, 128256), (2, 151936), (2, 262144)]
OPTIONS = {
    "plain": {},
    "smooth": {"ls": 0.1},
    "weight": {"weight": True},
    "weight_smooth": {"weight": True, "ls": 0.2},
    "softcap": {"sc": 30.0},
    "zloss": {"lss": 1e-3},
    "all": {"weight": True, "ls": 0.05, "sc": 20.0, "lss": 1e-4},
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("opt", list(OPTIONS), ids=str)
def test_rows_against_reference(device, shape, dtype, opt):
    rows, V = shape
    if device == "cpu" and V > 5125:
        pytest.skip("large vocabularies run on CUDA only (CI time)")
    o = OPTIONS[opt]
    x = (torch.randn(rows, V, device=device) * 3).to(dtype)
    y = torch.randint(0, V, (rows,), device=device)
    if rows > 2:
        y[1] = -100
    w = torch.rand(V, device=device) + 0.5 if o.get("weight") else None
    cs = torch.rand(rows, device=device) + 0.5 if rows > 1 else torch.tensor([0.7], device=device)
    zs = torch.tensor([1.3], device=device)
    ls, lss, sc = o.get("ls", 0.0), o.get("lss", 0.0), o.get("sc", 0.0)
    loss, z, am, g = torch.ops.liger._ce_rows(x, y, w, cs, zs, -100, ls, lss, sc, True)
    rce, rz, ram, rg = ref_rows(x, y, w, ls, lss, sc, -100, cs, zs)
    torch.testing.assert_close(loss.double(), rce, rtol=2e-5, atol=1e-5)
    torch.testing.assert_close(z.double(), rz, rtol=2e-5, atol=1e-6)
    assert torch.equal(am, ram)
    # One rounding of a float32 result: within 1 ulp of the dtype at each element (plus the
    # float32 error of p = exp(x - lse), ~1e-6 relative, visible only for float32).
    err = (g.double() - rg).abs()
    tol = ULP[dtype] * rg.abs() + 4e-6 * rg.abs().max() * (dtype == torch.float32) + 1e-30
    bad = err > tol + (ULP[dtype] if dtype != torch.float32 else 0) * rg.abs().max() * 2**-8
    assert not bad.any(), f"max err {err.max():.3e}, at {bad.nonzero()[:3].tolist()}"


@pytest.mark.skipif("cuda" not in DEVICES, reason="CUDA")
@pytest.mark.parametrize("plan", ["ce=smem", "ce=cluster", "ce=two_pass"])
@pytest.mark.parametrize(
    "shape", [(37, 2048), (5, 32000), (2, 151936), (2, 262144)], ids=lambda s: f"{s[0]}x{s[1]}"
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("opt", ["plain", "all"])
def test_cuda_each_row_kernel(plan, shape, dtype, opt):
    key, value = plan.split("=")
    with plan_override(**{key: value}):
        test_rows_against_reference("cuda", shape, dtype, opt)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("V", [123, 4096])
def test_special_rows(device, V):
    """-inf logits, a NaN row, an out-of-range target and a non-negative ignore_index."""
    x = torch.randn(5, V, device=device)
    x[0, :10] = float("-inf")
    x[1, 3] = float("nan")
    y = torch.tensor([15, 6, V + 3, 7, 7], device=device)
    one = torch.ones(1, device=device)
    loss, z, am, g = torch.ops.liger._ce_rows(x, y, None, one, one, 7, 0.0, 0.0, 0.0, True)
    rce, _, _, rg = ref_rows(x[:1], y[:1], None, 0.0, 0.0, 0.0, 7, one, one)
    torch.testing.assert_close(loss[0].double(), rce[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g[0].double(), rg[0], rtol=1e-4, atol=1e-7)
    assert torch.isnan(loss[1]) and torch.isnan(g[1]).all()
    assert torch.isnan(loss[2]) and torch.isnan(g[2]).all() and am[2] == -1
    assert (loss[3:] == 0).all() and (g[3:] == 0).all() and (am[3:] == -1).all()


@pytest.mark.skipif("cuda" not in DEVICES, reason="CUDA")
def test_cuda_matches_cpu_argmax_ties_and_determinism():
    V = 32000
    x = torch.randn(64, V).to(torch.bfloat16)
    x[:, 100] = 10.0
    x[:, 31000] = 10.0  # tie: the first index wins
    y = torch.randint(0, V, (64,))
    one = torch.ones(1)
    cpu = torch.ops.liger._ce_rows(x, y, None, one, one, -100, 0.0, 0.0, 0.0, True)
    xc, yc, oc = x.cuda(), y.cuda(), one.cuda()
    a = torch.ops.liger._ce_rows(xc, yc, None, oc, oc, -100, 0.0, 0.0, 0.0, True)
    b = torch.ops.liger._ce_rows(xc, yc, None, oc, oc, -100, 0.0, 0.0, 0.0, True)
    assert (a[2].cpu() == 100).all() and (cpu[2] == 100).all()
    for u, v in zip(a, b):
        assert torch.equal(u, v)
    torch.testing.assert_close(a[0].cpu(), cpu[0], rtol=1e-5, atol=1e-5)


@pytest.mark.skipif("cuda" not in DEVICES, reason="CUDA")
def test_strided_and_unaligned_rows():
    V = 4096
    big = torch.randn(6, V + 3, device="cuda", dtype=torch.bfloat16)
    x = big[:, 1 : V + 1]  # rows not 16-byte aligned: two-pass kernel
    y = torch.randint(0, V, (6,), device="cuda")
    one = torch.ones(1, device="cuda")
    loss, _, _, g = torch.ops.liger._ce_rows(x, y, None, one, one, -100, 0.0, 0.0, 0.0, True)
    rce, _, _, rg = ref_rows(x, y, None, 0.0, 0.0, 0.0, -100, one, one)
    torch.testing.assert_close(loss.double(), rce, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g.double(), rg, rtol=2**-7, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_scale_rows_skips_unit_factor(device):
    # covered through _ce_rows's scales above; here the all-ignored batch gives zeros, not NaN
    x = torch.randn(3, 2048, device=device)
    y = torch.full((3,), -100, device=device)
    zero = torch.zeros(1, device=device)
    loss, z, am, g = torch.ops.liger._ce_rows(x, y, None, zero, zero, -100, 0.1, 1e-4, 0.0, True)
    assert (loss == 0).all() and (g == 0).all() and not torch.isnan(g).any()
