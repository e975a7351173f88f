"""The tiled MLP (liger_cpp.ops.tiled_mlp, LigerTiledSwiGLUMLP / LigerTiledGEGLUMLP): output and
every gradient against an independent float64 reference (the HF MLP formula on full rows) and
against the untiled module, every dtype, odd shapes and shard counts that do and do not divide the
rows, grad_output != 1, frozen weights, an input without grad, hooked projections (the module path),
what is saved for backward (x only), parameter hooks firing once, DeepSpeed ZeRO-3's recipe, float64
gradcheck, Liger-Kernel's Function / apply_tiled_mlp with a user function, errors."""

import math
import types

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES
from torch import nn
from utils import assert_close_to_ref, assert_compiled_grads_match

from liger_cpp.ops.glu_mlp import glu_mlp, glu_mlp_tiled
from liger_cpp.ops.tiled_mlp import TiledMLPFunction, apply_tiled_mlp
from liger_cpp.transformers import LigerGEGLUMLP, LigerSwiGLUMLP, LigerTiledGEGLUMLP, LigerTiledSwiGLUMLP

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (x shape, hidden, shards): shards dividing the rows, not dividing, more shards than rows, one row,
# 3-D with a batch, 2-D (MoE experts' layout)
CASES = [((2, 23, 16), 3), ((1, 64, 16), 4), ((3, 2, 16), 5), ((1, 1, 16), 2), ((47, 16), 6), ((2, 9, 16), 1)]
KINDS = {
    "swiglu": ("silu", lambda a: F.silu(a)),
    "geglu_tanh": ("gelu_pytorch_tanh", lambda a: F.gelu(a, approximate="tanh")),
    "geglu_erf": ("gelu", lambda a: F.gelu(a)),
}


def _config(kind, hidden=16, inter=40):
    return types.SimpleNamespace(hidden_size=hidden, intermediate_size=inter, hidden_act=KINDS[kind][0])


def _modules(kind, shards, device, dtype, hidden=16):
    cfg = _config(kind, hidden)
    tiled_cls, plain_cls = (
        (LigerTiledSwiGLUMLP, LigerSwiGLUMLP) if kind == "swiglu" else (LigerTiledGEGLUMLP, LigerGEGLUMLP)
    )
    torch.manual_seed(0)
    tiled = tiled_cls(cfg, num_shards=shards)
    with torch.no_grad():
        for p in tiled.parameters():
            p.normal_(0, 0.2)
    plain = plain_cls(cfg)
    plain.load_state_dict(tiled.state_dict())
    return tiled.to(device, dtype), plain.to(device, dtype)


def _reference(kind, x, wg, wu, wd):
    """HF's MLP on every row at once, in x's dtype (float64 for the reference)."""
    act = KINDS[kind][1]
    return (act(x @ wg.T) * (x @ wu.T)) @ wd.T


def _saved_by(module, x):
    """(module(x), the sizes of the tensors its forward saves for backward that are not its
    parameters: those are saved by reference and cost nothing)."""
    params = {p.data_ptr() for p in module.parameters()}
    saved = []

    def pack(t):
        if t.data_ptr() not in params:
            saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = module(x)
    return y, saved


def _assert_same_grads(a, b, tol=1e-12):
    """The x and weight gradients of two _run results agree (float64 runs: to rounding)."""
    torch.testing.assert_close(a[1], b[1], rtol=tol, atol=tol)
    for u, v in zip(a[2], b[2]):
        torch.testing.assert_close(u, v, rtol=tol, atol=tol)


def _run(module, x, dy):
    x = x.detach().clone().requires_grad_()
    y = module(x)
    y.backward(dy)
    return y, x.grad, [p.grad for p in module.parameters()]


