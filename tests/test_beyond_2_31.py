"""More than 2^31 elements through every op whose size product can pass it (issue 29, item 3), on
CUDA, against PyTorch references that fit: float64 on sampled rows (the first and last rows and the
rows where the element offset crosses 2^31), and chunk-by-chunk sums for what reduces over all rows
(dW, dB, a mean loss).

Large memory (each test holds 15-35 GiB; the H200 has 140) and a few seconds each: the file runs
alone, never under pytest -n (xdist's workers would hold several at once):

    LIGER_CPP_LARGE_MEMORY_TESTS=1 python -m pytest tests/test_beyond_2_31.py -p no:xdist -q

The tokens x vocabulary > 2^31 cases of CE and FLCE and the > 2^31 tiles of the GLU generic kernels
are in test_cross_entropy.py, test_fused_linear_cross_entropy.py and test_swiglu_geglu.py; these
are the others: the norms' rows x hidden (default and generic kernels), more than 2^31 rows of one
block each (the generic norm kernels launch such grids in pieces), the GLU's dense and row kernels'
shapes, RoPE's q, CE in place with every option, FLCE's tokens x hidden, one preference-loss
chunk of more than 2^31 logits, and the losses on given logits (CE + TVD, GRPO in place)."""

import gc
import math
import os

import pytest
import torch
import torch.nn.functional as F
from conftest import CUDA_OK
from reference import cross_entropy_ref, geglu_ref, layer_norm_ref, rms_norm_ref, rope_ref, swiglu_ref
from utils import assert_close_to_ref

LIMIT = 1 << 31
BF16 = torch.bfloat16
pytestmark = [
    pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build"),
    pytest.mark.skipif(
        os.environ.get("LIGER_CPP_LARGE_MEMORY_TESTS") != "1",
        reason="large GPU memory: run alone with LIGER_CPP_LARGE_MEMORY_TESTS=1 (see the module docstring)",
    ),
    pytest.mark.skipif(
        int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1, reason="runs alone (not under pytest -n)"
    ),
]


@pytest.fixture(autouse=True)
def _free_memory():
    yield
    gc.collect()
    torch.cuda.empty_cache()


def _gen(seed=0):
    return torch.Generator(device="cuda").manual_seed(seed)


def _rows_over(cols, extra=1000):
    """A row count whose rows x cols passes 2^31 by `extra` rows."""
    rows = LIMIT // cols + extra
    assert rows * cols > LIMIT
    return rows


def _sample_rows(rows, cols, n_random=48, seed=0):
    """The first and last rows, the rows around element 2^31 (and around row 2^31 when there are
    that many) and random ones, as a sorted int64 CUDA tensor."""
    b = LIMIT // cols
    picks = {0, 1, rows - 2, rows - 1, b - 1, b, min(b + 1, rows - 1)}
    if rows > LIMIT:
        picks |= {LIMIT - 2, LIMIT - 1, LIMIT, LIMIT + 1}
    g = torch.Generator().manual_seed(seed)
    picks |= set(torch.randint(0, rows, (n_random,), generator=g).tolist())
    return torch.tensor(sorted(p for p in picks if 0 <= p < rows), device="cuda")


def _chunks(rows, step):
    return ((s, min(rows, s + step)) for s in range(0, rows, step))


def _rows_close(name, got, ref64, ref_lo):
    assert_close_to_ref(got, ref64, ref_lo, name)


def _close_rel(name, got, ref, rel):
    """max |got - ref| <= rel * max |ref| (for sums whose references are float32 chunk loops)."""
    err = (got.double() - ref.double()).abs().max().item()
    scale = ref.double().abs().max().item()
    assert scale > 0 and err <= rel * scale, f"{name}: max error {err:.3e} > {rel} x max |ref| {scale:.3e}"


# ---------------------------------------------------------------------------------------------
# norms: rows x hidden > 2^31


