"""What each op does with NaN / inf inputs, empty tensors, non-contiguous inputs, a tensor on the CPU
while the others are on CUDA, and tensors on another GPU (issue 29, item 5). Every cell of the table
in docs/failure_behaviour.md is one parametrisation here (op x condition x device); the CPU rows run
in CI, the CUDA rows on the GPU machine, the second-GPU rows where two GPUs are visible.

The contract tested (and documented):
* NaN / +inf / -inf in one element: no error; the outputs and every gradient equal PyTorch's
  reference element by element, NaN and inf where it has them (torch.testing.assert_close with
  equal_nan): GeGLU's derivative at +inf is NaN as PyTorch's (inf * 0 in the formula), not its
  limit, on the CPU as on CUDA. Ignored targets get zero gradients even when the loss is NaN (the
  references mask with torch.where, as the row step does).
* Empty (no rows, batch or sequence): the outputs have the empty shapes, weight gradients are zeros,
  reduced losses are 0 (PyTorch's mean of nothing is NaN: liger_cpp's documented 0); DPO needs a pair.
* Non-contiguous: strided rows are read in place; a non-unit last stride is copied (norms, RoPE,
  FLCE, DPO) or refused with an error naming the argument (SwiGLU / GeGLU, CE: their in-place
  variants write into the input's storage, so they never copy silently).
* Mixed devices: a RuntimeError naming the argument that is elsewhere and the device expected.
* All on a GPU that is not the current device: the result equals the current device's.
"""

import dataclasses
import sys
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from conftest import CUDA_OK, DEVICES
from reference import (
    cross_entropy_ref,
    fused_add_rms_norm_ref,
    geglu_ref,
    layer_norm_ref,
    rms_norm_ref,
    rope_ref,
    swiglu_ref,
)
from test_moe_experts import reference as moe_experts_ref

import liger_cpp
from liger_cpp.chunked_loss import LigerFusedLinearDPOLoss
from liger_cpp.ops.moe_experts import moe_experts
from liger_cpp.transformers import (
    liger_cross_entropy,
    liger_fused_add_rms_norm,
    liger_fused_linear_cross_entropy,
    liger_geglu,
    liger_layer_norm,
    liger_rms_norm,
    liger_rotary_pos_emb,
    liger_swiglu,
)

TWO_GPUS = CUDA_OK and torch.cuda.device_count() >= 2
H = 16
EPS = 1e-6


@dataclasses.dataclass
class Case:
    make: Callable  # (device, rows) -> dict of inputs
    fwd: Callable  # inputs -> tuple of outputs (liger_cpp)
    ref: Callable  # float64 inputs -> tuple of outputs (PyTorch)
    grads: tuple  # inputs that get gradients
    bad: tuple  # (input, index) where NaN / inf goes
    other: str  # the input moved to another device
    other_arg: str  # its name in liger_cpp's error messages
    last_stride_copied: bool = True  # a non-unit last stride is copied (else: an error naming it)
    strided: tuple = ()  # the inputs made non-contiguous


def _rand(*shape, device, scale=1.0):
    return torch.randn(*shape, device=device) * scale


def _targets(rows, V, device, ignore=True):
    t = (torch.arange(rows, device=device) * 7 + 5) % V
    if ignore and rows > 2:
        t[-1] = -100
    return t


def _dpo_ref(w, x, t, beta=0.1):
    lp = torch.log_softmax(x @ w.t(), -1)
    valid = t != -100
    # masked with where, not by multiplication: an ignored token's gradient is 0 even when the
    # loss is NaN (0 * NaN would be NaN), as liger_cpp's (and the CE row step's) ignored rows
    tok = torch.where(valid, lp.gather(-1, t.clamp_min(0).unsqueeze(-1)).squeeze(-1), 0.0)
    s = tok.sum(-1)
    B = t.shape[0] // 2
    return (-F.logsigmoid(beta * (s[:B] - s[B:])).mean(),)


