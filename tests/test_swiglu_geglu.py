"""SwiGLU and GeGLU: forward and backward against independent float64 references (HF formulas),
every dtype, odd and 3-D shapes, strided (chunked) inputs, in-place backward, opcheck,
torch.compile, gradcheck, errors, and the MLP modules against pure-PyTorch HF MLPs."""

import types

import pytest
import torch
import torch.nn.functional as F
from conftest import CUDA_OK, DEVICES
from reference import geglu_ref, swiglu_ref
from utils import assert_close_to_ref, assert_compiled_grads_match

import liger_cpp  # noqa: F401
from liger_cpp._testing import plan_override
from liger_cpp.ops.geglu import geglu
from liger_cpp.ops.swiglu import swiglu
from liger_cpp.transformers import (
    LigerBlockSparseTop2MLP,
    LigerGEGLUMLP,
    LigerPhi3SwiGLUMLP,
    LigerSwiGLUMLP,
    liger_geglu,
    liger_swiglu,
)

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# one row, odd widths (scalar tails / misaligned), 3-D, aligned widths
SHAPES = [(1, 769), (7, 8), (3, 5125), (2, 5, 123), (17, 4096), (2, 1, 2048), (1, 1)]
CUDA_SHAPES = [(4096, 1024), (3, 14336), (1, 1000003), (1000, 77), (8, 1 << 20)]
# (name, op, reference)
KINDS = [
    ("swiglu", lambda a, b, ip=False: swiglu(a, b, in_place=ip), swiglu_ref),
    (
        "geglu_tanh",
        lambda a, b, ip=False: geglu(a, b, "tanh", in_place=ip),
        lambda a, b: geglu_ref(a, b, "tanh"),
    ),
    (
        "geglu_none",
        lambda a, b, ip=False: geglu(a, b, "none", in_place=ip),
        lambda a, b: geglu_ref(a, b, "none"),
    ),
]
KIND_IDS = [k[0] for k in KINDS]


def _inputs(shape, dtype, device, layout):
    """a, b of `shape`: independent contiguous tensors, the halves of one fused projection
    (strided rows, b possibly misaligned), or padded rows. (The "rowpad" and "offset" layouts
    start from contiguous tensors; _run_case makes their views.)"""
    n = shape[-1]
    if layout in ("contiguous", "rowpad", "offset"):
        a = torch.randn(*shape, device=device, dtype=dtype) * 3
        b = torch.randn(*shape, device=device, dtype=dtype)
    elif layout == "chunked":
        a, b = (torch.randn(*shape[:-1], 2 * n, device=device, dtype=dtype) * 3).chunk(2, dim=-1)
    else:  # padded
        big = torch.randn(2, *shape[:-1], n + 40, device=device, dtype=dtype) * 3
        a, b = big[0, ..., 8 : 8 + n], big[1, ..., 5 : 5 + n] / 3
    return a, b


def _run_case(kind, shape, dtype, device, layout="contiguous", in_place=False):
    _, op, ref = kind
    a0, b0 = _inputs(shape, dtype, device, layout)
    # non-leaf inputs (as the outputs of projections are), so in_place can apply
    al = a0.detach().clone().requires_grad_(True)
    bl = b0.detach().clone().requires_grad_(True)
    a = al * 1 if layout == "contiguous" else torch.cat([al, bl], -1).chunk(2, -1)[0]
    b = bl * 1 if layout == "contiguous" else torch.cat([al, bl], -1).chunk(2, -1)[1]
    if layout == "padded":
        a, b = al * 1, bl * 1
    elif layout == "rowpad":
        # rows padded to a multiple of 16 elements (+ 16): 16-byte aligned rows with a ragged end each
        # (the vector kernels' scalar tails on every row)
        n = shape[-1]
        pad = (n + 15) // 16 * 16 + 16 - n
        a, b = (F.pad(t, (0, pad))[..., :n] for t in (al, bl))
    elif layout == "offset":
        # contiguous, one element past an aligned address: the VEC = 1 kernels (in place too)
        a, b = (F.pad(t.flatten(), (1, 0))[1:].view(t.shape) for t in (al, bl))
    c = op(a, b, in_place)
    assert c.shape == a.shape and c.dtype == dtype
    dc = torch.randn_like(c)
    c.backward(dc)

    a64 = a0.detach().double().requires_grad_(True)
    b64 = b0.detach().double().requires_grad_(True)
    c64 = ref(a64, b64)
    c64.backward(dc.double())
    alo = a0.detach().clone().requires_grad_(True)
    blo = b0.detach().clone().requires_grad_(True)
    clo = ref(alo, blo)
    clo.backward(dc)
    assert_close_to_ref(c, c64, clo, "c")
    assert_close_to_ref(al.grad, a64.grad, alo.grad, "da")
    assert_close_to_ref(bl.grad, b64.grad, blo.grad, "db")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_forward_backward(device, shape, dtype, kind):
    _run_case(kind, shape, dtype, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["chunked", "padded"])