def _rms_dw_refs(x, dy, llama=True, step=65536):
    """sum over all rows of dy * xn (xn = x * rstd, rounded to x's dtype in llama mode), in float64
    and in float32, chunk by chunk."""
    dw64 = torch.zeros(x.shape[1], device="cuda", dtype=torch.float64)
    dw32 = torch.zeros(x.shape[1], device="cuda", dtype=torch.float32)
    for s, e in _chunks(x.shape[0], step):
        xf = x[s:e].float()
        xn = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
        if llama:
            xn = xn.to(x.dtype).float()
        g = dy[s:e].float()
        dw64 += (g.double() * xn.double()).sum(0)
        dw32 += (g * xn).sum(0)
    return dw64, dw32


@pytest.mark.parametrize("cols", [4096, 4097], ids=["default-kernels", "generic-unaligned"])
def test_rms_norm_rows_times_hidden(cols):
    rows = _rows_over(cols)
    g = _gen()
    x = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g)
    w = (1 + 0.1 * torch.randn(cols, device="cuda", generator=g)).to(BF16)
    y, rstd = torch.ops.liger.rms_norm_fwd(x, w, 1e-6, 0.0, "llama", False)
    dy = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g)
    dx, dw = torch.ops.liger.rms_norm_bwd(dy, x, w, rstd, 0.0, "llama", True)
    idx = _sample_rows(rows, cols)
    x64 = x[idx].double().requires_grad_(True)
    w64 = w.double().requires_grad_(True)
    y64 = rms_norm_ref(x64, w64, 1e-6)
    y64.backward(dy[idx].double())
    xlo = x[idx].clone().requires_grad_(True)
    ylo = rms_norm_ref(xlo, w, 1e-6)
    ylo.backward(dy[idx])
    _rows_close("Y rows", y[idx], y64, ylo)
    _rows_close("dX rows", dx[idx], x64.grad, xlo.grad)
    r64 = torch.rsqrt(x[idx].double().pow(2).mean(-1) + 1e-6)
    _rows_close("RSTD rows", rstd[idx], r64, torch.rsqrt(x[idx].float().pow(2).mean(-1) + 1e-6))
    del y, dx
    dw64, dw32 = _rms_dw_refs(x, dy)
    _rows_close("dW (all rows)", dw, dw64, dw32.to(BF16))


def test_fused_add_rms_norm_rows_times_hidden():
    cols = 4096
    rows = _rows_over(cols)
    g = _gen(1)
    x = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g)
    r = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g)
    w = (1 + 0.1 * torch.randn(cols, device="cuda", generator=g)).to(BF16)
    y, s, rstd = torch.ops.liger.fused_add_rms_norm_fwd(x, r, w, 1e-6, 0.0, "llama", False)
    idx = _sample_rows(rows, cols)
    # S is x + r rounded once to bf16, everywhere: checked chunk by chunk, exactly
    for a, e in _chunks(rows, 1 << 16):
        assert torch.equal(s[a:e], (x[a:e].float() + r[a:e].float()).to(BF16)), f"S rows {a}..{e}"
    del x, r
    dy = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g)
    ds_out = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g)
    ds, dw = torch.ops.liger.fused_add_rms_norm_bwd(dy, ds_out, s, w, rstd, 0.0, "llama", True)
    s64 = s[idx].double().requires_grad_(True)
    y64 = rms_norm_ref(s64, w.double(), 1e-6)
    y64.backward(dy[idx].double())
    slo = s[idx].clone().requires_grad_(True)
    ylo = rms_norm_ref(slo, w, 1e-6)
    ylo.backward(dy[idx])
    _rows_close("Y rows", y[idx], y64, ylo)
    _rows_close("dS rows", ds[idx], s64.grad + ds_out[idx].double(), slo.grad.float() + ds_out[idx].float())
    del y, ds, ds_out
    dw64, dw32 = _rms_dw_refs(s, dy)
    _rows_close("dW (all rows)", dw, dw64, dw32.to(BF16))


