"""Every op's backward accepts a gradient of another floating dtype than its output and casts it to
the output's dtype, as PyTorch's own backward formulas do (issue 26, item 4): through the autograd
engine (loss.backward(bf16 grad) for the float32 losses, float32 grads for bf16 outputs) and when
the C++ node is called directly (which skips the engine's own cast). The gradients must equal those
for the same gradient cast to the output's dtype beforehand, bit for bit."""

import pytest
import torch
from conftest import DEVICES

import liger_cpp  # noqa: F401
from liger_cpp.ops.cross_entropy import cross_entropy
from liger_cpp.ops.dyt import dyt
from liger_cpp.ops.fused_add_rms_norm import fused_add_rms_norm
from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy
from liger_cpp.ops.fused_linear_preference import fused_linear_kto, fused_linear_preference
from liger_cpp.ops.geglu import geglu
from liger_cpp.ops.glu_mlp import glu_mlp
from liger_cpp.ops.layer_norm import layer_norm
from liger_cpp.ops.moe_experts import moe_experts
from liger_cpp.ops.poly_norm import poly_norm
from liger_cpp.ops.qkv_rope import qkv_rope
from liger_cpp.ops.rms_norm import rms_norm
from liger_cpp.ops.rope import mrope, rope
from liger_cpp.ops.swiglu import swiglu

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


def _fused_add(rnd):
    x, r, w = rnd(3, 8), rnd(3, 8), rnd(8)
    return lambda: (list(fused_add_rms_norm(x, r, w)), [x, r, w])


def _cases(device, dtype):
    """{name: (make() -> (differentiable outputs, inputs))}; fresh inputs per call."""
    g = torch.Generator().manual_seed(0)

    def rnd(*shape, dt=dtype, grad=True):
        return torch.randn(*shape, generator=g).to(device, dt).requires_grad_(grad)

    def lin():
        h, w = rnd(2, 3, 16), (rnd(40, 16, grad=False) * 0.3).requires_grad_(True)
        t = torch.randint(0, 40, (2, 3), generator=g).to(device)
        t[0, 1] = -100
        return h, w, t

    def ce(**kw):
        x = rnd(4, 3, 50)
        t = torch.randint(0, 50, (4, 3), generator=g).to(device)
        return lambda: ([cross_entropy(x * 1 if kw.get("inplace") else x, t, **kw)], [x])

    def flce(reduction):
        h, w, t = lin()
        return lambda: ([fused_linear_cross_entropy(h, w, t, reduction=reduction, chunk_rows=4)[0]], [h, w])

    def pref():
        h, w, t = lin()
        h2, t2 = h.detach()[:2, :2].clone().requires_grad_(True), t[:2, :2]
        return lambda: ([fused_linear_preference(h2, w, t2)[0]], [h2, w])

    def kto():
        h, w, t = lin()
        return lambda: ([fused_linear_kto(h, w, t, torch.tensor([True, False], device=device))[0]], [h, w])

    def norm(f):
        x, w, b = rnd(3, 8), (1 + 0.1 * rnd(8, grad=False)).requires_grad_(True), rnd(8)
        return lambda: f(x, w, b)

    def glu(f):
        a, b = rnd(3, 8), rnd(3, 8)
        return lambda: ([f(a * 1, b * 1)], [a, b])

    def mlp(**kw):
        x, wg, wu, wd = rnd(2, 3, 8), rnd(6, 8), rnd(6, 8), rnd(5, 6)
        return lambda: ([glu_mlp(x, wg, wu, wd, **kw)], [x, wg, wu, wd])

    def qkv():
        x, wq, wk, wv = rnd(2, 3, 8), rnd(8, 8), rnd(4, 8), rnd(4, 8)
        c, s = rnd(3, 4, grad=False), rnd(3, 4, grad=False)
        return lambda: (list(qkv_rope(x, wq, wk, wv, c, s, 4)), [x, wq, wk, wv])

    def rot(mr):
        q, k = rnd(1, 2, 3, 8), rnd(1, 1, 3, 8)
        if mr:
            c, s = rnd(3, 1, 3, 8, grad=False), rnd(3, 1, 3, 8, grad=False)
            return lambda: (list(mrope(q, k, c, s, [2, 1, 1])), [q, k])
        c, s = rnd(3, 8, grad=False), rnd(3, 8, grad=False)
        return lambda: (list(rope(q, k, c, s)), [q, k])

    def moe():
        x, w, gu, dn = rnd(5, 8), rnd(5, 2), rnd(3, 16, 8), rnd(3, 8, 8)
        idx = torch.tensor([[0, 1], [1, 2], [2, 0], [0, 2], [1, 0]], device=device)
        return lambda: ([moe_experts(x, idx, w, gu, dn)], [x, w, gu, dn])

    def dyt_case():
        x, a, w, b = rnd(3, 8), rnd(1), rnd(8), rnd(8)
        return lambda: ([dyt(x, a, w, b)], [x, a, w, b])

    def poly_norm_case():
        x, w, b = rnd(3, 8), rnd(3), rnd(())
        return lambda: ([poly_norm(x, w, b)], [x, w, b])

    return {
        "rms_norm": norm(lambda x, w, b: ([rms_norm(x, w)], [x, w])),
        "rms_norm_inplace": norm(lambda x, w, b: ([rms_norm(x, w, in_place=True)], [x, w])),
        "fused_add_rms_norm": _fused_add(rnd),
        "layer_norm": norm(lambda x, w, b: ([layer_norm(x, w, b)], [x, w, b])),
        "swiglu": glu(swiglu),
        "swiglu_inplace": glu(lambda a, b: swiglu(a, b, in_place=True)),
        "geglu": glu(geglu),
        "glu_mlp": mlp(),
        "glu_mlp_inplace": mlp(activation="gelu", in_place=True),
        "qkv_rope": qkv(),
        "cross_entropy": ce(),
        "cross_entropy_none": ce(reduction="none"),
        "cross_entropy_inplace": ce(inplace=True),
        "flce_mean": flce("mean"),
        "flce_none": flce("none"),
        "preference": pref(),
        "kto": kto(),
        "rope": rot(False),
        "mrope": rot(True),
        "moe_experts": moe(),
        "dyt": dyt_case(),
        "poly_norm": poly_norm_case(),
    }