CASES = {
    "rms_norm": Case(
        make=lambda d, n: dict(X=_rand(n, H, device=d), W=1 + 0.1 * _rand(H, device=d)),
        fwd=lambda i: (liger_rms_norm(i["X"], i["W"], EPS),),
        ref=lambda i: (rms_norm_ref(i["X"], i["W"], EPS),),
        grads=("X", "W"),
        bad=("X", (1, 3)),
        other="W",
        other_arg="W",
        strided=("X",),
    ),
    "fused_add_rms_norm": Case(
        make=lambda d, n: dict(
            X=_rand(n, H, device=d), R=_rand(n, H, device=d), W=1 + 0.1 * _rand(H, device=d)
        ),
        fwd=lambda i: tuple(liger_fused_add_rms_norm(i["X"], i["R"], i["W"], EPS)),
        ref=lambda i: tuple(fused_add_rms_norm_ref(i["X"], i["R"], i["W"], EPS)),
        grads=("X", "R", "W"),
        bad=("X", (1, 3)),
        other="R",
        other_arg="R",
        strided=("X", "R"),
    ),
    "layer_norm": Case(
        make=lambda d, n: dict(
            X=_rand(n, H, device=d), W=1 + 0.1 * _rand(H, device=d), B=0.1 * _rand(H, device=d)
        ),
        fwd=lambda i: (liger_layer_norm(i["X"], i["W"], i["B"], 1e-5),),
        ref=lambda i: (layer_norm_ref(i["X"], i["W"], i["B"], 1e-5),),
        grads=("X", "W", "B"),
        bad=("X", (1, 3)),
        other="B",
        other_arg="B",
        strided=("X",),
    ),
    "swiglu": Case(
        make=lambda d, n: dict(a=_rand(n, H, device=d, scale=3), b=_rand(n, H, device=d)),
        fwd=lambda i: (liger_swiglu(i["a"], i["b"]),),
        ref=lambda i: (swiglu_ref(i["a"], i["b"]),),
        grads=("a", "b"),
        bad=("a", (1, 3)),
        other="b",
        other_arg="b",
        last_stride_copied=False,
        strided=("a", "b"),
    ),
    "geglu": Case(
        make=lambda d, n: dict(a=_rand(n, H, device=d, scale=3), b=_rand(n, H, device=d)),
        fwd=lambda i: (liger_geglu(i["a"], i["b"]),),
        ref=lambda i: (geglu_ref(i["a"], i["b"]),),
        grads=("a", "b"),
        bad=("a", (1, 3)),
        other="b",
        other_arg="b",
        last_stride_copied=False,
        strided=("a", "b"),
    ),
    "rope": Case(
        make=lambda d, n: dict(
            q=_rand(2, 3, n, 8, device=d),
            k=_rand(2, 1, n, 8, device=d),
            cos=_rand(1, n, 8, device=d).cos(),
            sin=_rand(1, n, 8, device=d).sin(),
        ),
        fwd=lambda i: tuple(liger_rotary_pos_emb(i["q"], i["k"], i["cos"], i["sin"])),
        ref=lambda i: tuple(rope_ref(i["q"], i["k"], i["cos"], i["sin"])),
        grads=("q", "k"),
        bad=("q", (0, 1, 2, 3)),
        other="cos",
        other_arg="cos",
        strided=("q", "k"),
    ),
    "cross_entropy": Case(
        make=lambda d, n: dict(logits=_rand(n, 11, device=d, scale=2), target=_targets(n, 11, d)),
        fwd=lambda i: (liger_cross_entropy(i["logits"], i["target"]),),
        ref=lambda i: (cross_entropy_ref(i["logits"], i["target"])[0],),
        grads=("logits",),
        bad=("logits", (1, 3)),
        other="target",
        other_arg="target",
        last_stride_copied=False,
        strided=("logits",),
    ),
    "fused_linear_cross_entropy": Case(
        make=lambda d, n: dict(
            x=_rand(n, H, device=d), w=_rand(11, H, device=d, scale=0.3), target=_targets(n, 11, d)
        ),
        fwd=lambda i: (liger_fused_linear_cross_entropy(i["x"], i["w"], i["target"]),),
        ref=lambda i: (cross_entropy_ref(i["x"] @ i["w"].t(), i["target"])[0],),
        grads=("x", "w"),
        bad=("x", (1, 3)),
        other="w",
        other_arg="weight",
        strided=("x", "w"),
    ),
    "dpo": Case(
        # n rows = 2 pairs of n // 2 ... the pairs are (chosen, rejected) sequences of 5 tokens
        make=lambda d, n: dict(
            x=_rand(n, 5, H, device=d),
            w=_rand(11, H, device=d, scale=0.3),
            target=_targets(n * 5, 11, d).view(n, 5),
        ),
        fwd=lambda i: (LigerFusedLinearDPOLoss(use_ref_model=False)(i["w"], i["x"], i["target"])[0],),
        ref=lambda i: _dpo_ref(i["w"], i["x"], i["target"]),
        grads=("x", "w"),
        bad=("x", (1, 2, 3)),
        other="target",
        other_arg="target",
        strided=("x",),
    ),
    "moe_experts": Case(
        # 3 experts of I = 8, top 2; token t's slots on experts t % 3 and (t + 1) % 3
        make=lambda d, n: dict(
            x=_rand(n, H, device=d),
            idx=torch.stack([torch.arange(n) % 3, (torch.arange(n) + 1) % 3], -1).to(d),
            w=torch.rand(n, 2, device=d),
            gu=_rand(3, 16, H, device=d, scale=0.3),
            dn=_rand(3, H, 8, device=d, scale=0.3),
        ),
        fwd=lambda i: (moe_experts(i["x"], i["idx"], i["w"], i["gu"], i["dn"]),),
        # (no rows: x * 0, the empty output connected to the graph, as the per-expert loop is not)
        ref=lambda i: (
            moe_experts_ref(i["x"], i["idx"], i["w"], i["gu"], i["dn"], None, None, "silu", False, False)
            if len(i["x"])
            else i["x"] * 0,
        ),
        grads=("x", "w", "gu", "dn"),
        bad=("x", (1, 3)),
        other="gu",
        other_arg="gate_up_proj",
        strided=("x",),
    ),
}
OPS = list(CASES)
ROWS = 4


