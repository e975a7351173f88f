"""GRPO and its variants (liger_cpp.chunked_loss.LigerFusedLinearGRPOLoss, liger_cpp.ops.fused_linear_grpo)
against the independent pure-PyTorch reference of tests/rl_reference.py (Liger's published
ppo_loss_fn with full logits, differentiated by autograd), in float64 and in the input's precision.

The old log-probs are the policy's float64 log-probs shifted so that every importance ratio lies
either well inside the clipping range or well outside it (log-ratios in +-[0, 0.1] or +-[0.5, 1.0]):
a 16-bit run's rounding cannot move a token across a clipping bound, which would change the
gradient's support and compare two different functions.
"""

import inspect
import math

import pytest
import torch
from conftest import CUDA_OK, DEVICES
from rl_reference import acc_ulps, grpo_reference, leaf, token_logps, tol_close

from liger_cpp.chunked_loss import LigerFusedLinearGRPOLoss, liger_fused_linear_grpo
from liger_cpp.ops.fused_linear_grpo import LOSS_TYPES, fused_linear_grpo

SEQ_OK = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")


def _make(
    device, dtype, B=3, T=47, H=31, V=123, bias=True, level="token", temperature=1.0, zero_row=False, seed=0
):
    if dtype == torch.float64 and device != "cpu":
        pytest.skip("float64 is CPU-only: the CUDA row kernels take float32, float16 and bfloat16")
    gen = torch.Generator().manual_seed(seed)

    def rn(*s, scale=1.0):
        return torch.randn(*s, generator=gen, dtype=torch.float64) * scale

    x, w = rn(B, T, H), rn(V, H, scale=2.0 / math.sqrt(H))
    b = rn(V, scale=0.5) if bias else None
    ids = torch.randint(0, V, (B, T), generator=gen)
    mask = torch.ones(B, T)
    mask[0, -9:] = 0  # padded completions
    mask[-1, -2:] = 0
    if B > 2:
        mask[1, 20:23] = 0  # and holes (tool-call masks)
    if zero_row:
        mask[1 if B > 1 else 0] = 0
    adv = torch.tensor([0.8, -1.1, 0.6, -0.3, 1.4][:B] + [0.5] * max(0, B - 5), dtype=torch.float32)
    lp64 = token_logps(x, w, b, ids, temperature)
    sign = torch.where(torch.rand(B, T, generator=gen) < 0.5, -1.0, 1.0).double()
    if level == "token":
        near = torch.rand(B, T, generator=gen) < 0.5
        mag = torch.where(
            near, 0.1 * torch.rand(B, T, generator=gen), 0.5 + 0.5 * torch.rand(B, T, generator=gen)
        )
        shift = sign * mag.double()
    else:  # per-sequence offsets well inside / outside [log 0.8, log 1.2], small token noise
        offs = torch.tensor([0.02, 0.7, -0.75, -0.04, 0.9][:B] + [0.0] * max(0, B - 5), dtype=torch.float64)
        shift = offs.unsqueeze(1) + 0.02 * (torch.rand(B, T, generator=gen).double() - 0.5)
    old = (lp64 - shift).float()
    ref_lp = (lp64 + 0.3 * rn(B, T)).float()
    ref_head = (
        rn(B, T, H + 2),
        rn(V, H + 2, scale=2.0 / math.sqrt(H + 2)),
        rn(V, scale=0.5) if bias else None,
    )
    to = lambda t: None if t is None else t.to(device)  # noqa: E731
    xd = x.to(device, dtype).requires_grad_(True)
    wd = w.to(device, dtype).requires_grad_(True)
    bd = b.to(device, dtype).requires_grad_(True) if bias else None
    refs = tuple(None if t is None else t.to(device, dtype) for t in ref_head)
    return dict(
        x=xd,
        w=wd,
        b=bd,
        ids=to(ids),
        mask=to(mask),
        adv=to(adv),
        old=to(old),
        ref_lp=to(ref_lp),
        ref_head=refs,
    )