NAMES = list(_cases("cpu", torch.float32))


def _grads_like(outs, dt, seed=1):
    """Gradients with values k / 8, k in 1..15: exact in every floating dtype, so a gradient handed
    over in another dtype carries the same numbers."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(1, 16, o.shape, generator=g) / 8).to(o.device, dt) for o in outs]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_backward_casts_grad_output(device, dtype, name):
    make = _cases(device, dtype)[name]
    outs, inputs = make()
    ref = torch.autograd.grad(outs, inputs, _grads_like(outs, outs[0].dtype))
    for gdt in FLOATS:
        if gdt == outs[0].dtype or (device == "cuda" and gdt == torch.float64 and dtype != torch.float64):
            continue
        outs, inputs = make()
        # the same numbers handed over in gdt: the results must be identical
        grads = _grads_like(outs, gdt)
        got = torch.autograd.grad(outs, inputs, grads)
        for a, b in zip(got, ref):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        # the node itself, without the engine's cast
        outs, inputs = make()
        node = outs[0].grad_fn
        assert "BackwardCFunction" not in type(node).__name__, type(node)
        direct = node(*_grads_like(outs, gdt))
        direct = direct if isinstance(direct, tuple) else (direct,)
        for a, b in zip([d for d in direct if d is not None], [r for r in ref if r is not None]):
            assert a.dtype == b.dtype
            torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_bf16_grad_for_float32_loss(device):
    # The reported failure: a bf16 grad_output for the float32 loss.
    x = torch.randn(8, 32, device=device, requires_grad=True)
    t = torch.randint(0, 32, (8,), device=device)
    loss = cross_entropy(x, t)
    assert loss.dtype == torch.float32
    loss.backward(torch.tensor(0.5, dtype=torch.bfloat16, device=device))
    x2 = x.detach().clone().requires_grad_(True)
    torch.nn.functional.cross_entropy(x2, t).backward(torch.tensor(0.5, device=device))
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-7)