def _seed_grads(outs):
    g = torch.Generator().manual_seed(7)
    return [torch.randn(o.shape, generator=g, dtype=torch.float64) + 0.5 for o in outs]


def _run(case, inp, impl, dtype=None):
    """impl's outputs and the gradients of sum(out * fixed random) w.r.t. case.grads."""
    args = {}
    for n, t in inp.items():
        t = t.detach()
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        args[n] = t.requires_grad_(True) if n in case.grads else t
    outs = impl(args)
    seeds = _seed_grads(outs)
    loss = sum((o.double() * s.to(o.device)).sum() for o, s in zip(outs, seeds))
    grads = torch.autograd.grad(loss, [args[n] for n in case.grads], allow_unused=True)
    return [o.detach() for o in outs], list(grads)


def _with_bad(inp, case, value):
    name, index = case.bad
    out = dict(inp)
    out[name] = inp[name].clone()
    out[name][index] = value
    return out


def _close(got, want, what, equal_nan=True):
    torch.testing.assert_close(
        got.double().cpu(), want.double().cpu(), rtol=1e-4, atol=1e-5, equal_nan=equal_nan, msg=what
    )


# ---------------------------------------------------------------------------------------------
# NaN / inf


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=["nan", "+inf", "-inf"])
@pytest.mark.parametrize("op", OPS)
def test_non_finite_inputs_propagate_like_pytorch(op, value, device):
    case = CASES[op]
    torch.manual_seed(0)
    inp = _with_bad(case.make(device, ROWS), case, value)
    outs, grads = _run(case, inp, case.fwd)
    routs, rgrads = _run(case, inp, case.ref, dtype=torch.float64)
    for i, (o, r) in enumerate(zip(outs, routs)):
        _close(o, r, f"{op} output {i} with {value} in {case.bad[0]}")
    for n, g, r in zip(case.grads, grads, rgrads):
        _close(g, r, f"{op} d{n} with {value} in {case.bad[0]}")