def _run(
    device,
    dtype,
    *,
    ref="given",
    with_old=True,
    vllm_shape=None,
    num_items=None,
    chunk_rows=0,
    bias=True,
    frozen_w=False,
    grad_out=1.0,
    B=3,
    T=47,
    zero_row=False,
    dw_ulps=None,
    **opts,
):
    """Runs fused_linear_grpo and the reference in float64 and in the input's precision; compares the
    loss, every metric, the log-probs and the gradients of input, weight and bias."""
    level = opts.get("importance_sampling_level", "token")
    temperature = opts.get("temperature", 1.0)
    d = _make(device, dtype, B=B, T=T, bias=bias, level=level, temperature=temperature, zero_row=zero_row)
    if frozen_w:
        d["w"].requires_grad_(False)
    vllm = None
    if vllm_shape is not None:
        gen = torch.Generator().manual_seed(7)
        shape = {"B": (B,), "B1": (B, 1), "BT": (B, T)}[vllm_shape]
        vllm = torch.exp(0.3 * torch.randn(*shape, generator=gen)).to(device)
    kw = dict(opts)
    ref_kw = dict(
        beta=kw.get("beta", 0.04),
        eps_low=kw.get("epsilon_low", 0.2),
        eps_high=kw.get("epsilon_high", 0.2),
        loss_type=kw.get("loss_type", "dapo"),
        max_len=kw.get("max_completion_length"),
        level=level,
        sapo_pos=kw.get("sapo_temperature_pos", 1.0),
        sapo_neg=kw.get("sapo_temperature_neg", 1.05),
        temperature=temperature,
        delta=kw.get("delta"),
        bias_kl=kw.get("use_bias_correction_kl", False),
        vespo=(
            kw.get("vespo_k_pos", 2.0),
            kw.get("vespo_lambda_pos", 3.0),
            kw.get("vespo_k_neg", 3.0),
            kw.get("vespo_lambda_neg", 2.0),
        ),
    )
    ref_lp = d["ref_lp"] if ref == "given" else None
    ref_in = d["ref_head"] if ref == "model" else (None, None, None)
    old = d["old"] if with_old else None
    loss, kl, clip, lp = fused_linear_grpo(
        d["x"],
        d["w"],
        d["ids"],
        d["mask"],
        d["adv"],
        d["b"],
        ref_lp,
        old,
        *ref_in,
        vllm,
        num_items,
        use_ref_model=ref != "none",
        chunk_rows=chunk_rows,
        **kw,
    )
    (loss * grad_out).backward()
    res = {}
    lo = torch.float32 if dtype == torch.float64 else dtype
    for rdt in (torch.float64, lo):
        x, w, b = leaf(d["x"], rdt), leaf(d["w"], rdt), leaf(d["b"], rdt)
        head = tuple(leaf(t, rdt) for t in d["ref_head"]) if ref == "model" else None
        rl, rm, rlp = grpo_reference(
            x,
            w,
            b,
            d["ids"],
            d["mask"],
            d["adv"],
            ref_lp=ref_lp,
            old_lp=old,
            ref_head=head,
            vllm=vllm,
            num_items=num_items,
            **ref_kw,
        )
        (rl * grad_out).backward()
        res[rdt] = (rl, rm, rlp, x, w, b)
    r64, rlo = res[torch.float64], res[lo]
    assert loss.dtype == torch.float32 and loss.shape == () and lp.shape == d["ids"].shape
    # The loss is a mean of per-token terms of size ~|A| x ratio (ratios up to e ~ 2.7 unclipped
    # here) that cancel down to |loss| ~ 5e-3: the rounding floor scales with the terms, not the sum.
    terms = 3.0 * d["adv"].abs().max().item()
    tol_close("loss", loss, r64[0], rlo[0], dtype, magnitude=terms)
    beta = ref_kw["beta"]
    if beta != 0.0:
        tol_close("kl", kl, r64[1][0], rlo[1][0], dtype)
    else:
        assert kl.item() == 0.0
    tol_close("clip_ratio", clip, r64[1][-1], rlo[1][-1], dtype)
    tol_close("per_token_logps", lp, r64[2], rlo[2], dtype)
    tol_close("dX", d["x"].grad, r64[3].grad, rlo[3].grad, dtype)
    if frozen_w:
        assert d["w"].grad is None
    else:
        tol_close("dW", d["w"].grad, r64[4].grad, rlo[4].grad, dtype, in_ulps=dw_ulps)
    if bias:
        tol_close("dB", d["b"].grad, r64[5].grad, rlo[5].grad, dtype, in_ulps=dw_ulps)
    return loss, kl, clip