@pytest.mark.parametrize("cols", [4096, 4097], ids=["default-kernels", "generic-unaligned"])
def test_layer_norm_rows_times_hidden(cols):
    rows = _rows_over(cols)
    g = _gen(2)
    x = (torch.randn(rows, cols, device="cuda", generator=g, dtype=BF16) + 0.5).to(BF16)
    w = (1 + 0.1 * torch.randn(cols, device="cuda", generator=g)).to(BF16)
    b = (0.1 * torch.randn(cols, device="cuda", generator=g)).to(BF16)
    y, mean, rstd = torch.ops.liger.layer_norm_fwd(x, w, b, 1e-5)
    dy = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g)
    dx, dw, db = torch.ops.liger.layer_norm_bwd(dy, x, w, mean, rstd, True, True)
    idx = _sample_rows(rows, cols)
    x64 = x[idx].double().requires_grad_(True)
    y64 = layer_norm_ref(x64, w.double(), b.double(), 1e-5)
    y64.backward(dy[idx].double())
    xlo = x[idx].clone().requires_grad_(True)
    ylo = layer_norm_ref(xlo, w, b, 1e-5)
    ylo.backward(dy[idx])
    _rows_close("Y rows", y[idx], y64, ylo)
    _rows_close("dX rows", dx[idx], x64.grad, xlo.grad)
    _rows_close("MEAN rows", mean[idx], x[idx].double().mean(-1), x[idx].float().mean(-1))
    del y, dx
    dw64 = torch.zeros(cols, device="cuda", dtype=torch.float64)
    db64 = torch.zeros_like(dw64)
    dw32 = torch.zeros(cols, device="cuda")
    db32 = torch.zeros_like(dw32)
    for a, e in _chunks(rows, 1 << 16):
        xf = x[a:e].float()
        m = xf.mean(-1, keepdim=True)
        xhat = (xf - m) * torch.rsqrt((xf - m).pow(2).mean(-1, keepdim=True) + 1e-5)
        gf = dy[a:e].float()
        dw64 += (gf.double() * xhat.double()).sum(0)
        db64 += gf.double().sum(0)
        dw32 += (gf * xhat).sum(0)
        db32 += gf.sum(0)
    _rows_close("dW (all rows)", dw, dw64, dw32.to(BF16))
    _rows_close("dB (all rows)", db, db64, db32.to(BF16))


def test_rms_norm_more_than_2_31_rows():
    # 2^31 + 5 rows of one (unaligned) column: the generic kernels' one-block-a-row grids are larger
    # than CUDA's largest (2^31 - 1 blocks) and are launched in two pieces; rows past 2^31 - 1 must be
    # written too. About a minute (two billion 1024-thread blocks a direction).
    rows, cols = LIMIT + 5, 1
    g = _gen(3)
    x = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g)
    w = torch.full((cols,), 1.5, device="cuda", dtype=BF16)
    y, rstd = torch.ops.liger.rms_norm_fwd(x, w, 1e-6, 0.0, "llama", False)
    dy = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g)
    dx, dw = torch.ops.liger.rms_norm_bwd(dy, x, w, rstd, 0.0, "llama", True)
    idx = _sample_rows(rows, cols, n_random=200)
    x64 = x[idx].double().requires_grad_(True)
    y64 = rms_norm_ref(x64, w.double(), 1e-6)
    y64.backward(dy[idx].double())
    xlo = x[idx].clone().requires_grad_(True)
    ylo = rms_norm_ref(xlo, w, 1e-6)
    ylo.backward(dy[idx])
    _rows_close("Y rows", y[idx], y64, ylo)
    _rows_close("dX rows", dx[idx], x64.grad, xlo.grad)
    # every row written (the second piece too): y = w * sign(x) (up to rounding) wherever x != 0
    tail = slice(LIMIT - 1000, rows)
    assert torch.equal(y[tail].float().sign(), x[tail].float().sign()), "rows past 2^31 - 1 not written"
    assert torch.isfinite(rstd[tail]).all() and (rstd[tail] > 0).all()
    del y, dx
    dw64, dw32 = _rms_dw_refs(x, dy, step=1 << 26)
    _rows_close("dW (all rows)", dw, dw64, dw32.to(BF16))


# ---------------------------------------------------------------------------------------------
# gated linear units: the dense kernel's single row and the row kernel's strided rows


