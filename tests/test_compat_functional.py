"""Liger-Kernel 0.8.5's dispatching functional API (``liger_kernel.functional``), its implementation
choice (``impl=`` / ``backend=`` / ``mode=``, LIGER_KERNEL_IMPL[_<OP>], ``liger_kernel.set_impl``)
and ``liger_kernel.ops.configure``, on liger_cpp: each function called in Liger-Kernel's positional
order against a pure-PyTorch float64 reference (value and every input's gradient, grad_output != 1),
or, for the divergences and the loss options that have their own reference tests, against
liger_cpp's functional called by keyword."""

import json
import os
import warnings

import pytest
import torch
import torch.nn.functional as F
from compat_env import COMPAT, ensure_compat
from reference import fused_add_rms_norm_ref, geglu_ref, layer_norm_ref, rms_norm_ref, rope_ref, swiglu_ref
from test_compat_surface import _positional as _in_liger_order

ensure_compat()

MODULES = json.load(open(os.path.join(COMPAT, "liger_kernel", "_reference_signatures.json")))["modules"]
PARAMS = MODULES["liger_kernel.functional"]
ENV = ("LIGER_KERNEL_IMPL", "LIGER_KERNEL_BACKEND")
# Liger-Kernel's losses are float32 whatever the inputs' dtype, and its KL divergence gives its
# target no gradient; liger_cpp's do the same.
FLOAT32_LOSS = ("kl_div", "cross_entropy", "fused_linear_cross_entropy")
NOT_DIFFERENTIATED = {("kl_div", "y_true")}


@pytest.fixture(autouse=True)
def _no_impl_choice(monkeypatch):
    """No implementation choice from the environment or an earlier test's pin."""
    for key in list(os.environ):
        if key.startswith(ENV):
            monkeypatch.delenv(key)
    import liger_kernel

    liger_kernel.set_impl(None)
    yield
    liger_kernel.set_impl(None)


def _positional(name, values):
    """Liger-Kernel's positional parameters of functional.`name` up to the last one given; the
    keyword-only ones as keywords."""
    params = [p for p in PARAMS[name]["params"] if "kwonly" not in p]
    names = {p[0] for p in params}
    args = _in_liger_order(params, {k: v for k, v in values.items() if k in names})
    return args, {k: v for k, v in values.items() if k not in names}