def _cases():
    for lt in LOSS_TYPES:
        for level in ("token", "sequence"):
            if level == "sequence" and lt not in SEQ_OK:
                continue
            yield lt, level


def _extra(lt):
    return {"max_completion_length": 52} if lt == "dr_grpo" else {}


# ---------------------------------------------------------------- every loss type
# Every loss type and level with and without the KL term in float32; the 16-bit dtypes with it (on
# the CPU bfloat16 only: the CI budget).
def _type_cases():
    for lt, level in _cases():
        for beta in (0.0, 0.04):
            yield torch.float32, beta, lt, level
            if beta:
                yield torch.bfloat16, beta, lt, level
                if CUDA_OK:
                    yield torch.float16, beta, lt, level


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,beta,loss_type,level", list(_type_cases()), ids=str)
def test_loss_types(device, dtype, beta, loss_type, level):
    _run(
        device,
        dtype,
        loss_type=loss_type,
        importance_sampling_level=level,
        beta=beta,
        epsilon_high=0.28,
        dw_ulps=acc_ulps(dtype, 1),
        **_extra(loss_type),
    )


# ---------------------------------------------------------------- options
OPTIONS = [
    {"loss_type": "grpo", "delta": 1.5},
    {"loss_type": "dapo", "delta": 1.5, "importance_sampling_level": "sequence"},
    {"loss_type": "dapo", "use_bias_correction_kl": True, "beta": 0.1},
    {
        "loss_type": "bnpo",
        "use_bias_correction_kl": True,
        "beta": 0.1,
        "importance_sampling_level": "sequence",
    },
    {"loss_type": "dapo", "vllm_shape": "B"},
    {"loss_type": "dapo", "vllm_shape": "B1", "beta": 0.1},
    {"loss_type": "grpo", "vllm_shape": "BT", "importance_sampling_level": "sequence"},
    {"loss_type": "vespo", "vllm_shape": "BT"},
    {
        "loss_type": "vespo",
        "vllm_shape": "B1",
        "vespo_k_pos": 1.5,
        "vespo_lambda_pos": 2.0,
        "vespo_k_neg": 2.5,
        "vespo_lambda_neg": 1.0,
    },
    {"loss_type": "sapo", "vllm_shape": "BT", "sapo_temperature_pos": 0.8, "sapo_temperature_neg": 1.3},
    {"loss_type": "cispo", "epsilon_high": 1.3, "vllm_shape": "B"},
    {"loss_type": "luspo", "importance_sampling_level": "sequence", "beta": 0.0},
    {"loss_type": "luspo", "importance_sampling_level": "sequence", "vllm_shape": "B1", "beta": 0.0},
    {"loss_type": "dapo", "num_items": 200},
    {"loss_type": "cispo", "num_items": 77, "epsilon_high": 5.0},
    {"loss_type": "dapo", "temperature": 0.7},
    {"loss_type": "grpo", "temperature": 1.3, "importance_sampling_level": "sequence", "beta": 0.1},
    {"loss_type": "dapo", "ref": "model", "beta": 0.1},
    {
        "loss_type": "grpo",
        "ref": "model",
        "beta": 0.1,
        "importance_sampling_level": "sequence",
        "use_bias_correction_kl": True,
    },
    {"loss_type": "dapo", "ref": "none", "beta": 0.04},
    {"loss_type": "bnpo", "with_old": False},
    {"loss_type": "grpo", "with_old": False, "importance_sampling_level": "sequence"},
    {"loss_type": "grpo", "zero_row": True},
    {"loss_type": "dapo", "zero_row": True, "importance_sampling_level": "sequence", "beta": 0.1},
    {"loss_type": "dapo", "B": 1},
    {"loss_type": "vespo", "B": 1},
    {"loss_type": "dapo", "bias": False},
    {"loss_type": "grpo", "frozen_w": True},
    {"loss_type": "dapo", "grad_out": 2.5},
    {"loss_type": "dr_grpo", "max_completion_length": 100, "epsilon_low": 0.1, "epsilon_high": 0.28},
]