# ---------------------------------------------------------------------------------------------
# empty tensors


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_empty_inputs(op, device):
    case = CASES[op]
    inp = case.make(device, 0)
    if op == "dpo":
        with pytest.raises(RuntimeError, match="argument 'target'.*\\(2B, T\\)"):
            _run(case, inp, case.fwd)
        return
    outs, grads = _run(case, inp, case.fwd)
    routs, _ = _run(case, inp, case.ref, dtype=torch.float64)
    for o, r in zip(outs, routs):
        assert o.shape == r.shape
        if o.dim() == 0:  # a reduced loss of no rows: 0 (PyTorch's mean gives NaN)
            assert o.item() == 0.0
    for n, g in zip(case.grads, grads):
        assert g is not None and g.shape == inp[n].shape
        assert not g.numel() or bool((g == 0).all()), f"{op} d{n}: the gradient of no rows is zero"


# ---------------------------------------------------------------------------------------------
# non-contiguous inputs


def _row_strided(t):
    """t's values in a view whose rows are apart (a slice of a wider tensor; unit last stride)."""
    wide = torch.zeros(*t.shape[:-1], t.shape[-1] + 5, device=t.device, dtype=t.dtype)
    wide[..., : t.shape[-1]] = t
    return wide[..., : t.shape[-1]]