@pytest.mark.parametrize(
    "kind,layout",
    [("swiglu", "contiguous"), ("swiglu", "chunked"), ("geglu", "contiguous")],
    ids=["swiglu-dense", "swiglu-gate_up-chunks", "geglu-dense"],
)
def test_glu_elements(kind, layout):
    # (rows, 8192) with rows x 8192 > 2^31: contiguous operands collapse into one row of more than
    # 2^31 elements (the generic kernels, 16-byte vectors); halves of a fused gate_up projection
    # keep their row stride (the row kernel, int64 row offsets).
    cols = 8192
    rows = _rows_over(cols, extra=64)
    g = _gen(4)
    if layout == "contiguous":
        a = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g) * 3
        b = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g)
    else:
        gate_up = torch.randn(rows, 2 * cols, device="cuda", dtype=BF16, generator=g) * 3
        a, b = gate_up.chunk(2, dim=-1)
    if kind == "swiglu":
        fwd, bwd, ref = torch.ops.liger.swiglu_fwd, torch.ops.liger.swiglu_bwd, swiglu_ref
        c = fwd(a, b, False)
        dc = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g)
        da, db = bwd(dc, a, b)
    else:
        ref = geglu_ref
        c = torch.ops.liger.geglu_fwd(a, b, "tanh", False)
        dc = torch.randn(rows, cols, device="cuda", dtype=BF16, generator=g)
        da, db = torch.ops.liger.geglu_bwd(dc, a, b, "tanh")
    idx = _sample_rows(rows, cols)
    a64 = a[idx].double().requires_grad_(True)
    b64 = b[idx].double().requires_grad_(True)
    c64 = ref(a64, b64)
    c64.backward(dc[idx].double())
    alo = a[idx].clone().requires_grad_(True)
    blo = b[idx].clone().requires_grad_(True)
    clo = ref(alo, blo)
    clo.backward(dc[idx])
    _rows_close("c rows", c[idx], c64, clo)
    _rows_close("da rows", da[idx], a64.grad, alo.grad)
    _rows_close("db rows", db[idx], b64.grad, blo.grad)


# ---------------------------------------------------------------------------------------------
# RoPE: q of more than 2^31 elements in HF's strided (B, H, S, D) view


def test_rope_q_elements():
    H, Hk, D = 32, 8, 128
    S = LIMIT // (H * D) + 256
    assert S * H * D > LIMIT
    g = _gen(5)
    # HF's layout: projections (B, S, H, D) transposed to (B, H, S, D) views
    q = torch.randn(1, S, H, D, device="cuda", dtype=BF16, generator=g).transpose(1, 2)
    k = torch.randn(1, S, Hk, D, device="cuda", dtype=BF16, generator=g).transpose(1, 2)
    pos = torch.arange(S, device="cuda", dtype=torch.float32)
    inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device="cuda", dtype=torch.float32) / D))
    ang = torch.cat([pos[:, None] * inv[None], pos[:, None] * inv[None]], -1)
    cos, sin = ang.cos()[None].to(BF16), ang.sin()[None].to(BF16)
    del pos, ang
    qo, ko = torch.ops.liger.rope_fwd(q, k, cos, sin, 1)
    dqo = torch.randn(1, S, H, D, device="cuda", dtype=BF16, generator=g).transpose(1, 2)
    dko = torch.randn(1, S, Hk, D, device="cuda", dtype=BF16, generator=g).transpose(1, 2)
    dq, dk = torch.ops.liger.rope_bwd(dqo, dko, cos, sin, 1)
    # positions whose q elements sit around offset 2^31 of the (B, S, H, D) storage, and others
    idx = _sample_rows(S, H * D)
    cs, sn = cos[:, idx], sin[:, idx]
    q64 = q[:, :, idx].double().requires_grad_(True)
    k64 = k[:, :, idx].double().requires_grad_(True)
    qr, kr = rope_ref(q64, k64, cs.double(), sn.double())
    (qr * dqo[:, :, idx].double()).sum().add((kr * dko[:, :, idx].double()).sum()).backward()
    qlo = q[:, :, idx].clone().requires_grad_(True)
    klo = k[:, :, idx].clone().requires_grad_(True)
    ql, kl = rope_ref(qlo, klo, cs, sn)
    (ql.float() * dqo[:, :, idx].float()).sum().add((kl.float() * dko[:, :, idx].float()).sum()).backward()
    _rows_close("q_out positions", qo[:, :, idx], qr, ql)
    _rows_close("k_out positions", ko[:, :, idx], kr, kl)
    _rows_close("dq positions", dq[:, :, idx], q64.grad, qlo.grad)
    _rows_close("dk positions", dk[:, :, idx], k64.grad, klo.grad)