def _module_path(module):
    """A no-op forward hook on gate_proj: the tiled module then takes the general path
    (apply_tiled_mlp around its own forward), as behind PEFT layers or DeepSpeed ZeRO-3's hooks."""
    module.gate_proj.register_forward_hook(lambda m, i, o: None)
    return module


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("shape,shards", CASES)
@pytest.mark.parametrize("path", ["op", "module"])
def test_matches_reference_and_untiled(device, dtype, kind, shape, shards, path):
    """path "op": plain projections, the C++ op glu_mlp_tiled; "module": the general path."""
    if device == "cpu" and dtype == torch.float16:
        pytest.skip("float16 matmuls on the CPU are PyTorch's slow path; bfloat16 covers low precision")
    tiled, plain = _modules(kind, shards, device, dtype)
    if path == "module":
        _module_path(tiled)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=g).to(device, dtype)
    dy = torch.randn(*shape, generator=g).to(device, dtype)  # grad_output != 1
    y, dx, dws = _run(tiled, x, dy)
    y_lo, dx_lo, dws_lo = _run(plain, x, dy)  # the untiled module: low-precision PyTorch's error

    ws64 = [p.detach().double().requires_grad_() for p in tiled.parameters()]
    x64 = x.double().requires_grad_()
    y64 = _reference(kind, x64, *ws64)
    y64.backward(dy.double())
    assert_close_to_ref(y, y64, y_lo, "y")
    assert_close_to_ref(dx, x64.grad, dx_lo, "dx")
    for name, dw, w64, dw_lo in zip(("d_gate", "d_up", "d_down"), dws, ws64, dws_lo):
        assert_close_to_ref(dw, w64.grad, dw_lo, name)