def _col_major(t):
    """t's values with a non-unit last stride (the last two dimensions stored transposed)."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2) if t.dim() >= 2 else t[None].repeat(2, 1)[0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["row_strided", "last_stride"])
@pytest.mark.parametrize("op", OPS)
def test_non_contiguous_inputs(op, layout, device):
    case = CASES[op]
    torch.manual_seed(0)
    inp = case.make(device, ROWS)
    want_outs, want_grads = _run(case, inp, case.fwd)
    view = _row_strided if layout == "row_strided" else _col_major
    nc = {n: (view(t) if n in case.strided else t) for n, t in inp.items()}
    assert all(not nc[n].is_contiguous() for n in case.strided)
    if layout == "last_stride" and not case.last_stride_copied:
        first = case.strided[0]
        with pytest.raises(RuntimeError, match=f"argument '{first}'.*unit stride"):
            _run(case, nc, case.fwd)
        return
    outs, grads = _run(case, nc, case.fwd)
    for o, w in zip(outs, want_outs):
        _close(o, w, f"{op} output, {layout} inputs", equal_nan=False)
    for n, g, w in zip(case.grads, grads, want_grads):
        _close(g, w, f"{op} d{n}, {layout} inputs", equal_nan=False)


# ---------------------------------------------------------------------------------------------
# devices


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("which", ["other_on_cpu", "primary_on_cpu"])
@pytest.mark.parametrize("op", OPS)
def test_a_cpu_tensor_among_cuda_tensors_is_an_error_naming_it(op, which):
    case = CASES[op]
    inp = case.make("cuda", ROWS)
    moved = case.other if which == "other_on_cpu" else case.bad[0]
    inp[moved] = inp[moved].cpu()
    # the argument named: the one on the CPU, or (the main input on the CPU) the first CUDA one
    # checked against it; either way the message says which device was expected
    named = (
        f"argument '{case.other_arg}'.*expected device cuda"
        if which == "other_on_cpu"
        else "argument '.*'.*device"
    )
    with pytest.raises(RuntimeError, match=named):
        _run(case, inp, case.fwd)


@pytest.mark.skipif(not TWO_GPUS, reason="needs two GPUs")
@pytest.mark.parametrize("op", OPS)
def test_a_tensor_on_another_gpu_is_an_error_naming_it(op):
    case = CASES[op]
    inp = case.make("cuda:0", ROWS)
    inp[case.other] = inp[case.other].to("cuda:1")
    with pytest.raises(RuntimeError, match=f"argument '{case.other_arg}'.*cuda:0"):
        _run(case, inp, case.fwd)


@pytest.mark.skipif(not TWO_GPUS, reason="needs two GPUs")
@pytest.mark.parametrize("op", OPS)
def test_all_on_a_gpu_that_is_not_the_current_device(op):
    case = CASES[op]
    torch.manual_seed(0)
    inp = case.make("cuda:0", ROWS)
    want_outs, want_grads = _run(case, inp, case.fwd)
    with torch.cuda.device(0):
        outs, grads = _run(case, {n: t.to("cuda:1") for n, t in inp.items()}, case.fwd)
    for o, w in zip(outs, want_outs):
        assert o.device == torch.device("cuda:1")
        _close(o, w, f"{op} on cuda:1", equal_nan=False)
    for g, w in zip(grads, want_grads):
        _close(g, w, f"{op} gradient on cuda:1", equal_nan=False)


# ---------------------------------------------------------------------------------------------
# cross entropy's class dimension


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_reads_classes_from_the_last_dimension(device):
    # liger_cpp (as Liger's (BT, V)) reads the classes from the last dimension at every rank;
    # F.cross_entropy reads them from dimension 1. (B, T, V) logits with (B, T) targets are the LLM
    # layout; F.cross_entropy's (N, C, d) layout is passed as logits.movedim(1, -1).contiguous()
    # (the class dimension needs a unit stride: a strided view is refused, naming 'logits').
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, device=device)  # (B, T, V)
    t = torch.randint(0, 7, (2, 3), device=device)
    want = F.cross_entropy(x.reshape(-1, 7), t.reshape(-1))
    _close(liger_cross_entropy(x, t), want, "(B, T, V) logits")
    f_layout = x.movedim(-1, 1).contiguous()  # (N, C, d): F.cross_entropy's
    _close(F.cross_entropy(f_layout, t), want, "F.cross_entropy on (N, C, d)")
    _close(liger_cross_entropy(f_layout.movedim(1, -1).contiguous(), t), want, "movedim(1, -1)")
    with pytest.raises(RuntimeError, match="argument 'logits'.*unit stride"):
        liger_cross_entropy(f_layout.movedim(1, -1), t)
    # the (N, C, d) layout itself: the targets' shape does not match (N, C): an error saying how
    with pytest.raises(RuntimeError, match="argument 'target'.*last one.*movedim\\(1, -1\\)"):
        liger_cross_entropy(f_layout, t)
    # square (N, C, C) logits are valid both ways and read as (..., V): the documented convention
    sq = torch.randn(2, 4, 4, device=device)
    ts = torch.randint(0, 4, (2, 4), device=device)
    _close(liger_cross_entropy(sq, ts), F.cross_entropy(sq.reshape(-1, 4), ts.reshape(-1)), "(N, C, C)")


def test_an_extension_built_against_another_torch_names_both_releases(monkeypatch):
    """_C compiled for one torch release does not load under another (undefined symbols: a build
    with pip's isolation takes the newest torch); the import error then names both releases."""
    import types

    fake = types.ModuleType("liger_cpp._build_torch")
    fake.TORCH_VERSION = "2.99.0+other"
    monkeypatch.setitem(sys.modules, "liger_cpp._build_torch", fake)
    msg = liger_cpp._load_failure(ImportError("_C.abi3.so: undefined symbol: _ZN3c104cuda"))
    assert "undefined symbol" in msg and "--no-build-isolation" in msg
    assert f"built against torch 2.99.0+other and this process runs torch {torch.__version__}" in msg
    fake.TORCH_VERSION = torch.__version__  # same release: some other cause, no such sentence
    assert "built against" not in liger_cpp._load_failure(ImportError("x"))
