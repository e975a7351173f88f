"""Autograd has one home for every op: C++ on the Autograd dispatch key (csrc/aten/autograd/
<op>_autograd.cpp; why: docs/adding_an_op.md). For each differentiable op: the registration, a C++
node (never a Python autograd.Function), no node at all when nothing needs a gradient, only the
gradients needs_input_grad asks for (a frozen weight costs no dW), no materialised zero gradients
for unused outputs, a clear error on double backward, compiled autograd, and the in-place options
taken eagerly but never while torch.compile traces."""

import re

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from utils import assert_backward_builds_no_zeros, needs_compiled_autograd_cpp

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

# op -> the file its Autograd kernel must be registered from
AUTOGRAD_FILES = {
    "rms_norm_fwd": "rms_norm_autograd.cpp",
    "fused_add_rms_norm_fwd": "fused_add_rms_norm_autograd.cpp",
    "layer_norm_fwd": "layer_norm_autograd.cpp",
    "swiglu_fwd": "glu_autograd.cpp",
    "geglu_fwd": "glu_autograd.cpp",
    "glu_mlp": "glu_mlp_autograd.cpp",
    "qkv_rope": "qkv_rope_autograd.cpp",
    "cross_entropy_fwd": "cross_entropy_autograd.cpp",
    "cross_entropy_fwd_": "cross_entropy_autograd.cpp",
    "fused_linear_cross_entropy_fwd": "fused_linear_cross_entropy_autograd.cpp",
    "fused_linear_preference_fwd": "fused_linear_preference_autograd.cpp",
    "fused_linear_kto_fwd": "fused_linear_preference_autograd.cpp",
    "rope_fwd": "rope_autograd.cpp",
    "mrope_fwd": "rope_autograd.cpp",
    "moe_experts_fwd": "moe_experts_autograd.cpp",
    "dyt_fwd": "dyt_autograd.cpp",
    "poly_norm_fwd": "poly_norm_autograd.cpp",
}


def _autograd_registration(op):
    dump = torch._C._dispatch_dump(f"liger::{op}")
    return [line for line in dump.splitlines() if line.startswith("Autograd")]


@pytest.mark.parametrize("op", sorted(AUTOGRAD_FILES))
def test_autograd_is_registered_in_cpp(op):
    lines = _autograd_registration(op)
    assert len(lines) == 1, lines
    assert re.search(rf"csrc/aten/autograd/{AUTOGRAD_FILES[op]}:\d+", lines[0]), lines[0]


def test_no_python_autograd_registrations():
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("liger::"):
            continue
        for line in _autograd_registration(name[len("liger::") :]):
            assert "library.py" not in line and "python" not in line.lower(), (name, line)


def _inputs(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)

    def rnd(*s, grad=True):
        return torch.randn(*s, generator=g).to(dtype).requires_grad_(grad)

    return rnd


def _cases(rnd):
    """{name: (f() -> (outputs to differentiate, [inputs]))}."""
    x, r, w, b = rnd(3, 8), rnd(3, 8), (1 + 0.1 * rnd(8, grad=False)).requires_grad_(), rnd(8)
    a, u = rnd(3, 8), rnd(3, 8)
    h, lw = rnd(2, 3, 16), (0.3 * rnd(40, 16, grad=False)).requires_grad_()
    lb = rnd(40)
    t = torch.randint(0, 40, (2, 3), generator=torch.Generator().manual_seed(1))
    q, k = rnd(1, 2, 3, 8), rnd(1, 1, 3, 8)
    cos, sin = rnd(3, 8, grad=False), rnd(3, 8, grad=False)
    c3, s3 = rnd(3, 1, 3, 8, grad=False), rnd(3, 1, 3, 8, grad=False)
    lg = rnd(6, 40)
    mx, mw, mgu, mdn = rnd(5, 8), rnd(5, 2), rnd(3, 8, 8), rnd(3, 8, 4)
    midx = torch.tensor([[0, 1], [1, 2], [2, 0], [0, 2], [1, 0]])
    gx, gwg, gwu, gwd = rnd(2, 3, 8), rnd(6, 8), rnd(6, 8), rnd(5, 6)
    px, pq, pk, pv = rnd(2, 3, 8), rnd(8, 8), rnd(4, 8), rnd(4, 8)
    pcos, psin = rnd(3, 4, grad=False), rnd(3, 4, grad=False)
    da, pw, pb = rnd(1), rnd(3), rnd(())
    return {
        "rms_norm": lambda: ([rms_norm(x, w)], [x, w]),
        "fused_add_rms_norm": lambda: (list(fused_add_rms_norm(x, r, w)), [x, r, w]),
        "layer_norm": lambda: ([layer_norm(x, w, b)], [x, w, b]),
        "swiglu": lambda: ([swiglu(a, u)], [a, u]),
        "geglu": lambda: ([geglu(a, u)], [a, u]),
        "glu_mlp": lambda: ([glu_mlp(gx, gwg, gwu, gwd)], [gx, gwg, gwu, gwd]),
        "glu_mlp_inplace": lambda: (
            [glu_mlp(gx, gwg, gwu, gwd, "gelu_tanh", in_place=True)],
            [gx, gwg, gwu, gwd],
        ),
        "qkv_rope": lambda: (list(qkv_rope(px, pq, pk, pv, pcos, psin, 4)), [px, pq, pk, pv]),
        "cross_entropy": lambda: ([cross_entropy(lg, t.view(-1))], [lg]),
        "cross_entropy_inplace": lambda: ([cross_entropy(lg * 1, t.view(-1), inplace=True)], [lg]),
        "flce_mean": lambda: ([fused_linear_cross_entropy(h, lw, t, lb)[0]], [h, lw, lb]),
        "flce_none": lambda: ([fused_linear_cross_entropy(h, lw, t, lb, reduction="none")[0]], [h, lw, lb]),
        "preference": lambda: ([fused_linear_preference(h, lw, t, lb)[0]], [h, lw, lb]),
        "kto": lambda: ([fused_linear_kto(h, lw, t, torch.tensor([True, False]), lb)[0]], [h, lw, lb]),
        "rope": lambda: (list(rope(q, k, cos, sin)), [q, k]),
        "mrope": lambda: (list(mrope(q, k, c3, s3, [2, 1, 1])), [q, k]),
        "moe_experts": lambda: ([moe_experts(mx, midx, mw, mgu, mdn)], [mx, mw, mgu, mdn]),
        "dyt": lambda: ([dyt(x, da, w, b)], [x, da, w, b]),
        "poly_norm": lambda: ([poly_norm(x, pw, pb)], [x, pw, pb]),
    }


