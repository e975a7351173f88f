"""GRPO and its variants on materialised logits (liger_cpp.transformers.grpo_loss.triton_grpo_loss, Liger's
triton_grpo_loss / GrpoLossFunction) against an independent pure-PyTorch reference written from
Liger-Kernel 0.8.5's ops/grpo_loss.py (the Triton forward and backward kernels, _reduce_loss and
_compute_dapo_normalizer) and transformers/grpo_loss.py (VESPO's phi_seq), differentiated by autograd,
in float64 and in float32 (the low-precision baseline) on the same, already rounded, logits.

Liger's semantics: lp = log_softmax(logits[:, l] / T)[completion_ids[:, l]]; masked tokens are skipped
(loss, KL, clip flag and gradient 0); old_logp None means old = lp detached; the upstream gradient of
the KL and clip outputs and of the metrics is ignored (only the loss takes one). The old log-probs
are the float64 log-probs shifted so that every ratio lies well inside or well outside the clipping
range (log-ratios in +-[0, 0.1] or +-[0.5, 1]): rounding never moves a token across a bound.
"""

import ast
import inspect
import json
import math
import os

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from rl_reference import tol_close

from liger_cpp.transformers.grpo_loss import triton_grpo_loss

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")
SEQ_OK = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")


def _token_logps(logits, ids, temperature):
    lps = torch.log_softmax(logits[:, :-1] / temperature, -1)
    return lps.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def _full(like, cond, a, b):
    return torch.where(cond, torch.full_like(like, a), torch.full_like(like, b))


def _as_2d(v, dtype):
    v = v.to(dtype)
    return v.unsqueeze(-1) if v.dim() == 1 else v


@torch.no_grad()
def phi_seq_reference(lp, old, mask, adv, vllm, k_pos, lambda_pos, k_neg, lambda_neg):
    """VESPO's detached sequence weight (B, 1), as Liger's wrapper computes it: get_gamma_weights on the
    masked log-ratios, plus log(vllm_is_ratio) summed over all L positions of a (B, L) ratio, masked or
    not (get_gamma_weights applies no mask to it)."""
    m = mask.to(lp.dtype)
    log_ratio = torch.zeros_like(lp) if old is None else (lp - old.to(lp.dtype)) * (m != 0)
    s = (log_ratio.clamp(-20.0, 20.0) * m).sum(-1, keepdim=True)
    if vllm is not None:
        s = s + _as_2d(vllm, lp.dtype).log().clamp(math.log(1e-8), 20.0).sum(-1, keepdim=True)
    log_w = s.clamp(math.log(1e-8), 20.0)
    nonneg = adv.to(lp.dtype).unsqueeze(-1) >= 0
    k = _full(log_w, nonneg, k_pos, k_neg)
    lam = _full(log_w, nonneg, lambda_pos, lambda_neg).clamp(min=1e-4)
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


# Liger 0.8.5's triton_grpo_loss defaults: the reference's, for the options a test leaves out
LIGER_DEFAULTS = dict(
    temperature=0.9, beta=0.04, eps_low=0.2, eps_high=0.4, loss_type="dapo", max_completion_length=None,
    importance_sampling_level="token", sapo_temperature_pos=1.0, sapo_temperature_neg=1.05,
    vllm_is_ratio=None, delta=None, use_bias_correction_kl=False, num_items_in_batch=None,
    vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0, vespo_lambda_neg=2.0,
)  # fmt: skip