def _r(g, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _cases():
    """name -> (Liger-Kernel's argument values, the float64 reference of the same values)."""
    g = torch.Generator().manual_seed(7)
    x, w, b = _r(g, 5, 13), _r(g, 13), _r(g, 13)
    a, u = _r(g, 4, 9), _r(g, 4, 9)
    q, k, cos, sin = _r(g, 2, 3, 5, 8), _r(g, 2, 1, 5, 8), _r(g, 1, 5, 8), _r(g, 1, 5, 8)
    logits, t = _r(g, 6, 11), torch.randint(0, 11, (6,), generator=g)
    t[1] = -100
    hx, hw, hb = _r(g, 6, 7), _r(g, 11, 7) * 0.5, _r(g, 11) * 0.1
    log_p = torch.log_softmax(_r(g, 6, 11), -1)
    p = torch.softmax(_r(g, 6, 11), -1)
    return {
        "rms_norm": (
            dict(x=x, weight=w, eps=1e-3, offset=1.0, casting_mode="gemma"),
            lambda v: rms_norm_ref(v["x"], v["weight"], 1e-3, 1.0, "gemma"),
        ),
        "layer_norm": (
            dict(x=x, weight=w, bias=b, eps=1e-4),
            lambda v: layer_norm_ref(v["x"], v["weight"], v["bias"], 1e-4),
        ),
        "softmax": (dict(x=logits), lambda v: torch.softmax(v["x"], -1)),
        "swiglu": (
            dict(a=a, b=u, gate_multiplier=0.5, down_multiplier=3.0),
            lambda v: swiglu_ref(v["a"] * 0.5, v["b"]) * 3.0,
        ),
        "geglu": (dict(a=a, b=u), lambda v: geglu_ref(v["a"], v["b"])),
        "rope": (
            dict(q=q, k=k, cos=cos, sin=sin),
            lambda v: rope_ref(v["q"], v["k"], v["cos"], v["sin"]),
        ),
        "fused_add_rms_norm": (
            dict(X=x, R=x.flip(0), W=w, eps=1e-5, offset=0.0),
            lambda v: fused_add_rms_norm_ref(v["X"], v["R"], v["W"], 1e-5),
        ),
        "kl_div": (
            dict(y_pred=log_p, y_true=p, reduction="sum"),
            lambda v: F.kl_div(v["y_pred"], v["y_true"], reduction="sum"),
        ),
        "cross_entropy": (
            dict(input=logits, target=t, label_smoothing=0.1),
            lambda v: (F.cross_entropy(v["input"], v["target"], label_smoothing=0.1), None, None, None),
        ),
        "fused_linear_cross_entropy": (
            dict(_input=hx, weight=hw, target=t, bias=hb, reduction="sum"),
            lambda v: (
                F.cross_entropy(v["_input"] @ v["weight"].T + v["bias"], v["target"], reduction="sum"),
                None,
                None,
                None,
            ),
        ),
    }


def _float_leaves(values):
    return {k: v for k, v in values.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}


def _flat(out):
    return [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]


def _value_and_grads(fn, values, g):
    """fn's outputs and the gradients of every floating-point input for a random grad_output."""
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in _float_leaves(values).items()}
    out = fn({**values, **leaves})
    flat = _flat(out)
    grads_out = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in flat]
    grads = torch.autograd.grad(flat, list(leaves.values()), grads_out, allow_unused=True)
    return out, dict(zip(leaves, grads))


@pytest.mark.parametrize("name", list(_cases()))
def test_functional_in_liger_order_equals_pytorch(name):
    import liger_kernel.functional as lf

    values, reference = _cases()[name]

    def ours(v):
        args, kwargs = _positional(name, v)
        return getattr(lf, name)(*args, **kwargs)

    got, got_grads = _value_and_grads(ours, values, torch.Generator().manual_seed(1))
    want, want_grads = _value_and_grads(reference, values, torch.Generator().manual_seed(1))
    assert type(got) is type(want) and len(_flat(got)) == len(_flat(want))
    if isinstance(want, tuple):
        assert [o is None for o in got] == [o is None for o in want]  # Liger's 4-tuple: unasked None
    for a, b in zip(_flat(got), _flat(want)):
        if name in FLOAT32_LOSS:
            assert a.dtype == torch.float32
            b = b.float()
        torch.testing.assert_close(a, b)
    assert set(got_grads) == set(want_grads)
    for key in want_grads:
        if (name, key) in NOT_DIFFERENTIATED:
            assert got_grads[key] is None, key
        elif want_grads[key] is None:
            assert got_grads[key] is None or not got_grads[key].any(), key
        else:
            torch.testing.assert_close(got_grads[key], want_grads[key], msg=lambda m, key=key: f"{key}: {m}")