NAMES = list(_cases(_inputs()))


@pytest.mark.parametrize("name", NAMES)
def test_cpp_node_and_no_node_without_grad(name):
    outs, inputs = _cases(_inputs())[name]()
    for o in outs:
        assert o.grad_fn is not None
        assert not isinstance(o.grad_fn, torch.autograd.function.BackwardCFunction), type(o.grad_fn)
        assert o.grad_fn.name().startswith("torch::autograd::CppNode<liger_cpp::"), o.grad_fn.name()
    with torch.no_grad():
        outs, _ = _cases(_inputs())[name]()
    assert all(o.grad_fn is None and not o.requires_grad for o in outs)
    f = _cases(_inputs())[name]
    for p in f()[1]:  # inputs of which none requires grad: no node either
        p.requires_grad_(False)
    assert all(o.grad_fn is None and not o.requires_grad for o in f()[0])


@pytest.mark.parametrize("name", NAMES)
def test_double_backward_is_a_clear_error(name):
    outs, inputs = _cases(_inputs(torch.float64))[name]()
    grads = torch.autograd.grad([o.sum() for o in outs], inputs, create_graph=True, allow_unused=True)
    g = next(gr for gr in grads if gr is not None)
    assert g.requires_grad
    with pytest.raises(RuntimeError, match="no double-backward formula"):
        torch.autograd.grad(g.sum(), inputs, allow_unused=True)