# ---------------------------------------------------------------------------------------------
# cross entropy, in place, every option (the non-plain row kernels)


def test_cross_entropy_in_place_all_options():
    V = 32000
    rows = _rows_over(V, extra=100)
    g = _gen(6)
    x = torch.randn(rows, V, device="cuda", dtype=BF16, generator=g) * 4
    t = torch.randint(0, V, (rows,), device="cuda", generator=g)
    t[::9] = -100
    w = torch.rand(V, device="cuda", generator=g) + 0.5
    idx = _sample_rows(rows, V)
    xs = x[idx].clone()  # the op overwrites the logits with their gradient
    opts = dict(label_smoothing=0.1, lse_square_scale=1e-4, softcap=30.0)
    loss, z, _ = torch.ops.liger.cross_entropy_fwd_(
        x, t, w, -100, opts["label_smoothing"], opts["lse_square_scale"], opts["softcap"], "none", False
    )
    x64 = xs.double().requires_grad_(True)
    l64, _ = cross_entropy_ref(x64, t[idx], w.double(), reduction="none", **opts)
    l64.sum().backward()
    xlo = xs.clone().requires_grad_(True)
    llo, _ = cross_entropy_ref(xlo.float(), t[idx], w, reduction="none", **opts)
    llo.sum().backward()
    _rows_close("loss rows", loss[idx], l64, llo)
    _rows_close("dlogits rows (in place)", x[idx], x64.grad, xlo.grad)


# ---------------------------------------------------------------------------------------------
# fused linear cross entropy: tokens x hidden > 2^31 (long contexts)


def test_flce_tokens_times_hidden():
    # 524,800 tokens x 4096: the hidden states and dX pass 2^31 elements; the chunk loop's GEMMs
    # start past offset 2^31. Reference (the existing >2^31 FLCE test's): float32 math on logits
    # rounded to bf16, chunk by chunk.
    H, V = 4096, 8192
    M = _rows_over(H, extra=512)
    g = _gen(7)
    x = torch.randn(M, H, device="cuda", dtype=BF16, generator=g).requires_grad_(True)
    w = (torch.randn(V, H, device="cuda", generator=g) * (3 / math.sqrt(H))).to(BF16).requires_grad_(True)
    t = torch.randint(0, V, (M,), device="cuda", generator=g)
    t[::7] = -100
    from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy

    loss, *_ = fused_linear_cross_entropy(x, w, t, reduction="sum", accum_dtype=torch.float32)
    loss.backward()
    wf = w.detach().float()
    total = torch.zeros((), device="cuda", dtype=torch.float64)
    dw_ref = torch.zeros(V, H, device="cuda")
    for s, e in _chunks(M, 16384):
        xc = x.detach()[s:e].float()
        lg = (xc @ wf.t()).to(BF16).float().requires_grad_(True)
        part = F.cross_entropy(lg, t[s:e], reduction="sum")
        part.backward()
        total += part.detach().double()
        dw_ref += lg.grad.t() @ xc
    torch.testing.assert_close(loss.double(), total, rtol=2e-3, atol=0)
    _close_rel("dW (all rows)", w.grad, dw_ref, 1e-2)
    idx = _sample_rows(M, H)
    lg = (x.detach()[idx].float() @ wf.t()).to(BF16).float().requires_grad_(True)
    F.cross_entropy(lg, t[idx], reduction="sum").backward()
    _close_rel("dX rows", x.grad[idx], lg.grad @ wf, 1e-2)


