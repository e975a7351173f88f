"""The GLU MLP op (liger_cpp.ops.glu_mlp; the MLP modules' path when their projections are plain
nn.Linear): forward and every gradient against a float64 pure-PyTorch MLP (HF LlamaMLP / GemmaMLP
formulas), every dtype and activation, odd and 3-D shapes, frozen weights, grad_output != 1, the
in-place backward, bitwise parity of the forward and the weight gradients with the unfused module
path, opcheck, torch.compile, gradcheck, errors, and which path the modules take."""

import types

import pytest
import torch
import torch.nn.functional as F
from conftest import CUDA_OK, DEVICES
from utils import assert_close_to_ref, assert_compiled_grads_match

import liger_cpp  # noqa: F401
from liger_cpp.ops.glu_mlp import glu_mlp
from liger_cpp.transformers import LigerGEGLUMLP, LigerSwiGLUMLP

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
ACTS = {
    "silu": F.silu,
    "gelu_tanh": lambda a: F.gelu(a, approximate="tanh"),
    "gelu": F.gelu,
}
# (x shape, I, O): one row, odd widths, 3-D, an output width other than H, no rows
SHAPES = [
    ((1, 31), 45, 31),
    ((37, 96), 80, 96),
    ((2, 5, 33), 17, 29),
    ((3, 1, 64), 160, 64),
    ((0, 16), 8, 16),
]


def _ref(x, wg, wu, wd, act):
    """HF's MLP in x's dtype: down_proj(act_fn(gate_proj(x)) * up_proj(x))."""
    return F.linear(ACTS[act](F.linear(x, wg)) * F.linear(x, wu), wd)