def test_layer_norm_without_bias_and_cross_entropy_options_match_liger_cpp():
    """bias None is LayerNorm without a shift; cross entropy's options (z-loss, softcap, class
    weights, accuracy, predicted tokens) and the divergences land where liger_cpp's functional takes
    them by keyword."""
    import liger_kernel.functional as lf

    from liger_cpp.transformers import functional as cf

    g = torch.Generator().manual_seed(3)
    x, w = _r(g, 5, 13), _r(g, 13)
    torch.testing.assert_close(lf.layer_norm(x, w), F.layer_norm(x, (13,), w, None, 1e-6))
    logits, t = _r(g, 6, 11), torch.randint(0, 11, (6,), generator=g)
    cw = _r(g, 11).abs() + 0.5
    got = lf.cross_entropy(logits, t, cw, 4, 0.01, 0.1, "sum", 3.0, True, True, True)
    want = cf.liger_cross_entropy(
        logits,
        t,
        weight=cw,
        ignore_index=4,
        lse_square_scale=0.01,
        label_smoothing=0.1,
        reduction="sum",
        softcap=3.0,
        return_z_loss=True,
        return_token_accuracy=True,
        return_predicted_tokens=True,
    )
    for a, b in zip(got, (want.loss, want.z_loss, want.token_accuracy, want.predicted_tokens)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    s, tq = torch.log_softmax(_r(g, 6, 11), -1), torch.log_softmax(_r(g, 6, 11), -1)
    lab = torch.tensor([1, -100, 3, 4, 5, 6])
    torch.testing.assert_close(
        lf.jsd(s, tq, lab, 0.3), cf.liger_jsd(s, tq, shift_labels=lab, beta=0.3), rtol=0, atol=0
    )
    sx, sw, tx, tw = _r(g, 6, 5), _r(g, 11, 5), _r(g, 6, 7), _r(g, 11, 7)
    torch.testing.assert_close(
        lf.fused_linear_jsd(sx, sw, tx, tw, lab, 0.3, -100, 2.0),
        cf.liger_fused_linear_jsd(sx, sw, tx, tw, shift_labels=lab, jsd_beta=0.3, temperature=2.0),
        rtol=0,
        atol=0,
    )


def test_every_reference_function_is_covered():
    covered = set(_cases()) | {"jsd", "fused_linear_jsd"}
    assert covered == set(PARAMS)


def test_implementation_choice(monkeypatch):
    """Every implementation name Liger-Kernel knows runs liger_cpp; a name it does not know is an
    error that says where it came from (argument, per-op or global variable, set_impl), taken in
    Liger-Kernel's order: the argument, LIGER_KERNEL_IMPL_<OP>, LIGER_KERNEL_IMPL, the pin."""
    import liger_kernel
    import liger_kernel.functional as lf

    x, w = torch.randn(3, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    want = lf.rms_norm(x, w)
    for impl in (
        "nvidia-triton",
        "nvidia-cutile",
        "nvidia-cutedsl",
        "ascend-triton",
        "triton",
        "cutile",
        "liger_cpp",
    ):
        torch.testing.assert_close(lf.rms_norm(x, w, impl=impl), want, rtol=0, atol=0)
        torch.testing.assert_close(lf.rms_norm(x, w, backend=impl), want, rtol=0, atol=0)
    for mode in ("default", "static_persistent", "chunked", "multi_wave_cached", "standard"):
        torch.testing.assert_close(lf.rms_norm(x, w, mode=mode), want, rtol=0, atol=0)
    with pytest.raises(ValueError, match="argument 'impl'.*'nvidia-tritn'"):
        lf.rms_norm(x, w, impl="nvidia-tritn")
    with pytest.raises(ValueError, match="argument 'impl'.*'cuda'"):
        lf.softmax(x, backend="cuda")
    with pytest.raises(ValueError, match="rms_norm: argument 'mode'.*'fast'"):
        lf.rms_norm(x, w, mode="fast")

    monkeypatch.setenv("LIGER_KERNEL_IMPL", "tilelang")
    with pytest.raises(ValueError, match="LIGER_KERNEL_IMPL: .*'tilelang'"):
        lf.rms_norm(x, w)
    torch.testing.assert_close(lf.rms_norm(x, w, impl="cutedsl"), want, rtol=0, atol=0)  # argument first
    monkeypatch.setenv("LIGER_KERNEL_IMPL_RMS_NORM", "cutile")  # the per-op variable before the global
    torch.testing.assert_close(lf.rms_norm(x, w), want, rtol=0, atol=0)
    with pytest.raises(ValueError, match="LIGER_KERNEL_IMPL: "):
        lf.softmax(x)  # another op reads the global one
    monkeypatch.setenv("LIGER_KERNEL_IMPL_SOFTMAX", "bogus")
    with pytest.raises(ValueError, match="LIGER_KERNEL_IMPL_SOFTMAX: .*'bogus'"):
        lf.softmax(x)
    monkeypatch.delenv("LIGER_KERNEL_IMPL")
    monkeypatch.delenv("LIGER_KERNEL_IMPL_SOFTMAX")
    monkeypatch.setenv("LIGER_KERNEL_BACKEND", "nope")  # the legacy spelling
    with pytest.raises(ValueError, match="LIGER_KERNEL_BACKEND: .*'nope'"):
        lf.softmax(x)
    monkeypatch.delenv("LIGER_KERNEL_BACKEND")

    assert liger_kernel.get_impl() is None
    liger_kernel.set_impl("cutile")
    assert liger_kernel.get_impl() == "nvidia-cutile" == liger_kernel.get_backend()
    torch.testing.assert_close(lf.softmax(x), torch.softmax(x, -1))
    with pytest.raises(ValueError, match="set_impl's 'name'.*'gpu'"):
        liger_kernel.set_backend("gpu")
    assert liger_kernel.get_impl() == "nvidia-cutile"  # a rejected name leaves the pin
    liger_kernel.set_impl(None)
    assert liger_kernel.get_impl() is None
    assert (
        liger_kernel.available_impls("rms_norm") == ["liger_cpp"] == liger_kernel.available_backends("geglu")
    )
    assert liger_kernel.available_impls("no_such_op") == []
    assert liger_kernel.functional is lf


def test_configure_warns_and_configures_nothing():
    """Where Liger-Kernel's optional native package is absent, configure warns and returns False;
    liger_cpp's kernels need no configuring, so it always does that here."""
    import dataclasses

    from liger_kernel.ops.configure import FusedLinearCrossEntropyConfig, MoEConfig, configure

    flsce = FusedLinearCrossEntropyConfig(max_tokens=8192, hidden_size=4096, local_vocab_size=151936)
    moe = MoEConfig(max_tokens=8192, hidden_size=2048, num_experts=64, top_k=8, num_hosts=1, gpus_per_host=8)
    assert (flsce.group, flsce.tiles_per_reduce, moe.group, moe.max_inflight) == (None, 1, None, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        flsce.max_tokens = 1
    with pytest.warns(UserWarning, match="nothing was configured"):
        assert configure(flsce=flsce, moe=moe) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning):
            configure()


def test_functional_compiles_whole():
    """Liger-Kernel's dispatcher is torch.compiler.disable'd (a graph break per call); here the
    implementation check is plain Python over the arguments and the environment, so these compile
    in one graph and equal the eager calls."""
    import liger_kernel.functional as lf

    torch._dynamo.reset()
    g = torch.Generator().manual_seed(5)
    x, w, t = _r(g, 6, 7), _r(g, 11, 7), torch.randint(0, 11, (6,), generator=g)
    n = _r(g, 7)
    calls = {
        "rms_norm": (lambda x, n: lf.rms_norm(x, n, 1e-5, offset=1.0, impl="cutile", mode="default"), (x, n)),
        "swiglu": (lambda a, b: lf.swiglu(a, b, 0.5, 2.0, backend="triton"), (x, x.flip(0))),
        "cross_entropy": (lambda z, t: lf.cross_entropy(z, t, None, -100, 0.0, 0.0, "sum"), (x @ w.T, t)),
        "fused_linear_cross_entropy": (
            lambda x, w, t: lf.fused_linear_cross_entropy(x, w, t, return_token_accuracy=True),
            (x, w, t),
        ),
    }
    for name, (fn, args) in calls.items():
        want = fn(*args)
        got = torch.compile(fn, fullgraph=True, backend="aot_eager")(*args)
        for a, b in zip(_flat(got), _flat(want)):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=lambda m, name=name: f"{name}: {m}")
