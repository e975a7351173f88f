"""mHC (liger_cpp.transformers.mhc; Liger's LigerMHC and functionals): against a float64 reference
that writes the paper's steps out token by token (the Sinkhorn iteration as Liger's kernel runs it),
bfloat16 inputs, the doubly stochastic h_res, gradients (gradcheck), the module, errors."""

import pytest
import torch
from conftest import DEVICES
from torch import nn

from liger_cpp.transformers.mhc import (
    LigerMHC,
    LigerMHCCoeffsFunction,
    liger_mhc_apply,
    liger_mhc_coeffs,
    liger_mhc_forward,
)

HC, C = 4, 6
KW = dict(tmax=20, rms_eps=1e-6, pre_eps=0.01, sinkhorn_eps=1e-6, post_mult=2.0)


def _params(g, dtype=torch.float64):
    m = HC * HC + 2 * HC
    phi = torch.randn(HC * C, m, generator=g, dtype=dtype) * 0.3
    b = torch.randn(m, generator=g, dtype=dtype) * 0.1
    alphas = [torch.tensor(v, dtype=dtype) for v in (0.9, 1.1, 1.3)]
    return phi, b, alphas


def reference(x, phi, b, alphas, layer, tmax, rms_eps, pre_eps, sinkhorn_eps, post_mult):
    """Token by token in float64: mix, the gates, Sinkhorn (row softmax + eps, column
    normalisation, then tmax - 1 row / column rounds), pre-aggregation, layer, post + residual."""
    lead = x.shape[:-2]
    xs = x.double().reshape(-1, HC, C)
    outs, coeffs = [], []
    for t in range(xs.shape[0]):
        xt = xs[t]
        flat = xt.reshape(-1)
        mix = (flat @ phi.double()) / torch.sqrt((flat * flat).mean() + rms_eps)
        pre = torch.sigmoid(mix[:HC] * alphas[0] + b[:HC]) + pre_eps
        post = torch.sigmoid(mix[HC : 2 * HC] * alphas[1] + b[HC : 2 * HC]) * post_mult
        lg = (mix[2 * HC :] * alphas[2] + b[2 * HC :]).reshape(HC, HC)
        mat = torch.exp(lg - lg.max(1, keepdim=True).values)
        mat = mat / mat.sum(1, keepdim=True) + sinkhorn_eps
        mat = mat / (mat.sum(0, keepdim=True) + sinkhorn_eps)
        for _ in range(tmax - 1):
            mat = mat / (mat.sum(1, keepdim=True) + sinkhorn_eps)
            mat = mat / (mat.sum(0, keepdim=True) + sinkhorn_eps)
        x_in = sum(pre[i] * xt[i] for i in range(HC))
        f = layer(x_in)
        outs.append(torch.stack([sum(mat[o, i] * xt[i] for i in range(HC)) + post[o] * f for o in range(HC)]))
        coeffs.append((pre, post, mat))
    out = torch.stack(outs).reshape(*lead, HC, C)
    return out, [torch.stack(c).reshape(*lead, *c[0].shape) for c in zip(*coeffs)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_matches_reference(device, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, HC, C, generator=g)
    phi, b, alphas = _params(g)
    lin = nn.Linear(C, C).double()
    want, (pre, post, res) = reference(x, phi, b, alphas, lin, **KW)
    lin_d = nn.Linear(C, C).to(device, dtype)
    lin_d.load_state_dict(lin.state_dict())
    args = [t.to(device) for t in (phi.float(), b.float(), *(a.float() for a in alphas))]
    got, (gp, gq, gr) = liger_mhc_forward(
        x.to(device, dtype), lin_d, *args, allow_fp32=True, return_coeffs=True, **KW
    )
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got.double().cpu(), want, rtol=tol, atol=tol)
    ctol = 1e-5 if dtype == torch.float32 else 2e-2
    for a, w in ((gp, pre), (gq, post), (gr, res)):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.double().cpu(), w, rtol=ctol, atol=ctol)
    # h_res is doubly stochastic: columns exactly (the last normalisation), rows nearly after 20 rounds
    torch.testing.assert_close(gr.sum(-2), torch.ones_like(gr.sum(-2)), rtol=0, atol=1e-4)
    torch.testing.assert_close(gr.sum(-1), torch.ones_like(gr.sum(-1)), rtol=0, atol=1e-2)  # rows: 20 rounds


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, HC, C, generator=g, dtype=torch.float64, requires_grad=True)
    phi, b, alphas = _params(g)
    ins = [x, phi.requires_grad_(), b.requires_grad_(), *(a.requires_grad_() for a in alphas)]
    f = torch.randn(3, C, generator=g, dtype=torch.float64, requires_grad=True)

    def fn(x, phi, b, a0, a1, a2, f):
        pre, post, res = LigerMHCCoeffsFunction.apply(x, phi, b, a0, a1, a2, True, 5, 1e-6, 0.0, 1e-6, 2.0)
        return liger_mhc_apply(x, f, pre, post, res, return_x_in=True)

    assert torch.autograd.gradcheck(fn, (*ins, f))


def test_module_and_errors():
    torch.manual_seed(0)
    m = LigerMHC(nn.Linear(C, C), hc=HC, c=C, phi_dtype=torch.float32, allow_fp32=True)
    assert m.phi.shape == (HC * C, HC * HC + 2 * HC) and m.phi.dtype == torch.float32
    assert torch.equal(m.b, torch.zeros_like(m.b)) and m.alpha_pre.item() == 1.0
    x = torch.randn(2, 5, HC, C)
    y = m(x)
    assert y.shape == x.shape
    y.sum().backward()
    assert m.phi.grad is not None and m.layer.weight.grad is not None
    with pytest.raises(ValueError, match="argument 'x'"):
        m(torch.randn(2, HC + 1, C))
    strict = LigerMHC(nn.Linear(C, C), hc=HC, c=C)
    with pytest.raises(ValueError, match="allow_fp32"):
        strict(x)
    with pytest.raises(ValueError, match="'phi'"):
        liger_mhc_coeffs(x.bfloat16(), torch.zeros(3, 3), m.b, m.alpha_pre, m.alpha_post, m.alpha_res)


def test_liger_names_are_these():
    """Liger's names through the compatibility package are these objects, not stubs."""
    from compat_env import ensure_compat

    ensure_compat()
    import liger_kernel.ops as lko
    import liger_kernel.transformers as lkt
    from liger_kernel.transformers import functional as lkf

    import liger_cpp.transformers.mhc as ours

    for name in (
        "liger_mhc_coeffs",
        "liger_mhc_pre",
        "liger_mhc_post_res",
        "liger_mhc_apply",
        "liger_mhc_forward",
    ):
        assert getattr(lkf, name) is getattr(ours, name), name
    assert lkt.LigerMHC is ours.LigerMHC and lko.LigerMHCCoeffsFunction is ours.LigerMHCCoeffsFunction