def reference(logits, old_logp, ref_logp, completion_ids, advantages, completion_mask=None, **kw):
    """(per_token_loss, per_token_kl or None, is_clipped) masked, and (loss, kl_mean, clip_ratio)
    reduced, in logits' dtype (float64 or float32); kw: triton_grpo_loss's options."""
    assert set(kw) <= set(LIGER_DEFAULTS), set(kw) - set(LIGER_DEFAULTS)
    o = {**LIGER_DEFAULTS, **kw}
    temperature, beta, eps_low, eps_high, delta = (
        o[k] for k in ("temperature", "beta", "eps_low", "eps_high", "delta")
    )
    loss_type, vllm_is_ratio, num_items_in_batch = o["loss_type"], o["vllm_is_ratio"], o["num_items_in_batch"]
    acc = logits.dtype
    B, L = completion_ids.shape
    lp = _token_logps(logits, completion_ids, temperature)
    m = torch.ones_like(lp) if completion_mask is None else completion_mask.to(acc)
    on = m != 0
    old = lp.detach() if old_logp is None else old_logp.to(acc)
    A = advantages.to(acc).unsqueeze(1)
    log_ratio = lp - old
    if o["importance_sampling_level"] == "token":
        c1 = torch.exp(log_ratio)
    else:
        c1 = torch.exp((log_ratio * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0))
    clipped = torch.zeros(B, L, dtype=torch.bool, device=lp.device)
    if loss_type == "cispo":
        ptl = -c1.clamp(max=eps_high).detach() * A * lp
        clipped = (c1 > eps_high) & (A > 0)
    elif loss_type == "sapo":
        tau = _full(A, A > 0, o["sapo_temperature_pos"], o["sapo_temperature_neg"])
        ptl = -(torch.sigmoid(tau * (c1 - 1.0)) * 4.0 / tau) * A
    elif loss_type == "vespo":
        vespo = [o[f"vespo_{k}"] for k in ("k_pos", "lambda_pos", "k_neg", "lambda_neg")]
        phi = phi_seq_reference(lp, old_logp, m, advantages, vllm_is_ratio, *vespo)
        ptl = -phi * A * lp
    else:
        c2 = c1.clamp(1.0 - eps_low, 1.0 + eps_high)
        c1_loss = c1.clamp(max=delta) if delta is not None else c1
        ptl = -torch.minimum(c1_loss * A, c2 * A)
        clipped = ((c1 < 1.0 - eps_low) & (A < 0)) | ((c1 > 1.0 + eps_high) & (A > 0))
    if vllm_is_ratio is not None and loss_type != "vespo":
        ptl = ptl * _as_2d(vllm_is_ratio, acc)
    ptl = ptl.expand(B, L)
    kl = None
    if beta != 0.0:
        d = ref_logp.to(acc) - lp
        kl = torch.exp(d) - d - 1.0
        if o["use_bias_correction_kl"]:
            kl = kl * c1  # the ratio before the delta clamp
        ptl = ptl + beta * kl
    zero = torch.zeros((), dtype=acc, device=lp.device)
    ptl = torch.where(on, ptl, zero)
    kl = None if kl is None else torch.where(on, kl, zero)
    clipped = (clipped.expand(B, L) & on).to(acc)
    n = m.sum().clamp(min=1.0)
    if loss_type in ("grpo", "sapo"):
        loss = ((ptl * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = (ptl * m).sum() / n
    elif loss_type == "dr_grpo":
        loss = (ptl * m).sum() / (B * (o["max_completion_length"] or L))
    elif loss_type in ("dapo", "cispo", "vespo"):
        norm = n if num_items_in_batch is None else max(float(num_items_in_batch), 1.0)
        loss = (ptl * m).sum() / norm
    else:  # luspo
        loss = (ptl * m.sum(-1, keepdim=True)).mean()
    kl_mean = None if kl is None else (kl * m).sum() / n
    return (ptl, kl, clipped), (loss, kl_mean, (clipped * m).sum() / n)


SEQ_OFFSETS = [0.02, 0.7, -0.75, -0.04, 0.9, -0.6]
ADVANTAGES = [0.8, -1.1, 0.6, -0.3, 1.4, -0.7]


def _make(device, dtype, B=3, L=7, V=123, level="token", temperature=1.0, mask="holes", seed=0):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 is CPU-only")
    if dtype == torch.float16 and device == "cpu":
        pytest.skip("float16 is CUDA-only")
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(B, L + 1, V, generator=gen, dtype=torch.float64) * 2).to(dtype)
    ids = torch.randint(0, V, (B, L), generator=gen)
    lp64 = _token_logps(logits.double(), ids, temperature)
    if level == "token":
        sign = torch.where(torch.rand(B, L, generator=gen) < 0.5, -1.0, 1.0).double()
        near = torch.rand(B, L, generator=gen) < 0.5
        mag = torch.where(
            near, 0.1 * torch.rand(B, L, generator=gen), 0.5 + 0.5 * torch.rand(B, L, generator=gen)
        )
        shift = sign * mag.double()
    else:  # per-sequence offsets well inside / outside the range, small token noise
        offs = torch.tensor(SEQ_OFFSETS[:B], dtype=torch.float64)
        shift = offs.unsqueeze(1) + 0.02 * (torch.rand(B, L, generator=gen).double() - 0.5)
    old = (lp64 - shift).float()
    ref = (lp64 + 0.3 * torch.randn(B, L, generator=gen, dtype=torch.float64)).float()
    adv = torch.tensor(ADVANTAGES[:B], dtype=torch.float32)
    m = None
    if mask != "none":
        m = torch.ones(B, L)
        m[0, -2:] = 0  # padding
        m[-1, 2] = 0  # a hole
        if mask == "zero_row":
            m[1 % B] = 0
        m = {"int": m.int(), "bool": m.bool()}.get(mask, m)
    to = lambda t: None if t is None else t.to(device)  # noqa: E731
    return dict(logits=logits.to(device), old=to(old), ref=to(ref), ids=to(ids), adv=to(adv), mask=to(m))


def _vllm(shape, B, L, device):
    if shape is None:
        return None
    gen = torch.Generator().manual_seed(7)
    dims = {"B": (B,), "B1": (B, 1), "BL": (B, L)}[shape]
    return torch.exp(0.3 * torch.randn(*dims, generator=gen)).to(device)


def _args(d):
    """(old_logp, ref_logp, completion_ids, advantages, completion_mask) of _make's data."""
    return d["old"], d["ref"], d["ids"], d["adv"], d["mask"]


def _run(device, dtype, reduce, *, B=3, L=7, V=123, mask="holes", vllm=None, with_old=True, **kw):
    """triton_grpo_loss against the reference in float64 and float32: every output, and the gradient
    of sum(g * per_token_loss) (reduce=False, random g) or of 2.5 x loss (reduce=True)."""
    kw.setdefault("temperature", 1.0)
    level = kw.get("importance_sampling_level", "token")
    d = _make(device, dtype, B, L, V, level, kw["temperature"], mask)
    kw["vllm_is_ratio"] = _vllm(vllm, B, L, device)
    old = d["old"] if with_old else None
    beta = kw.get("beta", 0.04)
    args = (old, *_args(d)[1:])
    g = torch.randn(B, L, generator=torch.Generator().manual_seed(3)).to(device)

    def objective(out):
        return (out[0][0] * g).sum() if not reduce else out[1][0] * 2.5

    x = d["logits"].clone().requires_grad_(True)
    out = triton_grpo_loss(x, *args, inplace=False, reduce=reduce, **kw)
    if reduce:
        loss, metrics = out
        assert loss.shape == () and len(metrics) == (2 if beta != 0.0 else 1)
        out = (None, (loss, metrics[0] if beta != 0.0 else None, metrics[-1]))
    else:
        assert len(out) == 3
        out = (tuple(out), None)
    objective(out).backward()
    refs = {}
    for rdt in (torch.float64, torch.float32):
        xr = d["logits"].detach().to(rdt).requires_grad_(True)
        r = reference(xr, *args, **kw)
        objective(r).backward()
        refs[rdt] = (r, xr.grad)
    (r64, g64), (rlo, glo) = refs[torch.float64], refs[torch.float32]
    if not reduce:
        out = out[0]
        for name, o, e, lo in zip(("per_token_loss", "per_token_kl"), out, r64[0], rlo[0]):
            if e is None:
                assert o is None, f"{name}: expected None (beta == 0)"
                continue
            assert o.dtype == torch.float32 and o.shape == (B, L), (name, o.dtype, o.shape)
            tol_close(name, o, e, lo, torch.float32)  # float32 results of exactly known logits
        assert torch.equal(out[2].float(), r64[0][2].float()), (out[2], r64[0][2])
        if d["mask"] is not None:
            off = d["mask"] == 0
            assert (out[0][off] == 0).all() and (out[2][off] == 0).all()
            assert out[1] is None or (out[1][off] == 0).all()
    else:
        loss, kl_mean, clip = out[1]
        # a mean of per-token terms that cancel: the rounding floor scales with the terms
        mag = r64[0][0].abs().max().item()
        tol_close("loss", loss, r64[1][0], rlo[1][0], torch.float32, magnitude=mag)
        if beta != 0.0:
            tol_close("kl_mean", kl_mean, r64[1][1], rlo[1][1], torch.float32)
        torch.testing.assert_close(clip.float(), r64[1][2].float(), rtol=1e-6, atol=1e-7)
    assert x.grad.dtype == dtype and x.grad.shape == x.shape
    tol_close("dlogits", x.grad, g64, glo, dtype)
    assert (x.grad[:, -1] == 0).all()
    if d["mask"] is not None:
        assert (x.grad[:, :-1][d["mask"] == 0] == 0).all()
    assert torch.equal(x.detach(), d["logits"])  # inplace=False leaves logits alone
    return x.grad


def _type_cases():
    variants = [(torch.float32, 0.0, 1.0), (torch.float32, 0.04, 1.0), (torch.float32, 0.04, 0.7)]
    variants += [(torch.bfloat16, 0.04, 0.7), (torch.float64, 0.04, 0.7)]
    variants += [(torch.float16, 0.04, 0.7)] if CUDA_OK else []
    for lt in LOSS_TYPES:
        for level in ("token", "sequence") if lt in SEQ_OK else ("token",):
            for dtype, beta, temperature in variants:
                yield dtype, beta, temperature, lt, level


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,beta,temperature,loss_type,level", list(_type_cases()), ids=str)
@pytest.mark.parametrize("reduce", [False, True])
def test_loss_types(device, dtype, beta, temperature, loss_type, level, reduce):
    extra = {"eps_high": 1.3} if loss_type == "cispo" else {}  # a bound away from the ratios
    _run(device, dtype, reduce, loss_type=loss_type, importance_sampling_level=level, beta=beta,
         temperature=temperature, **extra)  # fmt: skip


def _opt(spec):
    """'grpo seq delta=1.5 vllm=BL' -> the keywords of _run: the loss type, 'seq' for sequence-level
    importance sampling, then name=value (a Python literal, else a string)."""
    lt, *rest = spec.split()
    out = {"loss_type": lt}
    for tok in rest:
        if tok == "seq":
            out["importance_sampling_level"] = "sequence"
            continue
        k, v = tok.split("=")
        try:
            out[k] = ast.literal_eval(v)
        except ValueError:
            out[k] = v
    return out


# mask: holes (default), none, zero_row (a row all masked), int / bool (the holes' mask in those dtypes);
# vllm: the shape of vllm_is_ratio (B,), (B, 1) or (B, L); with_old=False: old_logp None
OPTIONS = [
    "grpo delta=1.5", "dapo seq delta=1.5", "luspo seq delta=1.5 beta=0.0",
    "bnpo delta=1.5 eps_low=0.3 eps_high=0.28 temperature=0.7",
    "dapo use_bias_correction_kl=True beta=0.1", "grpo seq use_bias_correction_kl=True beta=0.1",
    "dapo use_bias_correction_kl=True with_old=False", "bnpo seq use_bias_correction_kl=True with_old=False",
    "grpo seq use_bias_correction_kl=True delta=1.5 beta=0.1",
    "dapo vllm=B", "grpo seq vllm=B1", "bnpo seq vllm=BL use_bias_correction_kl=True",
    "luspo vllm=BL temperature=0.7", "cispo vllm=BL eps_high=1.3",
    "sapo vllm=B1 sapo_temperature_pos=0.8 sapo_temperature_neg=1.3",
    "vespo vllm=B", "vespo vllm=BL temperature=0.7", "vespo vllm=BL mask=zero_row", "vespo vllm=BL mask=none",
    "vespo vespo_k_pos=1.5 vespo_lambda_pos=2.0 vespo_k_neg=2.5 vespo_lambda_neg=1.0",
    "dapo num_items_in_batch=200", "cispo num_items_in_batch=77 eps_high=5.0", "vespo num_items_in_batch=40",
    "grpo num_items_in_batch=200", "dr_grpo max_completion_length=11", "dr_grpo seq max_completion_length=20",
    "bnpo with_old=False", "grpo seq with_old=False", "cispo with_old=False eps_high=1.3",
    "sapo with_old=False", "vespo with_old=False",
    "dapo mask=none", "grpo seq mask=none", "vespo mask=none vllm=B1",
    "dapo mask=zero_row", "grpo seq mask=zero_row beta=0.1", "luspo seq mask=zero_row", "luspo mask=zero_row",
    "sapo mask=zero_row", "bnpo mask=int", "dapo seq mask=bool",
    "dapo B=1", "grpo seq B=1", "vespo B=1",
    "dapo B=2 L=5 V=2049 temperature=0.7", "grpo seq L=12 V=2049",
    "dapo temperature=1.3 eps_low=0.3 eps_high=0.28",
]  # fmt: skip
BF16_OPTIONS = [
    "dapo seq delta=1.5", "grpo seq use_bias_correction_kl=True beta=0.1", "cispo vllm=BL eps_high=1.3",
    "vespo vllm=B", "grpo seq mask=zero_row beta=0.1", "dapo B=2 L=5 V=2049 temperature=0.7",
]  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", OPTIONS)
@pytest.mark.parametrize("reduce", [False, True])
def test_options(device, spec, reduce):
    _run(device, torch.float32, reduce, **_opt(spec))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("spec", BF16_OPTIONS)
@pytest.mark.parametrize("reduce", [False, True])
def test_options_bfloat16(device, spec, reduce):
    _run(device, torch.bfloat16, reduce, **_opt(spec))


@pytest.mark.skipif(not CUDA_OK, reason="CUDA kernels")
@pytest.mark.parametrize("device", ["cuda"])
@pytest.mark.parametrize("spec", ["dapo", "grpo seq", "vespo vllm=B"])
@pytest.mark.parametrize("reduce", [False, True])
def test_large_vocab_cuda(device, spec, reduce):
    _run(device, torch.bfloat16, reduce, B=2, L=3, V=151936, temperature=0.7, **_opt(spec))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", [False, True])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_inplace(device, reduce, level):
    """inplace=True (Liger's default): the gradient is written into logits' storage (its version
    counter moves); it equals the out-of-place gradient."""
    want = _run(device, torch.float32, reduce, loss_type="grpo", importance_sampling_level=level)
    d = _make(device, torch.float32, level=level)
    x = d["logits"].clone().requires_grad_(True)
    out = triton_grpo_loss(x, *_args(d), temperature=1.0, loss_type="grpo", importance_sampling_level=level,
                           reduce=reduce)  # fmt: skip
    v0 = x._version
    g = torch.randn(3, 7, generator=torch.Generator().manual_seed(3)).to(device)
    ((out[0] * 2.5) if reduce else (out[0] * g).sum()).backward()
    assert x._version > v0
    torch.testing.assert_close(x.grad, want, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(x.detach(), want, rtol=1e-6, atol=1e-8)
    assert not torch.equal(x.detach(), d["logits"])


def test_signature_is_liger():
    # names, order and defaults of Liger-Kernel 0.8.5's triton_grpo_loss (compat's record of it)
    ref = json.load(open(os.path.join(os.path.dirname(__file__), "..", "compat", "liger_kernel",
                                      "_reference_signatures.json")))  # fmt: skip
    want = ref["modules"]["liger_kernel.transformers.grpo_loss"]["triton_grpo_loss"]["params"]
    got = inspect.signature(triton_grpo_loss).parameters.values()
    assert [(p.name, None if p.default is p.empty else repr(p.default)) for p in got] == [
        (w[0], w[1] if len(w) > 1 else None) for w in want
    ]


COMPAT_CASES = ["dapo vllm=B1", "grpo seq use_bias_correction_kl=True delta=1.5", "vespo"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", [False, True])
@pytest.mark.parametrize("spec", COMPAT_CASES)
def test_compat_grpo_loss_function(device, reduce, spec):
    """Liger's GrpoLossFunction.apply and triton_grpo_loss through the compatibility package, in Liger's
    positional order, equal liger_cpp's triton_grpo_loss with keywords."""
    from compat_env import ensure_compat

    ensure_compat()
    import liger_kernel.ops as kops
    from liger_kernel.ops.grpo_loss import GrpoLossFunction
    from liger_kernel.transformers.grpo_loss import triton_grpo_loss as compat_triton_grpo_loss

    assert kops.GrpoLossFunction is GrpoLossFunction
    o = _opt(spec)
    level = o.get("importance_sampling_level", "token")
    d = _make(device, torch.float32, level=level, temperature=0.8)
    vllm = _vllm(o.get("vllm"), 3, 7, device)
    bias, delta = o.get("use_bias_correction_kl", False), o.get("delta")
    phi = None
    if o["loss_type"] == "vespo":  # the Function takes VESPO's weights precomputed (Liger's wrapper's)
        lp = _token_logps(d["logits"].float(), d["ids"], 0.8)
        phi = phi_seq_reference(lp, d["old"], d["mask"], d["adv"], None, 2.0, 3.0, 3.0, 2.0)
    args = _args(d)
    head = (0.8, 0.04, 0.2, 0.4, False, o["loss_type"], None)  # temperature ... max_completion_length
    tail = (1.0, 1.05, vllm, delta, bias, None)  # sapo temperatures ... num_items_in_batch
    outs, grads = [], []
    for i, call in enumerate((
        lambda x: GrpoLossFunction.apply(x, *args, *head, reduce, level, *tail, phi),
        lambda x: compat_triton_grpo_loss(x, *args, *head, level, reduce, *tail),
        lambda x: triton_grpo_loss(
            x, *args, temperature=0.8, beta=0.04, eps_low=0.2, eps_high=0.4, inplace=False,
            loss_type=o["loss_type"], importance_sampling_level=level, reduce=reduce, vllm_is_ratio=vllm,
            delta=delta, use_bias_correction_kl=bias,
        ),
    )):  # fmt: skip
        x = d["logits"].clone().requires_grad_(True)
        out = call(x)
        if reduce:  # the Function: (loss, kl_mean or None, clip_ratio); the wrappers: (loss, [kl, clip])
            out = list(out) if i == 0 else [out[0], *out[1]]
        assert len(out) == 3
        ((out[0] * 2.5) if reduce else (out[0] * d["ids"].float().sin()).sum()).backward()
        outs.append(out)
        grads.append(x.grad)
    # vespo: the Function's phi_seq is this file's (from PyTorch's float32 log-probs), not the op's
    rtol, atol = (1e-4, 1e-6) if phi is not None else (1e-6, 1e-7)
    for o2, g in zip(outs[1:], grads[1:]):
        for a, b in zip(o2, outs[0]):
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
        torch.testing.assert_close(g, grads[0], rtol=rtol, atol=atol * 0.1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_torch_compile_fullgraph(device, level):
    torch._dynamo.reset()
    d = _make(device, torch.float32, level=level, temperature=0.7)

    def f(x):
        loss, metrics = triton_grpo_loss(
            x, *_args(d), temperature=0.7, loss_type="grpo", importance_sampling_level=level, inplace=False,
            reduce=True,
        )  # fmt: skip
        return loss * 2.5, metrics[0], metrics[1]

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    x = d["logits"].clone().requires_grad_(True)
    out = cf(x)
    out[0].backward()
    g = x.grad.clone()
    x.grad = None
    e = f(x)
    e[0].backward()
    for a, b in zip(out, e):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(g, x.grad, rtol=1e-5, atol=1e-8)
    assert g.abs().max() > 0


SEQ_ERR = "(?i)sequence|importance_sampling_level"
BOTH = (ValueError, RuntimeError)
# Liger's ValueErrors (GrpoLossFunction.forward and triton_grpo_loss raise them), then the shape errors
BAD_OPTIONS = {
    "unknown_loss_type": ({"loss_type": "ppo"}, ValueError, "loss_type"),
    "cispo_sequence": ({"loss_type": "cispo", "importance_sampling_level": "sequence"}, ValueError, SEQ_ERR),
    "sapo_sequence": ({"loss_type": "sapo", "importance_sampling_level": "sequence"}, ValueError, SEQ_ERR),
    "vespo_sequence": ({"loss_type": "vespo", "importance_sampling_level": "sequence"}, ValueError, SEQ_ERR),
    "cispo_delta": ({"loss_type": "cispo", "delta": 1.5}, ValueError, "delta"),
    "sapo_temperature_pos": ({"loss_type": "sapo", "sapo_temperature_pos": 0.0}, ValueError, "ature_pos"),
    "sapo_temperature_neg": ({"loss_type": "sapo", "sapo_temperature_neg": -1.0}, ValueError, "ature_neg"),
    "unknown_level": ({"importance_sampling_level": "foo"}, (ValueError, AssertionError), SEQ_ERR),
    "no_ref_logp": ({"ref": None}, (*BOTH, AssertionError), "ref_logp"),  # beta != 0 needs it
    "advantages_length": ({"adv": lambda a: a[:2]}, BOTH, "advantages"),
    "completion_ids_length": ({"ids": lambda t: t[:, :6]}, BOTH, "completion_ids"),
    "completion_ids_rows": ({"ids": lambda t: t[:2]}, BOTH, "completion_ids"),
    "logits_2d": ({"logits": lambda t: t[0]}, BOTH, "logits"),
    "logits_flat": ({"logits": lambda t: t.reshape(3, -1)}, BOTH, "logits"),
}  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(BAD_OPTIONS))
def test_bad_inputs(device, case):
    bad, errors, match = BAD_OPTIONS[case]
    d = _make(device, torch.float32)
    kw = dict(bad)
    for k in ("logits", "ref", "ids", "adv"):
        if k in kw:
            v = kw.pop(k)
            d[k] = v(d[k]) if callable(v) else v
    with pytest.raises(errors, match=match):
        triton_grpo_loss(d["logits"], *_args(d), **kw)


@pytest.mark.parametrize(
    "loss_type,level", [(lt, "token") for lt in LOSS_TYPES] + [(lt, "sequence") for lt in SEQ_OK]
)
@pytest.mark.parametrize("extra", ["", "vllm=B1 use_bias_correction_kl=True", "delta=1.5", "with_old=False"])
def test_reference_matches_chunked_ppo_loss_fn(loss_type, level, extra):
    """The reference against Liger's chunked ppo_loss_fn (liger_cpp's grpo_ppo_loss_fn: the published
    formulas written a second way) on its per-token log-probs, on unmasked data (where the chunked and
    the Triton semantics agree), in float64: loss, metrics and gradients."""
    from liger_cpp.chunked_loss.grpo_loss import grpo_ppo_loss_fn

    o = _opt(f"{loss_type} {extra}")
    if "delta" in o and loss_type in ("cispo", "sapo", "vespo"):
        pytest.skip("delta is for the standard clipped losses")
    d = _make("cpu", torch.float64, level=level, temperature=0.7, mask="none")
    vllm = _vllm(o.pop("vllm", None), 3, 7, "cpu")
    old = d["old"] if o.pop("with_old", True) else None
    vllm = None if vllm is None else vllm.double()
    eps_high = 1.3 if loss_type == "cispo" else 0.4
    kw = dict(
        beta=0.04, eps_low=0.2, eps_high=eps_high, importance_sampling_level=level, vllm_is_ratio=vllm, **o
    )
    x = d["logits"].clone().requires_grad_(True)
    _, (loss, kl_mean, clip) = reference(x, old, d["ref"], d["ids"], d["adv"], None, temperature=0.7, **kw)
    loss.backward()
    y = d["logits"].clone().requires_grad_(True)
    lp = _token_logps(y, d["ids"], 0.7)
    ones = torch.ones_like(lp)
    kw = {k.replace("eps_", "epsilon_"): v for k, v in kw.items()}
    loss2, metrics = grpo_ppo_loss_fn(lp, ones, d["adv"].double(), ones, d["ref"].double(), old,
                                      max_completion_length=7, **kw)  # fmt: skip
    loss2.backward()
    torch.testing.assert_close(loss, loss2, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(kl_mean, metrics[0], rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(clip, metrics[1].double(), rtol=0, atol=0)
    torch.testing.assert_close(x.grad, y.grad, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", [True, False])
def test_opcheck(device, reduce):
    # The ops' schemas, fake kernels and autograd registration (forward; functional and in-place
    # backward: the latter declares its write to logits).
    d = _make(device, torch.float32, temperature=0.7)
    old, ref, ids, adv, mask = _args(d)
    opts = ("grpo", "token", 0.04, 0.2, 0.4, None, 0.7, None, False, 1.0, 1.05, 2.0, 3.0, 3.0, 2.0)
    x = d["logits"].clone().requires_grad_(True)
    fwd = torch.ops.liger.grpo_logits_fwd
    torch.library.opcheck(fwd, (x, ids, adv, mask, old, ref, None, None, None, *opts, reduce, False))
    _, _, _, logp, grad_scale, stats = fwd(
        x.detach(), ids, adv, mask, old, ref, None, None, None, *opts, reduce
    )
    grad = torch.full((), 1.5, device=device) if reduce else torch.randn(logp.shape, device=device)
    bwd_args = (grad, x.detach().clone(), ids, adv, logp, grad_scale, stats, mask, old, ref, None, None, None)
    torch.library.opcheck(torch.ops.liger.grpo_logits_bwd, (*bwd_args, *opts, reduce))
    torch.library.opcheck(torch.ops.liger.grpo_logits_bwd_, (*bwd_args, *opts, reduce))
    # the in-place backward writes what the functional one returns
    z = x.detach().clone()
    torch.ops.liger.grpo_logits_bwd_(grad, z, *bwd_args[2:], *opts, reduce)
    torch.testing.assert_close(z, torch.ops.liger.grpo_logits_bwd(*bwd_args, *opts, reduce), rtol=0, atol=0)