def _inputs(shape, inter, out, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = shape[-1]

    def rnd(*s, scale=1.0):
        return (torch.randn(*s, generator=g) * scale).to(device=device, dtype=dtype).requires_grad_()

    return (
        rnd(*shape),
        rnd(inter, h, scale=h**-0.5),
        rnd(inter, h, scale=h**-0.5),
        rnd(out, inter, scale=inter**-0.5),
    )


def _grads(y, tensors, dy):
    return torch.autograd.grad(y, tensors, dy)


def _check_against_reference(ins, act, in_place):
    """glu_mlp(*ins) and its gradients (for a random grad_output) against the float64 HF MLP, each
    within twice the low-precision HF MLP's error (tests/utils.py)."""
    x, dtype = ins[0], ins[0].dtype
    ins64 = [t.detach().double().requires_grad_() for t in ins]
    y = glu_mlp(*ins, act, in_place=in_place)
    y64 = _ref(*ins64, act)
    with torch.no_grad():
        ylo = _ref(*ins, act)
    assert y.dtype == dtype and y.shape == (*x.shape[:-1], ins[3].shape[0])
    assert_close_to_ref(y, y64, ylo, "y")
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(5)).to(device=x.device, dtype=dtype)
    got = _grads(y, ins, dy)
    want = _grads(y64, ins64, dy.double())
    lo = _grads(_ref(*ins, act), ins, dy)
    for name, g, w, low in zip(("dx", "dw_gate", "dw_up", "dw_down"), got, want, lo):
        assert g.dtype == dtype and g.shape == w.shape
        assert_close_to_ref(g, w, low, name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("shape,inter,out", SHAPES)
@pytest.mark.parametrize("in_place", [False, True])
def test_matches_float64_reference(device, dtype, act, shape, inter, out, in_place):
    if dtype == torch.float16 and device == "cpu" and act != "silu":
        pytest.skip("covered by silu on the CPU (float16 GEMMs are slow there)")
    _check_against_reference(_inputs(shape, inter, out, dtype, device), act, in_place)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_forward_and_weight_gradients_bitwise_as_the_module_path(device, dtype):
    """The forward makes nn.Linear's GEMM calls and the GLU op's kernel: y is bitwise the unfused
    path's; so are the weight gradients (autograd's own GEMMs). dx differs only in rounding: one
    accumulation instead of two rounded products added."""
    from liger_cpp.ops.swiglu import swiglu

    x, wg, wu, wd = _inputs((4, 7, 64), 160, 64, dtype, device)
    y = glu_mlp(x, wg, wu, wd)
    y_ref = F.linear(swiglu(F.linear(x, wg), F.linear(x, wu)), wd)
    assert torch.equal(y, y_ref)
    dy = torch.randn_like(y)
    g = _grads(y, [x, wg, wu, wd], dy)
    r = _grads(y_ref, [x, wg, wu, wd], dy)
    for a, b in zip(g[1:], r[1:]):
        assert torch.equal(a, b)
    ulp = {torch.float32: 2.0**-23, torch.bfloat16: 2.0**-7}[dtype]
    torch.testing.assert_close(g[0], r[0], rtol=2 * ulp, atol=2 * ulp * r[0].abs().max().item())


def _backward_mask(y, dy):
    seen = []

    class Rec(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "glu_mlp_bwd" in str(func):
                seen.append(list(args[9]) if len(args) > 9 else [True] * 4)
            return func(*args, **(kwargs or {}))

    with Rec():
        torch.autograd.backward(y, dy)
    return seen


@pytest.mark.parametrize("device", DEVICES)
def test_frozen_weights_and_input_cost_no_gradient(device):
    x, wg, wu, wd = _inputs((3, 5, 16), 24, 16, torch.float32, device)
    for frozen, mask in [
        ((wg, wu, wd), [True, False, False, False]),  # LoRA-style: only dx
        ((x,), [False, True, True, True]),
        ((x, wg, wu), [False, False, False, True]),
    ]:
        for t in (x, wg, wu, wd):
            t.requires_grad_(not any(t is f for f in frozen))
            t.grad = None
        y = glu_mlp(x, wg, wu, wd)
        assert _backward_mask(y, torch.ones_like(y)) == [mask]
        for t, m in zip((x, wg, wu, wd), mask):
            assert (t.grad is not None) == m


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_backward_writes_only_its_own_buffers(device):
    x, wg, wu, wd = _inputs((6, 32), 48, 32, torch.float32, device)
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        y = glu_mlp(x, wg, wu, wd, in_place=True)
    abc = [t for t in kept if t.shape == (6, 48)]  # saved a, b, c
    inputs_before = [t.detach().clone() for t in (x, wg, wu, wd)]
    y.sum().backward()
    assert len(abc) == 3 and all(t._version > 0 for t in abc)  # declared mutations
    for t, b in zip((x, wg, wu, wd), inputs_before):
        assert torch.equal(t.detach(), b)
    # out of place: a and b untouched, same gradients
    grads = [t.grad.clone() for t in (x, wg, wu, wd)]
    for t in (x, wg, wu, wd):
        t.grad = None
    kept.clear()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        y = glu_mlp(x, wg, wu, wd, in_place=False)
    y.sum().backward()
    assert all(t._version == 0 for t in kept if t.shape == (6, 48))
    for g, t in zip(grads, (x, wg, wu, wd)):
        assert torch.equal(g, t.grad)


def test_second_backward_through_a_retained_graph_raises_after_in_place():
    x, wg, wu, wd = _inputs((4, 8), 12, 8, torch.float32, "cpu")
    y = glu_mlp(x, wg, wu, wd, in_place=True)
    y.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    y = glu_mlp(x, wg, wu, wd, in_place=False)  # out of place: a retained graph runs twice
    y.sum().backward(retain_graph=True)
    y.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck(device, dtype):
    x, wg, wu, wd = _inputs((2, 3, 24), 40, 20, dtype, device)
    xd, gd, ud, dd = (t.detach() for t in (x, wg, wu, wd))
    torch.library.opcheck(torch.ops.liger.glu_mlp, (x, wg, wu, wd, "silu", False))
    torch.library.opcheck(torch.ops.liger.glu_mlp, (x, wg, wu, wd, "gelu_tanh", True))
    if dtype != torch.float32:  # the internal ops once (the activation is the GLU ops' business)
        return
    torch.library.opcheck(torch.ops.liger.glu_mlp_fwd, (xd, gd, ud, dd, "gelu"))
    _, a, b, c = torch.ops.liger.glu_mlp_fwd(xd, gd, ud, dd, "gelu_tanh")
    dy = torch.randn(2, 3, 20, device=device, dtype=dtype)
    for mask in ([True] * 4, [True, False, True, False]):
        torch.library.opcheck(torch.ops.liger.glu_mlp_bwd, (dy, xd, gd, ud, dd, a, b, c, "gelu_tanh", mask))
        torch.library.opcheck(
            torch.ops.liger.glu_mlp_bwd_,
            (dy, xd, gd, ud, dd, a.clone(), b.clone(), c.clone(), "gelu_tanh", mask),
        )


def _cfg(**kw):
    base = dict(hidden_size=64, intermediate_size=96, hidden_act="silu")
    base.update(kw)
    return types.SimpleNamespace(**base)


def _node(y):
    return y.grad_fn.name() if y.grad_fn is not None else None


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    torch.manual_seed(0)
    mlp = LigerSwiGLUMLP(_cfg()).to(device)
    gmlp = LigerGEGLUMLP(_cfg(hidden_act="gelu")).to(device)

    def f(x):
        return (mlp(x) + gmlp(x * 0.5)).square().sum()

    x = torch.randn(3, 7, 64, device=device, requires_grad=True)
    assert_compiled_grads_match(f, x, [mlp, gmlp], device, 1e-5)


def test_gradcheck_float64_cpu():
    for act in ACTS:
        ins = _inputs((2, 3, 6), 5, 4, torch.float64, "cpu", seed=3)
        assert torch.autograd.gradcheck(lambda *t, act=act: glu_mlp(*t, act), ins)


def test_errors_name_the_argument():
    x, wg, wu, wd = (t.detach() for t in _inputs((3, 8), 12, 8, torch.float32, "cpu"))
    with pytest.raises(ValueError, match="'activation'"):
        glu_mlp(x, wg, wu, wd, "relu")
    with pytest.raises(RuntimeError, match="'activation'"):
        torch.ops.liger.glu_mlp(x, wg, wu, wd, "relu")
    with pytest.raises(RuntimeError, match="'w_gate'.*shape"):
        glu_mlp(x, wg[:, :7], wu, wd)
    with pytest.raises(RuntimeError, match="'w_up'.*shape"):
        glu_mlp(x, wg, wu[:11], wd)
    with pytest.raises(RuntimeError, match="'w_down'.*shape"):
        glu_mlp(x, wg, wu, wd[:, :11])
    with pytest.raises(RuntimeError, match="'w_down'.*dtype"):
        glu_mlp(x, wg, wu, wd.double())
    with pytest.raises(RuntimeError, match="'x'"):
        glu_mlp(x.long(), wg, wu, wd)
    _, a, b, c = torch.ops.liger.glu_mlp_fwd(x, wg, wu, wd)
    with pytest.raises(RuntimeError, match="'dy'"):
        torch.ops.liger.glu_mlp_bwd(torch.ones(3, 7), x, wg, wu, wd, a, b, c)
    with pytest.raises(RuntimeError, match="'c'"):
        torch.ops.liger.glu_mlp_bwd(torch.ones(3, 8), x, wg, wu, wd, a, b, c[:2])
    with pytest.raises(RuntimeError, match="'b'.*separate memory"):
        torch.ops.liger.glu_mlp_bwd_(torch.ones(3, 8), x, wg, wu, wd, a, a, c)
    with pytest.raises(RuntimeError, match="'c'.*separate"):
        torch.ops.liger.glu_mlp_bwd_(torch.ones(3, 8), x, wg, wu, wd, a, b, b)


# ---- the modules: which path they take ----


class _Adapter(torch.nn.Linear):
    """A PEFT-like projection: an nn.Linear subclass whose forward adds a low-rank term."""

    def forward(self, x):
        return super().forward(x) + 0.5 * x[..., : self.out_features].sum(-1, keepdim=True)


def _mlp_ref(m, x, act):
    return m.down_proj(ACTS[act](m.gate_proj(x)) * m.up_proj(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "make,act",
    [
        (lambda: LigerSwiGLUMLP(_cfg()), "silu"),
        (lambda: LigerGEGLUMLP(_cfg(hidden_act="gelu_pytorch_tanh")), "gelu_tanh"),
        (lambda: LigerGEGLUMLP(_cfg(hidden_act="gelu")), "gelu"),
    ],
    ids=["swiglu", "geglu_tanh", "geglu"],
)
def test_modules_take_the_fused_op_only_for_plain_projections(device, make, act):
    torch.manual_seed(0)
    mlp = make().to(device)
    x = torch.randn(2, 5, 64, device=device, requires_grad=True)
    fused = "GluMlpFunction"
    y = mlp(x)
    assert fused in _node(y)
    torch.testing.assert_close(y, _mlp_ref(mlp, x, act), rtol=1e-5, atol=1e-5)

    # a forward hook on a projection: it is called, so the module path runs
    seen = []
    h = mlp.up_proj.register_forward_hook(lambda m, i, o: seen.append(o))
    y = mlp(x)
    h.remove()
    assert len(seen) == 1 and fused not in _node(y)
    # a pre-hook (DeepSpeed ZeRO-3 gathers the weight in one), a global hook, a bias, a subclass
    h = mlp.gate_proj.register_forward_pre_hook(lambda m, i: seen.append(1))
    assert fused not in _node(mlp(x))
    h.remove()
    h = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: None)
    assert fused not in _node(mlp(x))
    h.remove()
    assert fused in _node(mlp(x))
    lin = mlp.down_proj
    mlp.down_proj = torch.nn.Linear(lin.in_features, lin.out_features, bias=True).to(device)
    assert fused not in _node(mlp(x))
    mlp.down_proj = _Adapter(lin.in_features, lin.out_features, bias=False).to(device)
    y = mlp(x)
    assert fused not in _node(y)
    torch.testing.assert_close(y, _mlp_ref(mlp, x, act), rtol=1e-5, atol=1e-5)
    mlp.down_proj = lin
    # autocast (mixed precision with float32 weights, HF Trainer's bf16=True): the op, on x and the
    # weights cast to bfloat16 as nn.Linear's autocast casts them: bitwise the module path's forward
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        y = mlp(x)
        h = mlp.down_proj.register_forward_hook(lambda m, i, o: None)  # forces the module path
        y_ref = mlp(x)
        h.remove()
    assert fused in _node(y) and fused not in _node(y_ref) and y.dtype == torch.bfloat16
    assert torch.equal(y, y_ref)
    g = torch.autograd.grad(y.float().sum(), [x, *mlp.parameters()])
    g_ref = torch.autograd.grad(y_ref.float().sum(), [x, *mlp.parameters()])
    for a, b in zip(g, g_ref):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2 * b.abs().max().item())
    # weights of another dtype than x: the module path (and its error)
    with pytest.raises(RuntimeError):
        mlp(x.double())


@pytest.mark.parametrize("device", DEVICES)
def test_module_in_place_false_is_honoured(device):
    torch.manual_seed(0)
    mlp = LigerSwiGLUMLP(_cfg(), in_place=False).to(device)
    x = torch.randn(4, 64, device=device)
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        y = mlp(x)
    y.sum().backward()
    assert "GluMlpFunction" in _node(y)
    ab = [t for t in kept if t.shape == (4, 96)]  # a, b, c
    assert len(ab) == 3 and all(t._version == 0 for t in ab)


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA and liger_cpp's CUDA kernels")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_llama_shape(dtype):
    """A 1B Llama MLP's shape (H 2048, I 8192) at 1024 tokens."""
    _check_against_reference(_inputs((1, 1024, 2048), 8192, 2048, dtype, "cuda"), "silu", True)


@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA and liger_cpp's CUDA kernels")
def test_cuda_in_place_backward_needs_no_intermediate_buffer():
    """The in-place backward writes dc into c, da and db into a and b: its peak during the backward
    is the four gradients it returns and no (rows x I) buffer, at least two such buffers below the
    out-of-place backward's, and below the module path's (which allocates dc while c is alive)."""
    m, h, i = 4096, 1024, 8192
    x, wg, wu, wd = _inputs((m, h), i, h, torch.bfloat16, "cuda")
    buf = m * i * 2

    def backward_peak(f):
        y = f()
        dy = torch.ones_like(y)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        grads = torch.autograd.grad(y, [x, wg, wu, wd], dy)
        peak = torch.cuda.max_memory_allocated() - base
        del grads, y
        return peak

    # The first backward on autograd's device thread allocates cuBLAS's workspace (32 MiB on Hopper,
    # through the caching allocator): a run before the measured ones keeps it out of their peaks.
    backward_peak(lambda: glu_mlp(x, wg, wu, wd, in_place=True))
    in_place = backward_peak(lambda: glu_mlp(x, wg, wu, wd, in_place=True))
    out_of_place = backward_peak(lambda: glu_mlp(x, wg, wu, wd, in_place=False))
    from liger_cpp.ops.swiglu import swiglu

    module_path = backward_peak(lambda: F.linear(swiglu(F.linear(x, wg), F.linear(x, wu), True), wd))
    grads = (m * h + 3 * i * h) * 2  # dx, dW_gate, dW_up, dW_down
    assert in_place <= grads + buf // 8, (in_place, grads)
    assert in_place <= out_of_place - 2 * buf, (in_place, out_of_place)
    assert in_place < module_path, (in_place, module_path)