# ---------------------------------------------------------------------------------------------
# a preference-loss chunk of more than 2^31 logits


def test_dpo_chunk_logits():
    # One pair of 8448-token sequences at Llama 3's vocabulary: the chunk's (2 x 8448, 128256)
    # logits are 2.17e9 elements in one buffer. DPO (sigmoid) with the chosen NLL, no reference
    # model; reference: logps chunk by chunk in float32 (logits rounded to bf16 as the op's), then
    # the loss and, by autograd per chunk with the pair loss's coefficients, dX and dW (the op's
    # are bf16: within 1 % of the largest element).
    from liger_cpp.ops.fused_linear_preference import fused_linear_preference

    # beta 0.01: the logps of random 8k-token sequences differ by hundreds; the pair loss stays off
    # its flat ends, so its gradient (not only the NLL's) reaches dX and dW
    T, H, V, beta, alpha = 8448, 1024, 128256, 0.01, 1.0
    assert 2 * T * V > LIMIT
    g = _gen(8)
    x = torch.randn(2, T, H, device="cuda", dtype=BF16, generator=g).requires_grad_(True)
    w = (torch.randn(V, H, device="cuda", generator=g) * (2 / math.sqrt(H))).to(BF16).requires_grad_(True)
    t = torch.randint(0, V, (2, T), device="cuda", generator=g)
    t[:, :300] = -100  # the prompt
    t[:, 1000::37] = -100
    out = fused_linear_preference(
        x, w, t, loss_type="sigmoid", beta=beta, alpha=alpha, compute_nll_loss=True, chunk_size=1
    )
    out[0].backward()
    xr = x.detach().float().reshape(2 * T, H).requires_grad_(True)
    wr = w.detach().float().requires_grad_(True)
    tf = t.reshape(-1)

    def seq_logp(seq, grad=False):
        """sum_t log p(y_t) over the valid tokens of sequence seq (0 chosen, 1 rejected)."""
        total = torch.zeros((), device="cuda")
        for s, e in _chunks(T, 2048):
            rs = slice(seq * T + s, seq * T + e)
            with torch.set_grad_enabled(grad):
                lg = (xr[rs] @ wr.t()).to(BF16).float()
                part = -F.cross_entropy(lg, tf[rs], reduction="sum", ignore_index=-100)
            if grad:
                yield part
            else:
                total = total + part
        if not grad:
            yield total

    c, r = next(seq_logp(0)), next(seq_logp(1))
    nc = (t[0] != -100).sum().float()
    d = beta * (c - r)
    loss_ref = -F.logsigmoid(d) - alpha * c / nc
    torch.testing.assert_close(out[1].double(), c.double().view(1), rtol=1e-3, atol=0)
    torch.testing.assert_close(out[2].double(), r.double().view(1), rtol=1e-3, atol=0)
    torch.testing.assert_close(out[0].double(), loss_ref.double(), rtol=1e-3, atol=1e-4)
    dc = -beta * torch.sigmoid(-d) - alpha / nc  # d loss / d c
    dr = beta * torch.sigmoid(-d)
    for seq, coef in ((0, dc), (1, dr)):
        for part in seq_logp(seq, grad=True):
            (coef.detach() * part).backward()
    _close_rel("dW", w.grad, wr.grad, 1e-2)
    _close_rel("dX", x.grad.reshape(2 * T, H), xr.grad, 1e-2)


# ---------------------------------------------------------------------------------------------
# losses on given logits: rows x vocabulary > 2^31 (fused CE + TVD; GRPO on logits, in place)