class _Record(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # every argument by name, the defaults the dispatcher dropped filled in
        full = {}
        for i, a in enumerate(func._schema.arguments):
            full[a.name] = args[i] if i < len(args) else kwargs.get(a.name, a.default_value)
        self.calls.append((str(func), full))
        return func(*args, **kwargs)


def _backward_calls(out, grad, op):
    """The named arguments of each call of op (e.g. "liger.rms_norm_bwd.default") in the backward."""
    with _Record() as rec:
        torch.autograd.backward(out, grad)
    return [a for f, a in rec.calls if f == op]


def test_frozen_weights_cost_no_weight_gradient():
    rnd = _inputs()
    x, w, b = rnd(3, 8), rnd(8, grad=False), rnd(8, grad=False)
    (a,) = _backward_calls(rms_norm(x, w), torch.ones(3, 8), "liger.rms_norm_bwd.default")
    assert a["compute_dw"] is False and x.grad is not None and w.grad is None
    (a,) = _backward_calls(layer_norm(x, w, b), torch.ones(3, 8), "liger.layer_norm_bwd.default")
    assert (a["compute_dw"], a["compute_db"]) == (False, False)
    b.requires_grad_(True)
    (a,) = _backward_calls(layer_norm(x, w, b), torch.ones(3, 8), "liger.layer_norm_bwd.default")
    assert (a["compute_dw"], a["compute_db"]) == (False, True) and b.grad is not None and w.grad is None
    (a,) = _backward_calls(
        fused_add_rms_norm(x, rnd(3, 8), w)[0], torch.ones(3, 8), "liger.fused_add_rms_norm_bwd.default"
    )
    assert a["compute_dw"] is False and a["dS_out"] is None
    # FLCE, reduction none: the backward's chunk loop computes only dX (a LoRA-style frozen head)
    h, lw = rnd(2, 3, 16), rnd(40, 16, grad=False)
    t = torch.randint(0, 40, (2, 3))
    out = fused_linear_cross_entropy(h, lw, t, reduction="none")[0]
    (a,) = _backward_calls(out, torch.ones(2, 3), "liger.fused_linear_cross_entropy_bwd.default")
    assert (a["compute_dx"], a["compute_dw"], a["compute_db"]) == (True, False, False)
    # MoE experts: frozen experts cost no weight GEMMs, a frozen input no dX GEMM
    mx, mw, mgu, mdn = rnd(5, 8), rnd(5, 2), rnd(3, 8, 8, grad=False), rnd(3, 8, 4, grad=False)
    midx = torch.tensor([[0, 1], [1, 2], [2, 0], [0, 2], [1, 0]])
    (a,) = _backward_calls(
        moe_experts(mx, midx, mw, mgu, mdn), torch.ones(5, 8), "liger.moe_experts_bwd.default"
    )
    assert (a["compute_d_hidden"], a["compute_d_experts"]) == (True, False) and mgu.grad is None
    mx.requires_grad_(False)
    mdn.requires_grad_(True)
    (a,) = _backward_calls(
        moe_experts(mx, midx, mw, mgu, mdn), torch.ones(5, 8), "liger.moe_experts_bwd.default"
    )
    assert (a["compute_d_hidden"], a["compute_d_experts"]) == (False, True) and mdn.grad is not None
    assert mw.grad is not None and mgu.grad is None


def test_no_zero_gradients_for_unused_outputs():
    rnd = _inputs()
    h, lw = rnd(2, 3, 16), rnd(40, 16)
    t = torch.randint(0, 40, (2, 3))
    loss = fused_linear_cross_entropy(h, lw, t, reduction="none", return_z_loss=True)[0]
    assert_backward_builds_no_zeros(
        [loss], [torch.ones(2, 3)], "liger.fused_linear_cross_entropy_bwd.default"
    )
    loss = fused_linear_preference(h, lw, t)[0]
    assert_backward_builds_no_zeros(
        [loss], [torch.ones(())], "liger.fused_linear_cross_entropy_scale_.default"
    )
    q, k = rnd(1, 2, 3, 8), rnd(1, 1, 3, 8)
    cos, sin = rnd(3, 8, grad=False), rnd(3, 8, grad=False)
    q_out, _ = rope(q, k, cos, sin)  # k_out unused: no zero tensor for its gradient
    assert_backward_builds_no_zeros([q_out], [torch.ones_like(q_out)], "liger.rope_bwd.default")
    assert k.grad is None and q.grad is not None
    y, s = fused_add_rms_norm(rnd(3, 8), rnd(3, 8), rnd(8))  # S unused: dS_out is None, not zeros
    assert_backward_builds_no_zeros([y], [torch.ones_like(y)], "liger.fused_add_rms_norm_bwd.default")


@needs_compiled_autograd_cpp
@pytest.mark.parametrize("name", NAMES)
def test_compiled_autograd(name):
    from torch._dynamo import compiled_autograd

    torch._dynamo.reset()
    outs, inputs = _cases(_inputs())[name]()
    want = torch.autograd.grad([o.sum() for o in outs], inputs)
    outs, inputs = _cases(_inputs())[name]()
    with compiled_autograd._enable(torch.compile(backend="aot_eager")):
        sum(o.sum() for o in outs).backward()
    for p, e in zip(inputs, want):
        torch.testing.assert_close(p.grad, e)


def test_in_place_options_are_eager_only():
    # Eagerly: RMSNorm's dX lands in dY's storage, SwiGLU's da/db in a/b (declared mutations).
    rnd = _inputs()
    x, w = rnd(3, 8), rnd(8)
    y = rms_norm(x * 1, w, in_place=True)
    dy = torch.randn(3, 8)
    (a,) = _backward_calls(y, dy, "liger.rms_norm_bwd_.default")
    assert a["dY"] is dy
    a, u = rnd(3, 8), rnd(3, 8)
    a1, u1 = a * 1, u * 1
    v = a1._version
    swiglu(a1, u1, in_place=True).sum().backward()
    assert a1._version > v
    # Under torch.compile the functional backward ops are traced instead, with the same gradients.
    torch._dynamo.reset()

    def f(x, w, a, u):
        return rms_norm(x * 2, w, in_place=True).sum() + swiglu(a * 1, u * 1, in_place=True).sum()

    seen = []

    def backend(gm, example_inputs):
        from torch._functorch.aot_autograd import aot_module_simplified

        def record(g, _):
            seen.extend(str(n.target) for n in g.graph.nodes)
            return g

        return aot_module_simplified(gm, example_inputs, fw_compiler=record, bw_compiler=record)

    args = [rnd(3, 8), rnd(8), rnd(3, 8), rnd(3, 8)]
    got = torch.autograd.grad(torch.compile(f, fullgraph=True, backend=backend)(*args), args)
    want = torch.autograd.grad(f(*args), args)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
    assert any("rms_norm_bwd" in s for s in seen) and any("swiglu_bwd" in s for s in seen), seen
    assert not any(s.endswith("_bwd_.default") for s in seen), seen