# float64 inputs (the CPU's exact path) for a representative subset.
F64 = (0, 2, 3, 7, 12, 13, 17, 18, 22, 26)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype,opt",
    [(torch.float32, o) for o in OPTIONS] + [(torch.float64, OPTIONS[i]) for i in F64],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()) if isinstance(o, dict) else str(o),
)
def test_options(device, dtype, opt):
    _run(device, dtype, **opt)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt", [OPTIONS[2], OPTIONS[7], OPTIONS[17], OPTIONS[19]], ids=str)
def test_options_bfloat16(device, opt):
    _run(device, torch.bfloat16, dw_ulps=acc_ulps(torch.bfloat16, 1), **opt)


# ---------------------------------------------------------------- chunking
# T = 47: 9 and 20 split each sequence into pieces (the sequence-level and vespo losses then run the
# two-phase path), 47 is one sequence per chunk, 100 two (not dividing B = 3), 200 the whole batch.
CHUNK_CASES = [
    {"loss_type": "dapo"},
    {
        "loss_type": "grpo",
        "importance_sampling_level": "sequence",
        "beta": 0.1,
        "use_bias_correction_kl": True,
    },
    {"loss_type": "vespo", "vllm_shape": "BT"},
    {"loss_type": "bnpo", "ref": "model", "beta": 0.1, "importance_sampling_level": "sequence"},
    {"loss_type": "luspo", "beta": 0.1},
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("chunk_rows", [9, 20, 47, 100, 200])
@pytest.mark.parametrize("case", CHUNK_CASES, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_chunk_rows(device, chunk_rows, case):
    _run(device, torch.float32, chunk_rows=chunk_rows, **case)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_chunking_does_not_change_the_result(device, level):
    d = _make(device, torch.float32, level=level)
    outs = []
    for chunk_rows in (0, 5, 47, 100):
        for p in (d["x"], d["w"], d["b"]):
            p.grad = None
        loss, kl, clip, lp = fused_linear_grpo(
            d["x"],
            d["w"],
            d["ids"],
            d["mask"],
            d["adv"],
            d["b"],
            d["ref_lp"],
            d["old"],
            loss_type="grpo",
            importance_sampling_level=level,
            chunk_rows=chunk_rows,
        )
        loss.backward()
        outs.append(
            (loss.detach(), kl, clip, lp, d["x"].grad.clone(), d["w"].grad.clone(), d["b"].grad.clone())
        )
    for o in outs[1:]:
        for a, e in zip(o, outs[0]):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- the Liger API
LIGER_INIT = [
    "beta",
    "compiled",
    "use_ref_model",
    "chunk_size",
    "epsilon_low",
    "epsilon_high",
    "loss_type",
    "max_completion_length",
    "importance_sampling_level",
    "sapo_temperature_pos",
    "sapo_temperature_neg",
    "temperature",
    "delta",
    "use_bias_correction_kl",
    "vespo_k_pos",
    "vespo_lambda_pos",
    "vespo_k_neg",
    "vespo_lambda_neg",
]
LIGER_FORWARD = [
    "_input",
    "lin_weight",
    "selected_token_ids",
    "attention_mask",
    "advantages",
    "bias",
    "ref_per_token_logps",
    "old_per_token_logps",
    "ref_input",
    "ref_weight",
    "ref_bias",
    "vllm_is_ratio",
    "num_items_in_batch",
]


def test_liger_signatures():
    init = inspect.signature(LigerFusedLinearGRPOLoss.__init__).parameters
    assert list(init)[1:] == LIGER_INIT
    defaults = {k: v.default for k, v in init.items() if k != "self"}
    assert defaults["beta"] == 0.04 and defaults["loss_type"] == "dapo" and defaults["chunk_size"] == 1
    assert defaults["sapo_temperature_neg"] == 1.05 and defaults["vespo_lambda_pos"] == 3.0
    assert list(inspect.signature(LigerFusedLinearGRPOLoss.forward).parameters)[1:] == LIGER_FORWARD


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_module_and_functional_metrics(device, beta):
    d = _make(device, torch.float32)
    mod = LigerFusedLinearGRPOLoss(beta=beta, loss_type="bnpo", compiled=False, chunk_size=3)
    loss, metrics = mod(d["x"], d["w"], d["ids"], d["mask"], d["adv"], d["b"], d["ref_lp"], d["old"])
    assert isinstance(metrics, tuple) and len(metrics) == (2 if beta else 1)
    ref = grpo_reference(
        leaf(d["x"], torch.float64),
        leaf(d["w"], torch.float64),
        leaf(d["b"], torch.float64),
        d["ids"],
        d["mask"],
        d["adv"],
        ref_lp=d["ref_lp"],
        old_lp=d["old"],
        beta=beta,
        loss_type="bnpo",
    )
    torch.testing.assert_close(loss, ref[0].float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(metrics[-1], ref[1][-1].float())  # TRL: metrics[-1] is the clip ratio
    if beta:
        torch.testing.assert_close(metrics[0], ref[1][0].float(), rtol=1e-5, atol=1e-6)  # metrics[0]: kl
    # Liger's functional alias takes the Function's positional order (beta after ref_bias).
    loss2, metrics2 = liger_fused_linear_grpo(
        d["x"],
        d["w"],
        d["ids"],
        d["mask"],
        d["adv"],
        d["b"],
        d["ref_lp"],
        d["old"],
        None,
        None,
        None,
        beta,
        0.2,
        0.2,
        "bnpo",
    )
    torch.testing.assert_close(loss2, loss)
    for a, e in zip(metrics2, metrics):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_and_input_without_grad(device):
    d = _make(device, torch.float32)
    mod = LigerFusedLinearGRPOLoss(loss_type="grpo")
    with torch.no_grad():
        loss, _ = mod(d["x"], d["w"], d["ids"], d["mask"], d["adv"], d["b"], d["ref_lp"], d["old"])
    assert not loss.requires_grad
    loss, _ = mod(d["x"].detach(), d["w"], d["ids"], d["mask"], d["adv"], d["b"], d["ref_lp"], d["old"])
    loss.backward()
    assert d["w"].grad is not None and d["b"].grad is not None and d["x"].grad is None


@pytest.mark.parametrize("device", DEVICES)
def test_retain_graph_second_backward_reruns(device):
    d = _make(device, torch.float32, level="sequence")
    loss, _ = LigerFusedLinearGRPOLoss(loss_type="grpo", importance_sampling_level="sequence")(
        d["x"], d["w"], d["ids"], d["mask"], d["adv"], d["b"], d["ref_lp"], d["old"]
    )
    loss.backward(retain_graph=True)
    first = [p.grad.clone() for p in (d["x"], d["w"], d["b"])]
    loss.backward(torch.tensor(3.0, device=device))
    for g, p in zip(first, (d["x"], d["w"], d["b"])):
        torch.testing.assert_close(p.grad, 4 * g, rtol=1e-5, atol=1e-6)


def test_gradcheck_float64_cpu():
    # The log-probs are float32 even for float64 inputs: a larger step keeps their rounding out. Not
    # vespo (and cispo only with its clipped weight constant): their weights are detached by
    # definition, so the loss's gradient is not its numerical derivative.
    for opts in (
        {"loss_type": "dapo", "beta": 0.1},
        {
            "loss_type": "grpo",
            "importance_sampling_level": "sequence",
            "use_bias_correction_kl": True,
            "beta": 0.1,
        },
        {"loss_type": "sapo"},
        {"loss_type": "cispo"},
        {"loss_type": "luspo", "delta": 1.5},
        {"loss_type": "bnpo", "temperature": 0.7},
    ):
        d = _make(
            "cpu", torch.float64, B=2, T=5, H=4, V=7, level=opts.get("importance_sampling_level", "token")
        )

        def f(x, w, b, opts=opts, d=d):
            return fused_linear_grpo(
                x, w, d["ids"], d["mask"], d["adv"], b, d["ref_lp"], d["old"], chunk_rows=4, **opts
            )[0]

        assert torch.autograd.gradcheck(f, (d["x"], d["w"], d["b"]), eps=1e-3, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck(device, dtype):
    d = _make(device, dtype, B=2, T=6, H=8, V=20)
    op = torch.ops.liger.fused_linear_grpo_fwd
    rx, rw, rb = d["ref_head"]
    torch.library.opcheck(
        op,
        (d["x"], d["w"], d["ids"], d["mask"], d["adv"], d["b"]),
        {
            "old_per_token_logps": d["old"],
            "ref_per_token_logps": d["ref_lp"],
            "compute_dx": True,
            "compute_dw": True,
            "compute_db": True,
            "loss_type": "grpo",
        },
    )
    torch.library.opcheck(
        op,
        (d["x"].detach(), d["w"], d["ids"], d["mask"], d["adv"], d["b"].detach()),
        {
            "ref_input": rx,
            "ref_weight": rw,
            "ref_bias": rb,
            "importance_sampling_level": "sequence",
            "use_bias_correction_kl": True,
            "compute_dw": True,
            "chunk_rows": 4,
        },
    )
    torch.library.opcheck(
        op,
        (d["x"].detach(), d["w"].detach(), d["ids"], d["mask"], d["adv"]),
        {"loss_type": "vespo", "vllm_is_ratio": torch.ones(2, 6, device=device)},
    )


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    torch._dynamo.reset()
    d = _make(device, torch.float32)
    mod = LigerFusedLinearGRPOLoss(loss_type="grpo", beta=0.1)

    def f(x, w, b):
        loss, metrics = mod(x * 1.5, w, d["ids"], d["mask"], d["adv"], b, d["ref_lp"], d["old"])
        return loss * 2.0, metrics[0], metrics[1]

    cf = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    out_c = cf(d["x"], d["w"], d["b"])
    out_c[0].backward()
    got = [p.grad.clone() for p in (d["x"], d["w"], d["b"])]
    for p in (d["x"], d["w"], d["b"]):
        p.grad = None
    out_e = f(d["x"], d["w"], d["b"])
    out_e[0].backward()
    for a, e in zip(out_c, out_e):
        torch.testing.assert_close(a, e)
    for g, p in zip(got, (d["x"], d["w"], d["b"])):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs(device):
    d = _make(device, torch.float32, B=2, T=6, H=8, V=20)
    x, w, b, ids, mask, adv = d["x"].detach(), d["w"].detach(), d["b"].detach(), d["ids"], d["mask"], d["adv"]
    with pytest.raises(ValueError, match="loss_type"):
        LigerFusedLinearGRPOLoss(loss_type="ppo")
    with pytest.raises(ValueError, match="sapo_temperature_pos"):
        LigerFusedLinearGRPOLoss(sapo_temperature_pos=0.0)
    with pytest.raises(ValueError, match="delta"):
        LigerFusedLinearGRPOLoss(delta=-1.0)
    with pytest.raises(ValueError, match="ref_per_token_logps or"):
        LigerFusedLinearGRPOLoss()(x, w, ids, mask, adv)  # use_ref_model without a reference
    with pytest.raises(ValueError, match="max_completion_length"):
        fused_linear_grpo(x, w, ids, mask, adv, loss_type="dr_grpo", use_ref_model=False)
    with pytest.raises(ValueError, match="sequence-level"):
        fused_linear_grpo(
            x, w, ids, mask, adv, loss_type="cispo", importance_sampling_level="sequence", use_ref_model=False
        )
    with pytest.raises(ValueError, match="importance_sampling_level"):
        fused_linear_grpo(x, w, ids, mask, adv, importance_sampling_level="tok", use_ref_model=False)
    op = torch.ops.liger.fused_linear_grpo_fwd
    cases = [
        ((x, w, ids[:, :5], mask, adv), {}, "argument 'selected_token_ids'"),
        ((x, w, ids, mask[:1], adv), {}, "argument 'attention_mask'"),
        ((x, w, ids, mask, adv[:1]), {}, "argument 'advantages'"),
        ((x, w, ids, mask, adv.view(2, 1)), {}, "argument 'advantages'"),
        ((x[0], w, ids, mask, adv), {}, "argument '_input'"),
        ((x, w[:, :5], ids, mask, adv), {}, "argument 'weight'"),
        ((x, w.double(), ids, mask, adv), {}, "argument 'weight'"),
        ((x, w, ids, mask, adv, b[:3]), {}, "argument 'bias'"),
        ((x, w, ids.float(), mask, adv), {}, "argument 'selected_token_ids'"),
        ((x, w, ids, mask, adv), {"loss_type": "ppo"}, "argument 'loss_type'"),
        (
            (x, w, ids, mask, adv),
            {"importance_sampling_level": "seq"},
            "argument 'importance_sampling_level'",
        ),
        (
            (x, w, ids, mask, adv),
            {"loss_type": "sapo", "importance_sampling_level": "sequence"},
            "argument 'importance_sampling_level'",
        ),
        ((x, w, ids, mask, adv), {"loss_type": "dr_grpo"}, "argument 'max_completion_length'"),
        ((x, w, ids, mask, adv), {"temperature": 0.0}, "argument 'temperature'"),
        ((x, w, ids, mask, adv), {"delta": 0.0}, "argument 'delta'"),
        ((x, w, ids, mask, adv), {"chunk_rows": -1}, "argument 'chunk_rows'"),
        ((x, w, ids, mask, adv), {"old_per_token_logps": d["old"][:, :3]}, "argument 'old_per_token_logps'"),
        ((x, w, ids, mask, adv), {"ref_per_token_logps": d["old"][:1]}, "argument 'ref_per_token_logps'"),
        (
            (x, w, ids, mask, adv),
            {"vllm_is_ratio": torch.ones(2, 3, device=device)},
            "argument 'vllm_is_ratio'",
        ),
        ((x, w, ids, mask, adv), {"ref_weight": d["ref_head"][1]}, "argument 'ref_input'"),
        (
            (x, w, ids, mask, adv),
            {"ref_input": d["ref_head"][0], "ref_weight": d["ref_head"][1][:5]},
            "argument 'ref_weight'",
        ),
        ((x, w, ids, mask, adv), {"ref_input": d["ref_head"][0]}, "argument 'ref_input'"),
    ]
    if device == "cpu":
        # On CUDA an out-of-range id is a device-side assertion (it poisons the process's CUDA context).
        bad = ids.clone()
        bad[1, 2] = 20
        cases.append(((x, w, bad, mask, adv), {}, "argument 'target'", ValueError))
    # an out-of-range target is a ValueError (as liger_cpp.set_check_targets documents)
    for args, kw, msg, *exc in cases:
        with pytest.raises(exc[0] if exc else RuntimeError, match=msg):
            op(*args, **kw)


# ---------------------------------------------------------------- long sequences (GPU)
@pytest.mark.skipif(not CUDA_OK, reason="needs CUDA")
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_one_65536_token_completion_cuda(level):
    """One completion of 65,536 tokens with V = 40,000: tokens x vocabulary = 2.6e9 > 2^31. The
    log-probs and the loss against a float32 reference computed block by block; dX of the token-level
    loss block by block (each row's gradient depends on its own token only)."""
    torch.manual_seed(0)
    T, H, V, blk = 65536, 64, 40000, 4096
    dev, dt = "cuda", torch.bfloat16
    x = torch.randn(1, T, H, device=dev, dtype=dt, requires_grad=True)
    w = (torch.randn(V, H, device=dev) / math.sqrt(H)).to(dt).requires_grad_(True)
    ids = torch.randint(0, V, (1, T), device=dev)
    mask = torch.ones(1, T, device=dev)
    mask[0, -1000:] = 0
    adv = torch.tensor([0.7], device=dev)
    with torch.no_grad():
        lp_ref = torch.cat(
            [token_logps(x[0, i : i + blk], w, None, ids[0, i : i + blk]) for i in range(0, T, blk)]
        )
    old = (lp_ref - 0.05).unsqueeze(0)
    loss, kl, clip, lp = fused_linear_grpo(
        x,
        w,
        ids,
        mask,
        adv,
        None,
        None,
        old,
        loss_type="dapo",
        importance_sampling_level=level,
        use_ref_model=False,
    )
    loss.backward()
    torch.testing.assert_close(lp[0], lp_ref, rtol=0, atol=2e-2)
    c1 = (
        torch.exp(lp_ref - old[0])
        if level == "token"
        else torch.exp(((lp_ref - old[0]) * mask[0]).sum() / mask.sum())
    )
    ptl = -torch.min(c1 * 0.7, c1.clamp(0.8, 1.2) * 0.7).expand(T)
    expect = (ptl * mask[0]).sum() / mask.sum()
    torch.testing.assert_close(loss, expect, rtol=2e-3, atol=1e-5)
    assert torch.isfinite(x.grad).all() and torch.isfinite(w.grad).all()
    if level == "token":
        for i in (0, T - blk - 1000):
            xb = x.detach()[0, i : i + blk].float().requires_grad_(True)
            lpb = token_logps(xb, w.detach().float(), None, ids[0, i : i + blk])
            cb = torch.exp(lpb - old[0, i : i + blk])
            lb = (-torch.min(cb * 0.7, cb.clamp(0.8, 1.2) * 0.7) * mask[0, i : i + blk]).sum() / mask.sum()
            lb.backward()
            # bf16 dlogits and dX: errors relative to the row sums' size, not to each element's
            atol = 2e-2 * xb.grad.abs().max().item()
            torch.testing.assert_close(x.grad[0, i : i + blk].float(), xb.grad, rtol=3e-2, atol=atol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_trl_grpo_trainer_call_pattern(device, beta):
    """TRL's GRPOTrainer with use_liger_kernel (TRL 1.10): its constructor keywords, its keyword call,
    metrics[0] read as the KL (when beta != 0) and metrics[-1] as the clip ratio."""
    d = _make(device, torch.float32, temperature=0.9)
    gen = torch.Generator().manual_seed(3)
    is_ratio = torch.exp(0.2 * torch.randn(3, 47, generator=gen)).to(device)
    loss_fn = LigerFusedLinearGRPOLoss(
        beta=beta,
        epsilon_low=0.2,
        epsilon_high=0.28,
        temperature=0.9,
        use_ref_model=beta != 0.0,
        loss_type="dapo",
        max_completion_length=47,
        importance_sampling_level="token",
        delta=None,
        use_bias_correction_kl=False,
        sapo_temperature_pos=1.0,
        sapo_temperature_neg=1.05,
        vespo_k_pos=2.0,
        vespo_lambda_pos=3.0,
        vespo_k_neg=3.0,
        vespo_lambda_neg=2.0,
    )
    loss, metrics = loss_fn(
        _input=d["x"],
        lin_weight=d["w"],
        selected_token_ids=d["ids"],
        attention_mask=d["mask"],
        advantages=d["adv"],
        bias=d["b"],
        old_per_token_logps=d["old"],
        ref_per_token_logps=d["ref_lp"] if beta != 0.0 else None,
        vllm_is_ratio=is_ratio,
    )
    loss.backward()
    x, w, b = (leaf(t, torch.float64) for t in (d["x"], d["w"], d["b"]))
    rl, rm, _ = grpo_reference(
        x,
        w,
        b,
        d["ids"],
        d["mask"],
        d["adv"],
        ref_lp=d["ref_lp"] if beta else None,
        old_lp=d["old"],
        vllm=is_ratio,
        beta=beta,
        eps_high=0.28,
        temperature=0.9,
    )
    rl.backward()
    torch.testing.assert_close(loss, rl.float(), rtol=1e-5, atol=1e-6)
    if beta != 0.0:
        torch.testing.assert_close(metrics[0], rm[0].float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(metrics[-1], rm[-1].float())
    torch.testing.assert_close(d["x"].grad, x.grad.float(), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(d["w"].grad, w.grad.float(), rtol=1e-4, atol=1e-6)