def _ce_tvd_rows_check(rows, V, device, idx):
    """fused_ce_tvd on (rows, V) bf16 logits against float64 (and float32) references on rows idx."""
    from liger_cpp.ops.ce_tvd import fused_ce_tvd

    g = torch.Generator(device=device).manual_seed(9)
    s = (torch.randn(rows, V, device=device, generator=g) * 3).to(BF16).requires_grad_(True)
    t = (torch.randn(rows, V, device=device, generator=g) * 3).to(BF16)
    y = torch.randint(0, V, (rows,), device=device, generator=g)
    y[::11] = -100
    gc_, gt = torch.randn(rows, device=device, generator=g), torch.randn(rows, device=device, generator=g)
    ce, tvd = fused_ce_tvd(s, t, y)
    (ce * gc_ + tvd * gt).sum().backward()

    def ref(dtype):
        x = s.detach()[idx].to(dtype).requires_grad_(True)
        valid = y[idx] != -100
        p, q = x.softmax(-1), t[idx].to(dtype).softmax(-1)
        c = (torch.logsumexp(x, -1) - x.gather(1, y[idx].clamp(min=0)[:, None])[:, 0]) * valid
        v = 0.5 * (p - q).abs().sum(-1) * valid
        (c * gc_[idx].to(dtype) + v * gt[idx].to(dtype)).sum().backward()
        return c.detach(), v.detach(), x.grad

    r64, r32 = ref(torch.float64), ref(torch.float32)
    for k, name in enumerate(("ce rows", "tvd rows", "dlogits rows")):
        got = (ce, tvd, s.grad)[k][idx]
        assert_close_to_ref(got, r64[k], r32[k], name, extra_ulps=4.0)


def test_ce_tvd_rows_times_vocab():
    V = 32000
    rows = _rows_over(V, extra=100)
    _ce_tvd_rows_check(rows, V, "cuda", _sample_rows(rows, V))


def _grpo_logits_check(L, V, device, pos):
    """triton_grpo_loss (dapo, token level, reduce=False, in place) on (1, L + 1, V) bf16 logits
    against float64 / float32 references of the per-token loss and the gradient rows at positions
    pos (token level: each position's loss and gradient depend on its own row only)."""
    from liger_cpp.transformers.grpo_loss import triton_grpo_loss

    g = torch.Generator(device=device).manual_seed(10)
    x = (torch.randn(1, L + 1, V, device=device, generator=g) * 2).to(BF16).requires_grad_(True)
    ids = torch.randint(0, V, (1, L), device=device, generator=g)
    mask = (torch.rand(1, L, device=device, generator=g) > 0.1).float()
    old = -torch.rand(1, L, device=device, generator=g) * 12 - 1
    ref_lp = old + 0.2 * torch.randn(1, L, device=device, generator=g)
    adv = torch.randn(1, device=device, generator=g)
    up = torch.randn(1, L, device=device, generator=g)
    T, beta, lo, hi = 0.9, 0.04, 0.2, 0.4
    xs = x.detach()[0, pos].clone()  # the in-place backward overwrites the logits
    loss, _, _ = triton_grpo_loss(x, old, ref_lp, ids, adv, mask, temperature=T, beta=beta, inplace=True)
    (loss * up).sum().backward()
    grad = x.grad[0, pos]

    def ref(dtype):
        z = xs.to(dtype).requires_grad_(True)
        lp = torch.log_softmax(z / T, -1).gather(1, ids[0, pos][:, None])[:, 0]
        c1 = torch.exp(lp - old[0, pos].to(dtype))
        a = adv.to(dtype)
        pl = -torch.minimum(c1 * a, c1.clamp(1 - lo, 1 + hi) * a)
        d = ref_lp[0, pos].to(dtype) - lp
        out = (pl + beta * (torch.exp(d) - d - 1)) * mask[0, pos].to(dtype)
        (out * up[0, pos].to(dtype)).sum().backward()
        return out.detach(), z.grad

    r64, r32 = ref(torch.float64), ref(torch.float32)
    assert_close_to_ref(loss[0, pos], r64[0], r32[0], "per-token loss", extra_ulps=4.0)
    assert_close_to_ref(grad, r64[1], r32[1], "dlogits rows (in place)", extra_ulps=4.0)
    assert (x.grad[0, L] == 0).all()  # the last position predicts nothing


def test_grpo_on_logits_elements():
    V = 32000
    L = _rows_over(V, extra=100)
    pos = _sample_rows(L, V)
    _grpo_logits_check(L, V, "cuda", pos)