@pytest.mark.parametrize("shape", [(9, 1000), (4, 3, 769), (2, 4096)])
@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_strided_rows(device, dtype, layout, shape, kind):
    _run_case(kind, shape, dtype, device, layout=layout)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_in_place_option(device, dtype, kind):
    _run_case(kind, (5, 3, 1000), dtype, device, in_place=True)
    _run_case(kind, (6, 769), dtype, device, layout="chunked", in_place=True)  # not contiguous: copies


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("shape", CUDA_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_cuda_large(shape, dtype, kind):
    _run_case(kind, shape, dtype, "cuda", in_place=True)
    _run_case(kind, shape, dtype, "cuda", layout="chunked")


# The CUDA kernels (csrc/kernels/glu/glu.cu's plan, docs/kernels/glu.md): by default the dense
# kernels (one row) and their row variant (16-byte aligned strided rows), the generic kernels for
# misaligned operands (offset, odd chunked halves: one element an access); with the plan override
# glu=generic the generic kernels with 16-byte vectors too (the path of more than 2^31 elements, on
# small tensors). Shapes with more tiles than resident blocks, ragged ends, rows with ragged ends on
# the vector path (rowpad), in place (da, db into a, b) and strided rows.
GLU_PLANS = [{}, {"glu": "generic"}]
GLU_PLAN_IDS = ["default", "generic"]


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("plan", GLU_PLANS, ids=GLU_PLAN_IDS)
@pytest.mark.parametrize(
    "shape",
    [(4096, 1024), (3, 14336), (1, 1000003), (1, 4000037), (1, 769), (3, 5125), (2, 5, 123), (1000, 1001)],
)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_cuda_kernels(plan, shape, dtype, kind):
    with plan_override(**plan):
        for layout in ("contiguous", "rowpad", "offset"):
            _run_case(kind, shape, dtype, "cuda", layout=layout)
        _run_case(kind, shape, dtype, "cuda", in_place=True)
        _run_case(kind, shape, dtype, "cuda", layout="offset", in_place=True)
        if len(shape) == 2 and shape[0] > 1:
            _run_case(kind, shape, dtype, "cuda", layout="chunked")


# SiLU's sigmoid without an IEEE division (glu_act.cuh): the extremes (exp overflow, inf, NaN) in
# every kernel family, against PyTorch.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("plan", GLU_PLANS, ids=GLU_PLAN_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_silu_extremes(plan, dtype):
    vals = [
        -1e4,
        -100.0,
        -88.5,
        -87.5,
        -20.0,
        0.0,
        20.0,
        100.0,
        1e4,
        float("inf"),
        float("-inf"),
        float("nan"),
    ]
    a = torch.tensor([vals * 3], device="cuda", dtype=dtype)
    b = torch.ones_like(a)
    with plan_override(**plan):
        for aa, bb in ((a, b), (a[:, 1:], b[:, 1:])):  # aligned, and one element off (the VEC = 1 kernels)
            torch.testing.assert_close(swiglu(aa, bb), swiglu_ref(aa, bb), equal_nan=True)


# More than 2^31 - 1 tiles of the generic backward (one tile a block, the grid capped at 2^31 - 1
# blocks walking the rest grid-stride) and the generic forward: 2^31 + 3 rows of one element, a and b
# interleaved in one (rows, 2) tensor (not 16-byte aligned: one element an access). Checked on rows
# at both ends and around 2^31.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_cuda_over_2_31_tiles():
    if torch.cuda.get_device_properties(0).total_memory < 48 * 2**30:
        pytest.skip("needs about 30 GiB of GPU memory")
    rows = 2**31 + 3
    ab = torch.randn(rows, 2, device="cuda", dtype=torch.bfloat16)
    a, b = ab[:, :1], ab[:, 1:]
    c = torch.ops.liger.swiglu_fwd(a, b, False)
    dc = torch.ones(rows, 1, device="cuda", dtype=torch.bfloat16)
    da, db = torch.ops.liger.swiglu_bwd(dc, a, b)
    idx = torch.tensor([0, 1, 2**31 - 2, 2**31 - 1, 2**31, 2**31 + 1, rows - 1], device="cuda")
    idx = torch.cat([idx, torch.randint(0, rows, (1000,), device="cuda")])
    a64 = a[idx].double().requires_grad_(True)
    b64 = b[idx].double().requires_grad_(True)
    c64 = swiglu_ref(a64, b64)
    c64.backward(torch.ones_like(c64))
    for got, want in ((c[idx], c64), (da[idx], a64.grad), (db[idx], b64.grad)):
        torch.testing.assert_close(got.double(), want.detach(), rtol=2**-7, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_in_place_writes_inputs_visibly(device, kind):
    name = kind[0]
    a = torch.randn(6, 256, device=device)
    b = torch.randn(6, 256, device=device)
    dc = torch.randn(6, 256, device=device)
    if name == "swiglu":
        da, db = torch.ops.liger.swiglu_bwd(dc, a, b)
        va, vb = a._version, b._version
        torch.ops.liger.swiglu_bwd_(dc, a, b)
    else:
        approx = name.split("_")[1]
        da, db = torch.ops.liger.geglu_bwd(dc, a, b, approx)
        va, vb = a._version, b._version
        torch.ops.liger.geglu_bwd_(dc, a, b, approx)
    assert a._version > va and b._version > vb, "the in-place backward must bump a's and b's versions"
    torch.testing.assert_close(a, da, rtol=0, atol=0)
    torch.testing.assert_close(b, db, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_in_place_autograd(device, kind):
    _, op, ref = kind
    x = torch.randn(4, 64, device=device, requires_grad=True)
    w1 = torch.randn(96, 64, device=device, requires_grad=True)
    w3 = torch.randn(96, 64, device=device, requires_grad=True)
    a, b = x @ w1.t(), x @ w3.t()
    va, vb = a._version, b._version
    a_before = a.detach().clone()
    # y.sum(): an expanded (stride 0) gradient; it is only read
    op(a, b, True).sum().backward()
    assert a._version > va and b._version > vb, "in place must go through the mutating op"
    assert not torch.equal(a.detach(), a_before), "da was written into a"
    grads = [t.grad.clone() for t in (x, w1, w3)]
    for t in (x, w1, w3):
        t.grad = None
    ref(x @ w1.t(), x @ w3.t()).sum().backward()
    for g, t in zip(grads, (x, w1, w3)):
        torch.testing.assert_close(g, t.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_is_never_done_on_leaves_or_shared_tensors(device):
    # leaves (e.g. parameters) and tensors not requiring grad are never overwritten
    a = torch.randn(4, 32, device=device, requires_grad=True)
    b = torch.randn(4, 32, device=device)
    a0, b0 = a.detach().clone(), b.clone()
    swiglu(a, b, in_place=True).sum().backward()
    assert torch.equal(a.detach(), a0) and torch.equal(b, b0)
    # a non-leaf also saved by another op: the version counter makes the misuse loud
    x = torch.randn(4, 32, device=device, requires_grad=True)
    a, b = x * 2, x * 3
    sq = (a * a).sum()  # created first, so its backward runs after swiglu's and would read da
    loss = sq + swiglu(a, b, in_place=True).sum()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_never_writes_an_expanded_gradient(device):
    x = torch.randn(5, 64, device=device, requires_grad=True)
    dc = torch.randn(64, device=device).expand(5, 64)
    dc0 = dc.clone()
    a, b = x * 2, x - 1
    swiglu(a, b, in_place=True).backward(dc)
    assert torch.equal(dc, dc0)
    x2 = x.detach().clone().requires_grad_(True)
    swiglu_ref(x2 * 2, x2 - 1).backward(dc0)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-5)


def test_gradcheck_float64_cpu():
    for f in [swiglu, lambda a, b: geglu(a, b, "tanh"), lambda a, b: geglu(a, b, "none")]:
        a = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
        b = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(f, (a, b))
        ab = torch.randn(4, 14, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda t, f=f: f(*t.chunk(2, -1)), (ab,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(device, dtype):
    a = torch.randn(5, 3, 96, device=device, dtype=dtype, requires_grad=True)
    b = torch.randn(5, 3, 96, device=device, dtype=dtype, requires_grad=True)
    ab = torch.randn(7, 2 * 40, device=device, dtype=dtype)
    ca, cb = ab.chunk(2, -1)
    dc = torch.randn(5, 3, 96, device=device, dtype=dtype)
    for x, y in [(a, b), (ca, cb)]:
        torch.library.opcheck(torch.ops.liger.swiglu_fwd, (x, y, False))
        torch.library.opcheck(torch.ops.liger.swiglu_fwd, (x, y, True))
        for approx in ("tanh", "none"):
            torch.library.opcheck(torch.ops.liger.geglu_fwd, (x, y, approx, False))
    ad, bd = a.detach(), b.detach()
    torch.library.opcheck(torch.ops.liger.swiglu_bwd, (dc, ad, bd))
    torch.library.opcheck(torch.ops.liger.swiglu_bwd_, (dc, ad.clone(), bd.clone()))
    for approx in ("tanh", "none"):
        torch.library.opcheck(torch.ops.liger.geglu_bwd, (dc, ad, bd, approx))
        torch.library.opcheck(torch.ops.liger.geglu_bwd_, (dc, ad.clone(), bd.clone(), approx))


def _cfg(**kw):
    base = dict(hidden_size=64, intermediate_size=160, hidden_act="silu")
    base.update(kw)
    return types.SimpleNamespace(**base)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True, None])
def test_torch_compile_fullgraph(device, in_place):
    torch._dynamo.reset()
    mlp = LigerSwiGLUMLP(_cfg(), in_place=in_place).to(device)
    gmlp = LigerGEGLUMLP(_cfg(hidden_act="gelu_pytorch_tanh")).to(device)
    phi = LigerPhi3SwiGLUMLP(_cfg()).to(device)

    def f(x):
        return (mlp(x) + gmlp(x * 0.5) + phi(x)).square().sum()

    x = torch.randn(3, 7, 64, device=device, requires_grad=True)
    assert_compiled_grads_match(f, x, [mlp, gmlp, phi], device, 1e-4)


def _glu_inputs_after_backward(mlp, x, width):
    """Runs mlp(x) forward and backward; returns the GLU's saved (a, b), their values right
    after the forward, and the parameter gradients."""
    kept = []

    def pack(t):
        kept.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = mlp(x)
    # saved in graph order: a and b (by the GLU, or by the fused MLP op with x's rows flattened),
    # then c (by the down projection, or the op)
    rows = x.numel() // x.shape[-1]
    glu_in = [t for t in kept if t.shape in ((*x.shape[:-1], width), (rows, width))][:2]
    before = [t.clone() for t in glu_in]
    y.backward(torch.linspace(-1, 1, y.numel(), device=y.device).view_as(y))
    grads = [p.grad.clone() for p in mlp.parameters()]
    return glu_in, before, grads


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "make",
    [
        lambda ip: LigerSwiGLUMLP(_cfg(), in_place=ip),
        lambda ip: LigerGEGLUMLP(_cfg(hidden_act="gelu_pytorch_tanh"), in_place=ip),
        lambda ip: LigerBlockSparseTop2MLP(_cfg(), in_place=ip),
    ],
    ids=["swiglu", "geglu", "mixtral"],
)
def test_mlp_default_in_place_only_when_outputs_private(device, make):
    """The MLPs' default (in_place=None) writes the GLU gradients into the projections' outputs
    when nothing but autograd can hold them, and never when a forward hook could: the hooked
    outputs keep their values. Gradients are the same either way."""
    torch.manual_seed(0)
    mlp = make(None).to(device)
    ref = make(False).to(device)
    ref.load_state_dict(mlp.state_dict())
    x = torch.randn(4, 5, 64, device=device)
    glu_in, before, grads = _glu_inputs_after_backward(mlp, x, 160)
    _, _, ref_grads = _glu_inputs_after_backward(ref, x, 160)
    assert len(glu_in) == 2
    assert all(t._version > 0 for t in glu_in)  # written in place (a declared mutation)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=0, atol=0)

    for p in mlp.parameters():
        p.grad = None
    seen = []
    first = next(m for m in mlp.children() if isinstance(m, torch.nn.Linear))
    handle = first.register_forward_hook(lambda m, i, o: seen.append(o))
    try:
        glu_in, before, grads = _glu_inputs_after_backward(mlp, x, 160)
    finally:
        handle.remove()
    assert all(t._version == 0 for t in glu_in)
    for t, b in zip(glu_in, before):
        assert torch.equal(t, b)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=0, atol=0)


class _Adapter(torch.nn.Module):
    """A PEFT-like wrapper whose output is its base layer's output tensor itself."""

    def __init__(self, base):
        super().__init__()
        self.base_layer = base

    def forward(self, x):
        return self.base_layer(x)


@pytest.mark.parametrize("device", DEVICES)
def test_mlp_default_stays_out_of_place_with_a_hook_inside_a_projection(device):
    torch.manual_seed(0)
    mlp = LigerSwiGLUMLP(_cfg()).to(device)
    mlp.gate_proj = _Adapter(mlp.gate_proj)
    seen = []
    mlp.gate_proj.base_layer.register_forward_hook(lambda m, i, o: seen.append((o, o.detach().clone())))
    x = torch.randn(4, 5, 64, device=device)
    glu_in, _, _ = _glu_inputs_after_backward(mlp, x, 160)
    assert all(t._version == 0 for t in glu_in)
    (held, copy_at_forward) = seen[0]
    assert torch.equal(held, copy_at_forward)  # what the hook holds was not overwritten


# Pure-PyTorch HF MLPs (LlamaMLP / Phi3MLP / MixtralBlockSparseTop2MLP / GemmaMLP formulas).
def _llama_mlp(m, x):
    return m.down_proj(F.silu(m.gate_proj(x)) * m.up_proj(x))


def _phi3_mlp(m, x):
    gate, up = m.gate_up_proj(x).chunk(2, dim=-1)
    return m.down_proj(up * F.silu(gate))


def _mixtral_mlp(m, x):
    return m.w2(F.silu(m.w1(x)) * m.w3(x))


def _gemma_mlp(m, x, approximate):
    return m.down_proj(F.gelu(m.gate_proj(x), approximate=approximate) * m.up_proj(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "make,ref",
    [
        (lambda: LigerSwiGLUMLP(_cfg()), _llama_mlp),
        (lambda: LigerSwiGLUMLP(_cfg(hidden_act="swish"), in_place=True), _llama_mlp),
        (lambda: LigerPhi3SwiGLUMLP(_cfg()), _phi3_mlp),
        (lambda: LigerBlockSparseTop2MLP(_cfg()), _mixtral_mlp),
        (lambda: LigerGEGLUMLP(_cfg(hidden_act="gelu_pytorch_tanh")), lambda m, x: _gemma_mlp(m, x, "tanh")),
        (
            lambda: LigerGEGLUMLP(_cfg(hidden_act=None, hidden_activation=None)),
            lambda m, x: _gemma_mlp(m, x, "tanh"),
        ),
        (lambda: LigerGEGLUMLP(_cfg(hidden_act="gelu")), lambda m, x: _gemma_mlp(m, x, "none")),
        (
            lambda: LigerGEGLUMLP(_cfg(hidden_act="gelu", hidden_activation="gelu_pytorch_tanh")),
            lambda m, x: _gemma_mlp(m, x, "tanh"),
        ),
    ],
    ids=[
        "llama",
        "llama_swish_inplace",
        "phi3",
        "mixtral",
        "gemma_tanh",
        "gemma_default",
        "gelu_exact",
        "gemma_hidden_activation",
    ],
)
def test_modules_match_hf_mlps(device, make, ref):
    m = make().to(device=device, dtype=torch.float64 if device == "cpu" else torch.float32)
    names = {n for n, _ in m.named_parameters()}
    assert names <= {
        "gate_proj.weight",
        "up_proj.weight",
        "down_proj.weight",
        "gate_up_proj.weight",
        "w1.weight",
        "w2.weight",
        "w3.weight",
    }
    assert all(p.dim() == 2 for p in m.parameters()), "no biases"
    dt = next(m.parameters()).dtype
    x = torch.randn(2, 9, 64, device=device, dtype=dt, requires_grad=True)
    dy = torch.randn(2, 9, 64, device=device, dtype=dt)
    y = m(x)
    y.backward(dy)
    got = [x.grad.clone()] + [p.grad.clone() for p in m.parameters()]
    x.grad = None
    m.zero_grad(set_to_none=True)
    y_ref = ref(m, x)
    y_ref.backward(dy)
    tol = dict(rtol=1e-10, atol=1e-10) if dt == torch.float64 else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(y, y_ref, **tol)
    for g, t in zip(got, [x] + list(m.parameters())):
        torch.testing.assert_close(g, t.grad, **tol)


def test_module_shapes_and_bad_activations():
    m = LigerBlockSparseTop2MLP(_cfg())
    assert m.ffn_dim == 160 and m.w1.weight.shape == (160, 64) and m.w2.weight.shape == (64, 160)
    p = LigerPhi3SwiGLUMLP(_cfg())
    assert p.gate_up_proj.weight.shape == (320, 64)
    for cls in (LigerSwiGLUMLP, LigerPhi3SwiGLUMLP, LigerBlockSparseTop2MLP):
        with pytest.raises(ValueError, match="hidden_act"):
            cls(_cfg(hidden_act="gelu"))
    with pytest.raises(ValueError, match="relu"):
        LigerGEGLUMLP(_cfg(hidden_act="relu"))


@pytest.mark.parametrize("device", DEVICES)
def test_functional_names(device):
    a = torch.randn(3, 40, device=device)
    b = torch.randn(3, 40, device=device)
    torch.testing.assert_close(liger_swiglu(a, b), swiglu_ref(a, b))
    torch.testing.assert_close(liger_geglu(a, b), geglu_ref(a, b, "tanh"))
    torch.testing.assert_close(liger_geglu(a, b, approximate="none"), geglu_ref(a, b, "none"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_extreme_values(device, kind):
    _, op, ref = kind
    a = torch.tensor(
        [[-1e4, -100.0, -20.0, 0.0, 20.0, 100.0, 1e4, float("inf"), float("-inf"), float("nan")]],
        device=device,
    )
    b = torch.ones_like(a)
    c = op(a, b)
    torch.testing.assert_close(c, ref(a, b), equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
def test_empty(device):
    for shape in [(0, 64), (3, 0)]:
        a = torch.randn(*shape, device=device, requires_grad=True)
        b = torch.randn(*shape, device=device, requires_grad=True)
        c = swiglu(a, b)
        assert c.shape == shape
        c.sum().backward()
        assert a.grad.shape == shape


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_name_the_argument(device):
    a = torch.randn(4, 64, device=device)
    with pytest.raises(RuntimeError, match="'b'.*shape"):
        torch.ops.liger.swiglu_fwd(a, torch.randn(4, 63, device=device))
    with pytest.raises(RuntimeError, match="'b'.*dtype"):
        torch.ops.liger.swiglu_fwd(a, a.half())
    with pytest.raises(RuntimeError, match="'a'.*expected float32"):
        torch.ops.liger.swiglu_fwd(a.int(), a.int())
    with pytest.raises(RuntimeError, match="'b'.*unit stride"):
        torch.ops.liger.swiglu_fwd(a, torch.randn(64, 4, device=device).t())
    with pytest.raises(RuntimeError, match="'a'.*unit stride"):
        torch.ops.liger.geglu_fwd(torch.randn(64, 4, device=device).t(), a, "tanh")
    with pytest.raises(RuntimeError, match="'a'.*scalar"):
        torch.ops.liger.swiglu_fwd(torch.tensor(1.0, device=device), torch.tensor(1.0, device=device))
    with pytest.raises(RuntimeError, match="approximate"):
        torch.ops.liger.geglu_fwd(a, a, "erf")
    with pytest.raises(ValueError, match="approximate"):
        geglu(a, a, approximate="exact")
    with pytest.raises(RuntimeError, match="'dc'.*shape"):
        torch.ops.liger.swiglu_bwd(torch.randn(4, 65, device=device), a, a.clone())
    with pytest.raises(RuntimeError, match="'dc'.*dtype"):
        torch.ops.liger.geglu_bwd(a.double(), a, a.clone(), "tanh")
    with pytest.raises(RuntimeError, match="'a'.*contiguous"):
        ab = torch.randn(4, 128, device=device)
        torch.ops.liger.swiglu_bwd_(a, *ab.chunk(2, -1))
    with pytest.raises(RuntimeError, match="'b'.*separate memory"):
        torch.ops.liger.swiglu_bwd_(a, a, a)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_cuda_mismatched_devices():
    a = torch.randn(4, 64, device="cuda")
    with pytest.raises(RuntimeError, match="'b'.*device"):
        swiglu(a, torch.randn(4, 64))
    with pytest.raises(RuntimeError, match="'dc'.*device"):
        torch.ops.liger.swiglu_bwd(torch.randn(4, 64), a, a.clone())


def test_liger_mlp_and_falcon_h1_mlp_and_mlp_function():
    """Liger-Kernel's LigerMLP (no biases, whatever config.mlp_bias says), LigerFalconH1MLP (its gate
    and down multipliers) and LigerMLPFunction's maths (liger_mlp) against a float64 formula."""
    from types import SimpleNamespace

    from liger_cpp.transformers import LigerFalconH1MLP, LigerFalconH1SwiGLUMLP, LigerMLP
    from liger_cpp.transformers.swiglu import liger_mlp

    cfg = SimpleNamespace(hidden_size=16, intermediate_size=24, hidden_act="silu", mlp_bias=True)
    torch.manual_seed(0)
    m = LigerMLP(cfg).double()
    assert all(p.bias is None for p in (m.gate_proj, m.up_proj, m.down_proj))
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    g, u, d = m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight

    def ref(gm=1.0, dm=1.0):
        a = x @ g.t() * gm
        return (a * torch.sigmoid(a) * (x @ u.t())) @ d.t() * dm

    torch.testing.assert_close(m(x), ref(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(liger_mlp(x, g, u, d, 0.5, 3.0), ref(0.5, 3.0), rtol=1e-12, atol=1e-12)
    assert LigerFalconH1MLP is LigerFalconH1SwiGLUMLP
    with pytest.raises(ValueError):
        LigerMLP(SimpleNamespace(hidden_size=16, intermediate_size=24, hidden_act="gelu"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_liger_fused_gate_up_silu_mul(device, dtype):
    """Liger's LigerFusedGateUpSiLUMulFunction (one [..., 2 I] tensor, gate then up) through the
    compatibility package: liger_cpp's SwiGLU on the two halves, against the float64 reference."""
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.ops import LigerFusedGateUpSiLUMulFunction

    y = torch.randn(3, 5, 2 * 37, device=device, dtype=dtype, requires_grad=True)
    out = LigerFusedGateUpSiLUMulFunction.apply(y)
    dc = torch.randn_like(out)
    out.backward(dc)
    y64 = y.detach().double().requires_grad_()
    ref = swiglu_ref(*y64.chunk(2, -1))
    ref.backward(dc.double())
    y_lo = y.detach().clone().requires_grad_()
    lo = swiglu_ref(*y_lo.chunk(2, -1))
    lo.backward(dc)
    assert_close_to_ref(out, ref, lo, "c")
    assert_close_to_ref(y.grad, y64.grad, y_lo.grad, "dy")
    with pytest.raises(ValueError, match="argument 'y'"):
        LigerFusedGateUpSiLUMulFunction.apply(torch.randn(2, 5, device=device))