@pytest.mark.parametrize("device", DEVICES)
def test_float32_equals_untiled_closely(device):
    """In float32 each row's output is the untiled module's (rows are independent), and the weight
    gradients are its sums split over shards."""
    tiled, plain = _modules("swiglu", 7, device, torch.float32)
    x = torch.randn(3, 50, 16, device=device)
    dy = torch.randn(3, 50, 16, device=device)
    a, b = _run(tiled, x, dy), _run(plain, x, dy)
    torch.testing.assert_close(a[0], b[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(a[1], b[1], rtol=1e-6, atol=1e-6)
    for u, v in zip(a[2], b[2]):
        torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-5)


def test_default_shards_is_seq_over_hidden():
    """num_shards None: ceil(seq / hidden) shards (Liger-Kernel's rule), each of ceil(rows / shards)
    rows; counted by the calls the module makes in the forward."""
    tiled, _ = _modules("swiglu", None, "cpu", torch.float32, hidden=16)
    calls = []
    tiled.down_proj.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
    tiled(torch.randn(2, 40, 16))  # seq 40, hidden 16: 3 shards of ceil(80 / 3) = 27 rows
    assert calls == [27, 27, 26]
    calls.clear()
    tiled(torch.randn(2, 5, 16))  # seq below hidden: one shard
    assert calls == [10]


def test_saves_only_the_input():
    """What the forward keeps for backward is x alone: no shard's intermediate activations."""
    tiled, plain = _modules("swiglu", 4, "cpu", torch.float32)
    x = torch.randn(2, 32, 16, requires_grad=True)
    y, saved = _saved_by(tiled, x)
    assert saved == [x.numel()], saved
    _, saved = _saved_by(plain, x)
    assert sum(saved) >= 2 * 64 * 40, "the untiled MLP should save its intermediates (test premise)"
    y.sum().backward()


def test_frozen_weights_and_input_without_grad():
    tiled, plain = _modules("swiglu", 3, "cpu", torch.float64)
    for m in (tiled, plain):
        m.gate_proj.weight.requires_grad_(False)
    x = torch.randn(2, 11, 16, dtype=torch.float64)  # no grad
    dy = torch.randn(2, 11, 16, dtype=torch.float64)
    tiled(x).backward(dy)
    plain(x).backward(dy)
    assert tiled.gate_proj.weight.grad is None
    for a, b in ((tiled.up_proj, plain.up_proj), (tiled.down_proj, plain.down_proj)):
        torch.testing.assert_close(a.weight.grad, b.weight.grad, rtol=1e-12, atol=1e-12)


def test_hooked_projection_takes_the_module_path():
    """A forward hook on a projection (as PEFT / ZeRO-3 layers have) makes each shard call the
    projections as modules; the hook runs in the forward and again in the backward's recomputation,
    and gradients are unchanged."""
    tiled, plain = _modules("geglu_tanh", 3, "cpu", torch.float64)
    seen = []
    tiled.up_proj.register_forward_hook(lambda m, i, o: seen.append(torch.is_grad_enabled()))
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    dy = torch.randn(1, 9, 16, dtype=torch.float64)
    a, b = _run(tiled, x, dy), _run(plain, x, dy)
    assert seen == [False] * 3 + [True] * 3
    _assert_same_grads(a, b)


def test_parameter_hooks_fire_once_and_autograd_grad_sees_x():
    """Each parameter's gradient arrives once (its post-accumulate hook fires once per backward,
    not once per shard: DDP / FSDP reduce once), and torch.autograd.grad gets x's gradient."""
    tiled, plain = _modules("swiglu", 5, "cpu", torch.float64)
    fired = []
    for n, p in tiled.named_parameters():
        p.register_post_accumulate_grad_hook(lambda p, n=n: fired.append(n))
    x = torch.randn(2, 10, 16, dtype=torch.float64, requires_grad=True)
    tiled(x).sum().backward()
    assert sorted(fired) == sorted(n for n, _ in tiled.named_parameters())
    (gx,) = torch.autograd.grad(tiled(x).pow(2).sum(), x)
    (gx_ref,) = torch.autograd.grad(plain(x).pow(2).sum(), x)
    torch.testing.assert_close(gx, gx_ref, rtol=1e-12, atol=1e-12)


def test_bfloat16_weight_gradients_sum_in_float32():
    """With 64 shards of one row each the weight gradients are the untiled module's to bfloat16
    rounding of the sum (float32 accumulation), not 64 roundings' worth of error."""
    tiled, _ = _modules("swiglu", 64, "cpu", torch.bfloat16)
    x = torch.randn(64, 16).bfloat16()
    dy = torch.randn(64, 16).bfloat16()
    _, _, dws = _run(tiled, x, dy)
    ws64 = [p.detach().double().requires_grad_() for p in tiled.parameters()]
    _reference("swiglu", x.double(), *ws64).backward(dy.double())
    for dw, w in zip(dws, ws64):
        # each shard's gradient is exact to bf16 GEMM rounding of one row's product; one final
        # rounding of the sum: a few bf16 ulps of the largest entry, far below 64 sequential roundings
        err = (dw.double() - w.grad).abs().max().item()
        assert err <= 4 * 2**-8 * w.grad.abs().max().item(), err


def test_gradcheck_float64():
    """gradcheck in x for the module, and in x and every weight for a function whose weights are
    compute_params (the gradients the node returns for parameters are checked too)."""
    tiled, _ = _modules("geglu_erf", 3, "cpu", torch.float64)
    x = torch.randn(7, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(tiled, (x,))
    ws = [p.detach().clone().requires_grad_() for p in tiled.parameters()]

    def f(x, *w):
        def fn(module, rows):
            return _reference("geglu_erf", rows, *w)

        return TiledMLPFunction.apply(fn, nn.Module(), x, 3, list(w))

    assert torch.autograd.gradcheck(f, (x, *ws))


def test_functional_call():
    """torch.func.functional_call: the C++ op saves the weights it was called with, so the swapped
    tensors get the gradients; the general path, whose backward computes the forward again with the
    module's own parameters, raises a clear error instead of giving them none."""
    tiled, plain = _modules("swiglu", 3, "cpu", torch.float64)
    names = [n for n, _ in tiled.named_parameters()]
    x = torch.randn(5, 16, dtype=torch.float64)
    ws = [(p.detach() * 1.5).requires_grad_() for p in tiled.parameters()]
    ref = [w.detach().clone().requires_grad_() for w in ws]
    torch.func.functional_call(tiled, dict(zip(names, ws)), (x,)).sum().backward()
    torch.func.functional_call(plain, dict(zip(names, ref)), (x,)).sum().backward()
    for a, b in zip(ws, ref):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)
    _module_path(tiled)
    y = torch.func.functional_call(tiled, dict(zip(names, ws)), (x,))
    with pytest.raises(RuntimeError, match="changed between the forward and the backward"):
        y.sum().backward()


def test_liger_function_and_apply_with_a_user_function():
    """Liger-Kernel's calling conventions: LigerTiledMLPFunction.apply(fn, module, x, shards,
    compute_params) and apply_tiled_mlp(fn, module, x, num_shards, compute_params) with a user's
    fn and module; a parameter outside the module, named in compute_params, gets its gradient."""
    torch.manual_seed(3)
    mlp = nn.Sequential(nn.Linear(16, 24), nn.GELU(), nn.Linear(24, 16)).double()
    scale = nn.Parameter(torch.tensor(1.5, dtype=torch.float64))

    def fn(module, x):
        return module(x) * scale

    x = torch.randn(3, 13, 16, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(3, 13, 16, dtype=torch.float64)

    def under_saved_tensor_hooks():  # saved tensors may come back as other Python objects
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t.view_as(t), lambda t: t):
            return TiledMLPFunction.apply(fn, mlp, x, 4, [scale])

    for call in (
        under_saved_tensor_hooks,
        lambda: TiledMLPFunction.apply(fn, mlp, x, 4, [scale]),
        lambda: apply_tiled_mlp(fn, mlp, x, num_shards=4, compute_params=[scale]),
        lambda: apply_tiled_mlp(fn, mlp, x, compute_params=[scale]),  # default: one shard here
    ):
        for p in [*mlp.parameters(), scale, x]:
            p.grad = None
        call().backward(dy)
        got = [p.grad.clone() for p in [*mlp.parameters(), scale, x]]
        for p in [*mlp.parameters(), scale, x]:
            p.grad = None
        fn(mlp, x).backward(dy)
        for g, p in zip(got, [*mlp.parameters(), scale, x]):
            torch.testing.assert_close(g, p.grad, rtol=1e-12, atol=1e-12)


def test_zero3_parameters_take_deepspeeds_recipe():
    """Parameters of DeepSpeed ZeRO-3 (marked by ds_id) get each shard's gradient accumulated where
    DeepSpeed's hooks see it, with ds_grad_is_ready False until the last shard (DeepSpeed's
    TiledMLP protocol); the sums are the untiled module's."""
    tiled, plain = _modules("swiglu", 4, "cpu", torch.float64)
    _module_path(tiled)  # ZeRO-3's own module hooks do this
    ready = []
    for i, p in enumerate(tiled.parameters()):
        p.ds_id = i
        p.register_post_accumulate_grad_hook(lambda p: ready.append(p.ds_grad_is_ready))
    x = torch.randn(2, 16, 16, dtype=torch.float64)
    dy = torch.randn(2, 16, 16, dtype=torch.float64)
    a, b = _run(tiled, x, dy), _run(plain, x, dy)
    assert ready == [False] * 9 + [True] * 3
    _assert_same_grads(a, b)


def test_empty_rows():
    tiled, _ = _modules("swiglu", 3, "cpu", torch.float32)
    x = torch.randn(0, 16, requires_grad=True)
    y = tiled(x)
    assert y.shape == (0, 16)
    y.sum().backward()
    assert x.grad.shape == (0, 16)


def test_errors():
    tiled, _ = _modules("swiglu", 3, "cpu", torch.float32)
    x = torch.randn(4, 16)
    with pytest.raises(ValueError, match="argument 'shards'"):
        TiledMLPFunction.apply(lambda m, t: m(t), tiled, x, 0, None)
    with pytest.raises(TypeError, match="argument 'fn'"):
        TiledMLPFunction.apply(None, tiled, x, 2, None)
    with pytest.raises(TypeError, match="argument 'mlp_module'"):
        TiledMLPFunction.apply(lambda m, t: t, object(), x, 2, None)
    with pytest.raises(ValueError, match="SiLU"):
        LigerTiledSwiGLUMLP(_config("geglu_erf"))
    with pytest.raises(ValueError, match="GeGLU"):
        LigerTiledGEGLUMLP(_config("swiglu"))
    # without hidden_act in the config (Liger-Kernel accepts it): silu / tanh GELU
    cfg = types.SimpleNamespace(hidden_size=8, intermediate_size=12)
    assert LigerTiledSwiGLUMLP(cfg).num_shards is None
    assert LigerTiledGEGLUMLP(cfg, num_shards=2).approximate == "tanh"


@pytest.mark.parametrize("device", DEVICES)
def test_long_sequence_keeps_only_one_shard_alive(device):
    """A sequence of 8192 rows with an intermediate 8 x hidden: the memory the forward leaves for
    backward is x (counted by saved-tensor hooks, any device), and on CUDA the backward's peak stays
    below the untiled forward's saved activations."""
    hidden, inter, rows = 64, 512, 8192
    cfg = types.SimpleNamespace(hidden_size=hidden, intermediate_size=inter, hidden_act="silu")
    tiled = LigerTiledSwiGLUMLP(cfg, num_shards=16).to(device)
    x = torch.randn(1, rows, hidden, device=device, requires_grad=True)
    y, saved = _saved_by(tiled, x)
    assert saved == [x.numel()]
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        y.backward(torch.ones_like(y))
        peak = torch.cuda.max_memory_allocated() - base
        untiled_saved = 3 * rows * inter * 4  # gate, up and the product of the whole sequence
        assert peak < untiled_saved / 2, (peak, untiled_saved)
    else:
        y.backward(torch.ones_like(y))
    assert x.grad is not None and math.isfinite(x.grad.sum().item())


def test_a_tensor_needing_grad_outside_the_parameters_is_an_error():
    """A weight fn uses that is neither the module's parameter nor in compute_params would get no
    gradient from the backward's recomputation: a clear error naming compute_params."""
    torch.manual_seed(0)
    mlp = nn.Linear(16, 16).double()
    scale = nn.Parameter(torch.tensor(2.0, dtype=torch.float64))
    x = torch.randn(6, 16, dtype=torch.float64, requires_grad=True)
    y = apply_tiled_mlp(lambda m, t: m(t) * scale, mlp, x, num_shards=2)
    with pytest.raises(RuntimeError, match="compute_params"):
        y.sum().backward()


def test_lora_adapters_train_behind_a_frozen_input():
    """PEFT LoRA on the projections (the module path), base weights frozen, and an input that needs
    no gradient (frozen layers before the MLP): the adapters' gradients are the untiled module's
    (Liger-Kernel's tiled MLP gives them none there: its node has no input that needs a gradient)."""
    peft = pytest.importorskip("peft")
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["gate_proj", "up_proj", "down_proj"])
    tiled, plain = _modules("swiglu", 3, "cpu", torch.float64)
    tiled = peft.inject_adapter_in_model(cfg, tiled)
    plain = peft.inject_adapter_in_model(cfg, plain)
    with torch.no_grad():  # LoRA's B starts at zero: make the adapters act, the same in both
        for (n, a), (_, b) in zip(tiled.named_parameters(), plain.named_parameters()):
            if "lora_" in n:
                a.normal_(0, 0.1)
                b.copy_(a)
    for m in (tiled, plain):
        for n, p in m.named_parameters():
            p.requires_grad_("lora_" in n)
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    dy = torch.randn(2, 10, 16, dtype=torch.float64)
    y = tiled(x)
    assert y.requires_grad
    y.backward(dy)
    plain(x).backward(dy)
    got = {n: p.grad for n, p in tiled.named_parameters() if p.requires_grad}
    assert len(got) == 6 and all(g is not None for g in got.values())
    for n, p in plain.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(got[n], p.grad, rtol=1e-12, atol=1e-12)


def test_autocast_recomputes_in_the_forwards_dtype():
    """float32 weights under bfloat16 autocast: the backward's recomputation runs under the same
    autocast, so every gradient is the untiled module's under autocast (not a float32 recomputation's)."""
    tiled, plain = _modules("swiglu", 4, "cpu", torch.float32)
    x = torch.randn(2, 12, 16)
    dy = torch.randn(2, 12, 16)
    with torch.autocast("cpu", torch.bfloat16):
        xt, xp = x.clone().requires_grad_(), x.clone().requires_grad_()
        yt, yp = tiled(xt), plain(xp)
    assert yt.dtype == yp.dtype == torch.bfloat16
    yt.backward(dy.bfloat16())
    yp.backward(dy.bfloat16())
    torch.testing.assert_close(yt, yp, rtol=0, atol=0)
    torch.testing.assert_close(xt.grad, xp.grad, rtol=0, atol=0)
    for a, b in zip(tiled.parameters(), plain.parameters()):
        # float32 weights: each shard's bfloat16 GEMM rounds, then the shards' sum is float32
        torch.testing.assert_close(a.grad, b.grad, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_op_opcheck_and_masks(device, dtype):
    """opcheck of glu_mlp_tiled and its backward (every output mask), and the op against glu_mlp."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 7, 24, generator=g).to(device, dtype).requires_grad_()
    wg, wu = ((torch.randn(40, 24, generator=g) * 0.2).to(device, dtype).requires_grad_() for _ in range(2))
    wd = (torch.randn(20, 40, generator=g) * 0.2).to(device, dtype).requires_grad_()
    torch.library.opcheck(torch.ops.liger.glu_mlp_tiled, (x, wg, wu, wd, "silu", 3))
    torch.library.opcheck(torch.ops.liger.glu_mlp_tiled, (x, wg, wu, wd, "gelu", 20))
    xd, gd, ud, dd = (t.detach() for t in (x, wg, wu, wd))
    dy = torch.randn(2, 7, 20, generator=g).to(device, dtype)
    full = torch.ops.liger.glu_mlp_tiled_bwd(dy, xd, gd, ud, dd, "gelu_tanh", 4, [True] * 4)
    for mask in ([True] * 4, [True, False, True, False], [False, True, False, True]):
        torch.library.opcheck(torch.ops.liger.glu_mlp_tiled_bwd, (dy, xd, gd, ud, dd, "gelu_tanh", 4, mask))
        got = torch.ops.liger.glu_mlp_tiled_bwd(dy, xd, gd, ud, dd, "gelu_tanh", 4, mask)
        for want, a, b in zip(mask, got, full):
            assert a.shape == (b.shape if want else (0,))
            if want:
                torch.testing.assert_close(a, b, rtol=0, atol=0)
    y = glu_mlp_tiled(xd, gd, ud, dd, "silu", 5)
    torch.testing.assert_close(
        y, glu_mlp(xd, gd, ud, dd, "silu"), rtol=1e-5, atol=1e-5 if dtype == torch.float32 else 2e-2
    )


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    """The tiled module with plain projections is one op with a fake kernel: torch.compile traces
    it whole, with the eager gradients."""
    tiled, _ = _modules("swiglu", 3, device, torch.float32)
    x = torch.randn(2, 9, 16, device=device, requires_grad=True)
    assert_compiled_grads_match(lambda t: tiled(t).pow(2).sum(), x, [tiled], device, 1e-5)


def test_op_errors():
    x, w = torch.randn(4, 8), torch.randn(6, 8)
    wd = torch.randn(8, 6)
    with pytest.raises(ValueError, match="argument 'shards'"):
        glu_mlp_tiled(x, w, w, wd, "silu", 0)
    with pytest.raises(RuntimeError, match="argument 'shards'"):
        torch.ops.liger.glu_mlp_tiled(x, w, w, wd, "silu", 0)
    with pytest.raises(ValueError, match="argument 'activation'"):
        glu_mlp_tiled(x, w, w, wd, "relu", 2)
    with pytest.raises(RuntimeError, match="argument 'w_up'"):
        torch.ops.liger.glu_mlp_tiled(x, w, torch.randn(5, 8), wd, "silu", 2)
