"""RL and distillation losses fused with the lm_head (bf16, fwd+bwd): GRPO (liger_cpp's
LigerFusedLinearGRPOLoss), JSD distillation (LigerFusedLinearJSDLoss) and KL distillation from cached
teacher probabilities (LigerFusedLinearKLDivLoss) against eager PyTorch (full
logits, TRL's formulas: selective_log_softmax and GRPOTrainer's dapo loss; GKD's generalized JSD) and
Liger-Kernel's chunked losses when importable (compiled=True and compiled=False, first step and
steady state), in one run.

Floor: the GEMMs themselves, timed in this run with torch.matmul at the same shapes: the policy's
logits x @ W^T, dX = dL @ W and dW = dL^T @ x (6*M*H*V FLOPs), plus the reference model's (or the
teacher's) forward logits (2*M*H'*V). liger_cpp's rows time the floor beside themselves (five
alternating rounds, harness.paired_ms; x floor = the median of the rounds' ratios); the others divide
by the floor timed once. Per row: median ms of a steady fwd+bwd, x floor, the first
call's ms (the first call of that implementation in this process, after the floor's GEMMs and the
rows before it at that shape: what a training run's first loss step pays once the model's own
forward has warmed cuBLAS), peak memory above the inputs (it includes the returned dX and dW) and
|loss - eager|.
GRPO also: peak memory as completions grow (2..16 x 1024 tokens, dX subtracted), and one 65,536-token
completion.

Shapes: GRPO 8 completions x 1024 tokens, H 4096, V 151936 (Qwen's vocabulary), ref_per_token_logps
given and a reference model in the loop; JSD 8192 tokens, student H 2048, teacher H 4096, V 151936;
KL 8192 tokens, H 2048, V 151936 (float32 teacher probabilities: 5 GB of input).
--device cpu: tiny fp32 shapes, each eager formula against liger_cpp (no timing).
--breakdown: also one steady liger_cpp call per case profiled (GPU ms of cuBLAS GEMMs, liger_cpp's own
row kernels, the rest) with its costliest kernels.
--cases grpo,grpo_ref,jsd,kl: the case groups, in that order (the JSON is rewritten after each).
Usage: python benchmarks/bench_rl_losses.py [--out F.json] [--quick] [--breakdown] [--cases C] [--device cpu]
"""

import argparse
import importlib.metadata
import time

import torch
import torch.nn.functional as F
from harness import bench_ms, fmt_table, meta, paired_ms, peak_extra_bytes, write_json

import liger_cpp
from liger_cpp import chunked_loss as cl
from liger_cpp import transformers as lt
from liger_cpp.ops.fused_linear_distillation import fused_linear_distillation
from liger_cpp.ops.fused_linear_kl_div import fused_linear_kl_div

GRPO_SHAPE = (8, 1024, 4096, 151936)  # completions, T, H, V
JSD_SHAPE = (8192, 2048, 4096, 151936)  # tokens, student H, teacher H, V
SWEEP_COMPLETIONS = (2, 4, 8, 16)
LONG_T = 65536
BETA, EPS_LO, EPS_HI = 0.04, 0.2, 0.28
# Extra liger_cpp variants run under a plan override each (--plans; docs/tuning.md), and the
# implementations kept (--impls; all when empty): set by main().
PLANS: list = []
IMPLS: list = []
CHUNK_ROWS: list = []  # --chunk-rows: one more liger_cpp row per value (jsd, kl), the op's chunk_rows


def _with_plans(out, ours):
    """`out` plus one liger_cpp[spec] variant per --plans spec (ours() run under that override),
    filtered by --impls."""
    from liger_cpp._testing import set_plan_override

    for spec in PLANS:

        def planned(spec=spec):
            f = ours()

            def g(d):
                old = set_plan_override(spec)
                try:
                    return f(d)
                finally:
                    set_plan_override(old)

            return g

        out[f"liger_cpp[{spec}]"] = planned
    return _kept(out)


def _kept(out):
    """The variants --impls keeps (a name, or its family before "[")."""
    return {k: v for k, v in out.items() if not IMPLS or k.split("[")[0] in IMPLS or k in IMPLS}


JSD_KW = {"weight_hard_loss": 0.0, "weight_soft_loss": 1.0, "beta": 0.5, "temperature": 0.9}  # TRL's GKD
MiB = 1 << 20


def real_liger_importable():
    """Liger-Kernel itself (not liger_cpp's compatibility package, whose liger_kernel is liger_cpp);
    says why not when it is not (a run without Liger's rows must say so)."""
    try:
        import liger_kernel.chunked_loss  # noqa: F401

        # Liger-Kernel has no __version__; the compatibility package's version names liger.cpp.
        version = importlib.metadata.version("liger-kernel")
        if "liger.cpp" in version:
            print(f"Liger-Kernel not benchmarked: liger_kernel is liger_cpp's compat package {version}")
            return False
        return True
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        print(f"Liger-Kernel not benchmarked: {_err(e)}")
        return False


# ---------------------------------------------------------------- eager references (full logits)
def _logps(x, w, ids):
    lp = F.log_softmax((x @ w.t()).float(), dim=-1)
    return lp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def eager_grpo(x, w, ids, mask, adv, ref_lp, old_lp, rx=None, rw=None):
    """TRL GRPOTrainer's dapo loss (token-level sampling) with a k3 KL to the reference."""
    lp = _logps(x, w, ids)
    if rx is not None:
        with torch.no_grad():
            ref_lp = _logps(rx, rw, ids)
    c1 = torch.exp(lp - old_lp)
    a = adv.unsqueeze(1)
    ptl = -torch.min(c1 * a, torch.clamp(c1, 1 - EPS_LO, 1 + EPS_HI) * a)
    kl = torch.exp(ref_lp - lp) - (ref_lp - lp) - 1
    ptl = ptl + BETA * kl
    return (ptl * mask).sum() / mask.sum().clamp(min=1.0)


def eager_jsd(xs, ws, xt, wt, t):
    """TRL GKD's generalized_jsd_loss (beta 0.5, temperature 0.9), averaged over labelled tokens."""
    T, beta = JSD_KW["temperature"], JSD_KW["beta"]
    ls = F.log_softmax((xs @ ws.t()).float() / T, dim=-1)
    with torch.no_grad():
        lt = F.log_softmax((xt @ wt.t()).float() / T, dim=-1)
    lm = torch.logsumexp(
        torch.stack([ls + torch.log(torch.tensor(1 - beta)), lt + torch.log(torch.tensor(beta))]), 0
    )
    jsd = beta * F.kl_div(lm, lt, reduction="none", log_target=True) + (1 - beta) * F.kl_div(
        lm, ls, reduction="none", log_target=True
    )
    mask = t != -100
    return (jsd.sum(-1) * mask).sum() / mask.sum()


# ---------------------------------------------------------------- inputs
def grpo_inputs(shape, device, dtype, seed=0, ref_model=False):
    n, T, h, v = shape
    g = torch.Generator(device=device).manual_seed(seed)

    def rnd(*s, scale=1.0):
        return (torch.randn(*s, generator=g, device=device) * scale).to(dtype)

    x = rnd(n, T, h).requires_grad_(True)
    w = rnd(v, h, scale=h**-0.5).requires_grad_(True)
    ids = torch.randint(0, v, (n, T), generator=g, device=device)
    mask = torch.ones(n, T, device=device)
    mask[:, T - T // 8 :] = 0  # padded completions of different lengths
    mask[0, : T // 2] = 1
    adv = torch.randn(n, generator=g, device=device)
    with torch.no_grad():  # blocks of 4096 tokens: a 65,536-token completion's logits would not fit
        lp = torch.stack(
            [
                torch.cat([_logps(x[i, j : j + 4096], w, ids[i, j : j + 4096]) for j in range(0, T, 4096)])
                for i in range(n)
            ]
        )
    old = lp + 0.1 * torch.randn(n, T, generator=g, device=device)
    ref = lp + 0.1 * torch.randn(n, T, generator=g, device=device)
    rx = rnd(n, T, h) if ref_model else None
    rw = rnd(v, h, scale=h**-0.5) if ref_model else None
    return dict(x=x, w=w, ids=ids, mask=mask, adv=adv, old=old, ref=ref, rx=rx, rw=rw)


def jsd_inputs(shape, device, dtype, seed=0):
    m, hs, ht, v = shape
    g = torch.Generator(device=device).manual_seed(seed)

    def rnd(*s, scale=1.0):
        return (torch.randn(*s, generator=g, device=device) * scale).to(dtype)

    xs = rnd(m, hs).requires_grad_(True)
    ws = rnd(v, hs, scale=hs**-0.5).requires_grad_(True)
    xt, wt = rnd(m, ht), rnd(v, ht, scale=ht**-0.5)
    t = torch.randint(0, v, (m,), generator=g, device=device)
    t[: m // 8] = -100  # prompt tokens
    return dict(xs=xs, ws=ws, xt=xt, wt=wt, t=t)


# ---------------------------------------------------------------- implementations
def grpo_variants(have_liger, ref_model):
    """name -> factory of f(d) -> loss."""

    def ours():
        mod = cl.LigerFusedLinearGRPOLoss(beta=BETA, epsilon_high=EPS_HI, loss_type="dapo")
        if ref_model:
            return lambda d: mod(
                d["x"], d["w"], d["ids"], d["mask"], d["adv"], None, None, d["old"], d["rx"], d["rw"]
            )[0]
        return lambda d: mod(d["x"], d["w"], d["ids"], d["mask"], d["adv"], None, d["ref"], d["old"])[0]

    out = {"liger_cpp": ours}
    out["eager"] = lambda: (
        lambda d: eager_grpo(
            d["x"], d["w"], d["ids"], d["mask"], d["adv"], d["ref"], d["old"], d["rx"], d["rw"]
        )
    )
    if have_liger:
        for compiled in (True, False):

            def liger(compiled=compiled):
                import liger_kernel.chunked_loss as lk

                mod = lk.LigerFusedLinearGRPOLoss(
                    beta=BETA, epsilon_high=EPS_HI, loss_type="dapo", compiled=compiled
                )
                if ref_model:
                    return lambda d: mod(
                        d["x"], d["w"], d["ids"], d["mask"], d["adv"], None, None, d["old"], d["rx"], d["rw"]
                    )[0]
                return lambda d: mod(d["x"], d["w"], d["ids"], d["mask"], d["adv"], None, d["ref"], d["old"])[
                    0
                ]

            out[f"liger[compiled={compiled}]"] = liger
    return _kept(out)


def jsd_variants(have_liger):
    def ours():
        mod = cl.LigerFusedLinearJSDLoss(**JSD_KW)
        return lambda d: mod(d["xs"], d["ws"], d["xt"], d["wt"], d["t"])

    out = {
        "liger_cpp": ours,
        "eager": lambda: lambda d: eager_jsd(d["xs"], d["ws"], d["xt"], d["wt"], d["t"]),
    }
    for rows in CHUNK_ROWS:
        kw = {k: v for k, v in JSD_KW.items()}
        out[f"liger_cpp[rows={rows}]"] = lambda rows=rows, kw=kw: (
            lambda d: fused_linear_distillation(
                d["xs"], d["ws"], d["xt"], d["wt"], d["t"], chunk_rows=rows, **kw
            )[0]
        )
    if have_liger:
        for compiled in (True, False):

            def liger(compiled=compiled):
                import liger_kernel.chunked_loss as lk

                mod = lk.LigerFusedLinearJSDLoss(compiled=compiled, **JSD_KW)
                return lambda d: mod(d["xs"], d["ws"], d["xt"], d["wt"], d["t"])

            out[f"liger[compiled={compiled}]"] = liger
    return _with_plans(out, ours)


KL_SHAPE = (8192, 2048, 151936)  # tokens, student H, V: cached teacher probabilities (M, V) float32
KL_TEMPERATURE = 0.9


def eager_kl(x, w, q, t):
    """KL(q || softmax(x W^T / T)) batchmean over labelled tokens (nn.KLDivLoss on full logits)."""
    lp = torch.log_softmax((x @ w.t()).float() / KL_TEMPERATURE, -1)
    rows = (q * (q.clamp_min(1e-10).log() - lp)).sum(-1)
    keep = t != -100
    return (rows * keep).sum() / keep.sum()


def kl_inputs(shape, device, dtype, seed=0):
    m, h, v = shape
    g = torch.Generator(device=device).manual_seed(seed)
    x = (torch.randn(m, h, generator=g, device=device)).to(dtype).requires_grad_(True)
    w = (torch.randn(v, h, generator=g, device=device) * h**-0.5).to(dtype).requires_grad_(True)
    q = torch.softmax(torch.randn(m, v, generator=g, device=device) * 2.0, -1)
    t = torch.randint(0, v, (m,), generator=g, device=device)
    t[: m // 8] = -100
    return dict(x=x, w=w, q=q, t=t)


def kl_variants(have_liger):
    def ours():
        mod = lt.LigerFusedLinearKLDivLoss(temperature=KL_TEMPERATURE)
        return lambda d: mod(d["x"], d["w"], d["q"], d["t"])

    out = {"liger_cpp": ours, "eager": lambda: lambda d: eager_kl(d["x"], d["w"], d["q"], d["t"])}
    for rows in CHUNK_ROWS:
        out[f"liger_cpp[rows={rows}]"] = lambda rows=rows: (
            lambda d: fused_linear_kl_div(
                d["x"], d["w"], d["q"], d["t"], temperature=KL_TEMPERATURE, chunk_rows=rows
            )
        )
    if have_liger:

        def liger():
            import liger_kernel.transformers as lkt

            mod = lkt.LigerFusedLinearKLDivLoss(temperature=KL_TEMPERATURE)
            return lambda d: mod(d["x"], d["w"], d["q"], d["t"])

        out["liger"] = liger
    return _with_plans(out, ours)


# ---------------------------------------------------------------- the floor
def floor_gemms(m, h, v, ref_h=None, dtype=torch.bfloat16):
    """The floor's GEMMs as named callables on random operands of a fused head's shapes: the policy's
    logits x @ W^T, dX = dL @ W and dW = dL^T @ x, and the reference's / teacher's forward logits
    when ref_h is given. The operands live as long as the callables."""
    x = torch.randn(m, h, device="cuda", dtype=dtype)
    w = torch.randn(v, h, device="cuda", dtype=dtype) * h**-0.5
    dl = torch.randn(m, v, device="cuda", dtype=dtype)
    gemms = {"logits": lambda: x @ w.t(), "dX": lambda: dl @ w, "dW": lambda: dl.t() @ x}
    if ref_h is not None:
        rx = torch.randn(m, ref_h, device="cuda", dtype=dtype)
        rw = torch.randn(v, ref_h, device="cuda", dtype=dtype) * ref_h**-0.5
        gemms["ref_logits"] = lambda: rx @ rw.t()
    return gemms


def gemm_floor_ms(m, h, v, ref_h=None, dtype=torch.bfloat16):
    """Medians of the floor's GEMMs (floor_gemms) timed one by one with torch.matmul."""
    gemms = floor_gemms(m, h, v, ref_h, dtype)
    parts = {name: bench_ms(f, warmup=1, rep=200) for name, f in gemms.items()}
    del gemms
    torch.cuda.empty_cache()
    flops = 6.0 * m * h * v + (2.0 * m * ref_h * v if ref_h is not None else 0.0)
    total = sum(parts.values())
    return total, {k: round(t, 3) for k, t in parts.items()}, flops / (total * 1e-3) / 1e12


def floor_maker(m, h, v, ref_h=None, dtype=torch.bfloat16):
    """A factory of the floor as one callable (floor_gemms back to back), its operands made when
    called and freed with the callable: liger_cpp's rows time it beside themselves (harness.paired_ms)."""

    def make():
        gemms = list(floor_gemms(m, h, v, ref_h, dtype).values())

        def floor():
            for gemm in gemms:
                gemm()

        return floor

    return make


# ---------------------------------------------------------------- timing rows
def _err(e):
    lines = str(e).strip().splitlines() or [type(e).__name__]
    return f"{type(e).__name__}: {lines[0]}"[:120]


def run_rows(case, shape_desc, variants, d, grads, floor_ms, ref_loss, paired_floor=None):
    """paired_floor (floor_maker's factory): liger_cpp's rows are timed in five rounds alternating
    with the floor, and their x floor is the median of the rounds' ratios (an H100 loses clock under
    sustained load: a floor timed once, first, flatters the rows timed soon after it)."""
    rows = [{"case": case, "shape": shape_desc, "impl": "GEMM floor", "ms": round(floor_ms, 3)}]
    for name, make in variants.items():
        r = {"case": case, "shape": shape_desc, "impl": name}
        try:
            f = make()

            def step(f=f):
                f(d).backward()

            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = f(d)
            out.backward()
            torch.cuda.synchronize()
            first_ms = (time.perf_counter() - t0) * 1e3
            dloss = abs(float(out.detach()) - ref_loss)
            del out
            for p in grads:
                p.grad = None
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()  # the second call, wall time (a steady call without the harness's discipline)
            torch.cuda.synchronize()
            second_ms = (time.perf_counter() - t0) * 1e3
            for p in grads:
                p.grad = None
            peak = peak_extra_bytes(step)
            for p in grads:
                p.grad = None
            ratio = None
            if paired_floor is not None and name.startswith("liger_cpp"):
                floor_fn = paired_floor()
                ms, paired_floor_ms, ratio = paired_ms(step, floor_fn, grad_to_none=grads)
                del floor_fn
                torch.cuda.empty_cache()
                r["floor_ms_paired"] = round(paired_floor_ms, 3)
            else:
                ms = bench_ms(step, grad_to_none=grads, warmup=1, rep=400)
            r.update(
                {
                    "ms": round(ms, 3),
                    "xFloor": round(ratio if ratio is not None else ms / floor_ms, 3),
                    "first_ms": round(first_ms, 1),
                    "second_ms": round(second_ms, 1),
                    "first/steady": round(first_ms / ms, 2),
                    "peak_MiB": round(peak / MiB),
                    "dLoss": f"{dloss:.1e}",
                }
            )
        except Exception as e:  # noqa: BLE001 - a failing baseline (OOM, API mismatch) is a row, not fatal
            r["error"] = _err(e)
        finally:
            for p in grads:
                p.grad = None
            torch.cuda.empty_cache()
        print(f"  {case} {name}: {r.get('ms')} ms {r.get('error', '')}", flush=True)
        rows.append(r)
    return rows


def grpo_rows(have_liger, ref_model):
    n, T, h, v = GRPO_SHAPE
    d = grpo_inputs(GRPO_SHAPE, "cuda", torch.bfloat16, ref_model=ref_model)
    floor, parts, rate = gemm_floor_ms(n * T, h, v, ref_h=h if ref_model else None)
    with torch.no_grad():
        ref_loss = float(
            eager_grpo(d["x"], d["w"], d["ids"], d["mask"], d["adv"], d["ref"], d["old"], d["rx"], d["rw"])
        )
    torch.cuda.empty_cache()
    case = "grpo, reference model in the loop" if ref_model else "grpo, ref_per_token_logps given"
    rows = run_rows(
        case,
        f"{n}x{T} H{h} V{v}",
        grpo_variants(have_liger, ref_model),
        d,
        [d["x"], d["w"]],
        floor,
        ref_loss,
        floor_maker(n * T, h, v, ref_h=h if ref_model else None),
    )
    rows[0].update({"gemm_ms": parts, "gemm_TFLOP/s": round(rate, 1)})
    return rows


def grpo_sweep():
    """liger_cpp's peak memory as completions grow; what grows should be dX (and the inputs) only."""
    _, T, h, v = GRPO_SHAPE
    mod = cl.LigerFusedLinearGRPOLoss(beta=BETA, loss_type="dapo")
    rows = []
    for n in SWEEP_COMPLETIONS + ("long",):
        shape = (1, LONG_T, h, v) if n == "long" else (n, T, h, v)
        r = {"completions": f"1 x {LONG_T}" if n == "long" else f"{n} x {T}", "H": h, "V": v}
        d = None
        try:
            d = grpo_inputs(shape, "cuda", torch.bfloat16)

            def step(d=d):
                mod(d["x"], d["w"], d["ids"], d["mask"], d["adv"], None, d["ref"], d["old"])[0].backward()

            step()
            d["x"].grad = d["w"].grad = None
            peak = peak_extra_bytes(step)
            d["x"].grad = d["w"].grad = None
            ms = bench_ms(step, grad_to_none=[d["x"], d["w"]], warmup=1, rep=1)
            m = shape[0] * shape[1]
            floor = 6.0 * m * h * v
            dx = d["x"].numel() * d["x"].element_size()
            r.update(
                {
                    "ms": round(ms, 2),
                    "TFLOP/s": round(floor / (ms * 1e-3) / 1e12, 1),
                    "peak_MiB": round(peak / MiB),
                    "dX_MiB": round(dx / MiB),
                    "peak-dX_MiB": round((peak - dx) / MiB),
                }
            )
        except Exception as e:  # noqa: BLE001
            r["error"] = _err(e)
        finally:
            del d
            torch.cuda.empty_cache()
        print(f"  sweep {r['completions']}: {r.get('peak_MiB')} MiB {r.get('error', '')}", flush=True)
        rows.append(r)
    return rows


def _head_rows(case, shape_desc, variants, d, grads, floor, eager, paired_floor):
    """run_rows for a distillation case, its loss checked against the eager formula, the floor's
    GEMM parts and rate on its first row."""
    floor_ms, parts, rate = floor
    with torch.no_grad():
        ref_loss = float(eager())
    torch.cuda.empty_cache()
    rows = run_rows(case, shape_desc, variants, d, grads, floor_ms, ref_loss, paired_floor)
    rows[0].update({"gemm_ms": parts, "gemm_TFLOP/s": round(rate, 1)})
    return rows


def jsd_rows(have_liger):
    m, hs, ht, v = JSD_SHAPE
    d = jsd_inputs(JSD_SHAPE, "cuda", torch.bfloat16)
    return _head_rows(
        "jsd distillation (GKD config)",
        f"M{m} Hs{hs} Ht{ht} V{v}",
        jsd_variants(have_liger),
        d,
        [d["xs"], d["ws"]],
        gemm_floor_ms(m, hs, v, ref_h=ht),
        lambda: eager_jsd(d["xs"], d["ws"], d["xt"], d["wt"], d["t"]),
        floor_maker(m, hs, v, ref_h=ht),
    )


def kl_rows(have_liger):
    m, h, v = KL_SHAPE
    d = kl_inputs(KL_SHAPE, "cuda", torch.bfloat16)
    return _head_rows(
        "kl distillation (cached teacher probabilities)",
        f"M{m} H{h} V{v}",
        kl_variants(have_liger),
        d,
        [d["x"], d["w"]],
        gemm_floor_ms(m, h, v),
        lambda: eager_kl(d["x"], d["w"], d["q"], d["t"]),
        floor_maker(m, h, v),
    )


# ---------------------------------------------------------------- where liger_cpp's time goes
def breakdown(case, make, d, grads):
    """GPU time of one steady liger_cpp fwd+bwd by category (bench_e2e's: gemm for cuBLAS, own for
    liger_cpp's row kernels, other for ATen's reductions, casts, fills) and its costliest kernels:
    what the x floor is made of."""
    from bench_e2e import kernel_category
    from torch.profiler import ProfilerActivity, profile

    f = make()
    for _ in range(2):
        f(d).backward()
        for p in grads:
            p.grad = None
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        f(d).backward()
        torch.cuda.synchronize()
    for p in grads:
        p.grad = None
    cats, names = {}, {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        ms = (e.time_range.end - e.time_range.start) / 1e3
        c = kernel_category(e.name)
        cats[c] = cats.get(c, 0.0) + ms
        key = (c, e.name[:80])
        total, launches = names.get(key, (0.0, 0))
        names[key] = (total + ms, launches + 1)
    top = sorted(names.items(), key=lambda kv: -kv[1][0])[:8]
    torch.cuda.empty_cache()
    return {
        "case": case,
        "by_category_ms": {k: round(v, 3) for k, v in sorted(cats.items())},
        "top": [{"category": c, "kernel": n, "ms": round(ms, 3), "launches": k} for (c, n), (ms, k) in top],
    }


def breakdowns(cases):
    """liger_cpp's GPU time by category, one profiled steady call per case of `cases`."""
    out = []
    for ref_model in (False, True):
        if ("grpo_ref" if ref_model else "grpo") not in cases:
            continue
        d = grpo_inputs(GRPO_SHAPE, "cuda", torch.bfloat16, ref_model=ref_model)
        case = "grpo, reference model in the loop" if ref_model else "grpo, ref_per_token_logps given"
        out.append(breakdown(case, grpo_variants(False, ref_model)["liger_cpp"], d, [d["x"], d["w"]]))
        del d
    if "jsd" in cases:
        d = jsd_inputs(JSD_SHAPE, "cuda", torch.bfloat16)
        jsd = jsd_variants(False)["liger_cpp"]
        out.append(breakdown("jsd distillation (GKD config)", jsd, d, [d["xs"], d["ws"]]))
        del d
    if "kl" in cases:
        d = kl_inputs(KL_SHAPE, "cuda", torch.bfloat16)
        out.append(breakdown("kl distillation", kl_variants(False)["liger_cpp"], d, [d["x"], d["w"]]))
    return out


# ---------------------------------------------------------------- CPU formula check
def cpu_check():
    """Each eager formula against liger_cpp at tiny fp32 shapes: loss and the sum of dX."""
    cases = [
        ("grpo", grpo_inputs((3, 16, 32, 64), "cpu", torch.float32), grpo_variants(False, False), "x", "w"),
        ("jsd", jsd_inputs((40, 16, 24, 64), "cpu", torch.float32), jsd_variants(False), "xs", "ws"),
        ("kl", kl_inputs((40, 16, 64), "cpu", torch.float32), kl_variants(False), "x", "w"),
    ]
    rows = []
    for case, d, variants, xk, wk in cases:
        for name, make in variants.items():
            loss = make()(d)
            loss.backward()
            rows.append(
                {
                    "case": case,
                    "impl": name,
                    "loss": round(float(loss.detach()), 6),
                    "dX0": float(d[xk].grad.sum()),
                }
            )
            d[xk].grad = d[wk].grad = None
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="no memory sweep, no 65,536-token completion")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: tiny fp32 formula check")
    ap.add_argument("--breakdown", action="store_true", help="also liger_cpp's GPU time by kernel category")
    ap.add_argument(
        "--cases", type=lambda v: v.split(","), default="grpo,grpo_ref,jsd,kl".split(","), help="in order"
    )
    ap.add_argument(
        "--plans", nargs="*", default=[], help="plan-override specs: one more liger_cpp row each (jsd, kl)"
    )
    ap.add_argument("--impls", type=lambda v: v.split(","), default=[], help="keep only these (all cases)")
    ap.add_argument(
        "--chunk-rows", type=int, nargs="*", default=[], help="liger_cpp rows at these chunk_rows"
    )
    args = ap.parse_args()
    PLANS[:] = args.plans
    CHUNK_ROWS[:] = args.chunk_rows
    IMPLS[:] = args.impls
    if args.device == "cpu":
        rows = cpu_check()
        print(fmt_table(rows, ["case", "impl", "loss", "dX0"]))
        if args.out:
            write_json(args.out, {"op": "rl_losses_cpu_check", "rows": rows})
        return
    t0 = time.perf_counter()
    have_liger = real_liger_importable()
    payload = {
        "op": "rl_losses",
        "dtype": "bfloat16",
        **meta(),
        "liger_cpp_version": liger_cpp.__version__,
        "liger_importable": have_liger,
        "liger_version": importlib.metadata.version("liger-kernel") if have_liger else None,
        "grpo": {"loss_type": "dapo", "beta": BETA, "epsilon_high": EPS_HI},
        "jsd": JSD_KW,
        "rows": [],
        "sweep_rows": [],
        "breakdown": [],
    }
    groups = {
        "grpo": lambda: grpo_rows(have_liger, ref_model=False),
        "grpo_ref": lambda: grpo_rows(have_liger, ref_model=True),
        "jsd": lambda: jsd_rows(have_liger),
        "kl": lambda: kl_rows(have_liger),
    }
    unknown = set(args.cases) - set(groups)
    if unknown:
        ap.error(f"--cases: unknown {sorted(unknown)}; expected some of {list(groups)}")

    def save():  # after every group: a run stopped at its time limit keeps what it measured
        payload["wall_s"] = round(time.perf_counter() - t0, 1)
        if args.out:
            write_json(args.out, payload)

    if args.breakdown:
        payload["breakdown"] = breakdowns(args.cases)
        save()
    for name in args.cases:
        payload["rows"] += groups[name]()
        save()
    if not args.quick:
        payload["sweep_rows"] = grpo_sweep()
        save()
    rows, sweep, split = payload["rows"], payload["sweep_rows"], payload["breakdown"]
    print(
        f"RL / distillation losses fwd+bwd (bf16) on {payload['gpu']}, commit {payload['commit']}; "
        f"{payload['wall_s']:.0f} s"
    )
    print(
        "floor: the GEMMs timed with torch.matmul at the same shapes (the policy's 3, + the reference's or "
        "teacher's forward); liger_cpp's x floor: against floor_ms_paired, timed beside the row"
    )
    cols = [
        "case",
        "shape",
        "impl",
        "ms",
        "xFloor",
        "floor_ms_paired",
        "first_ms",
        "second_ms",
        "first/steady",
        "peak_MiB",
        "dLoss",
        "error",
    ]
    print(fmt_table(rows, cols))
    for r in rows:
        if r["impl"] == "GEMM floor":
            print(f"  {r['case']}: GEMMs {r['gemm_ms']} ms, {r['gemm_TFLOP/s']} TFLOP/s")
    if sweep:
        print("\nGRPO memory as completions grow (liger_cpp, ref_per_token_logps given):")
        print(
            fmt_table(sweep, ["completions", "ms", "TFLOP/s", "peak_MiB", "dX_MiB", "peak-dX_MiB", "error"])
        )
    for b in split:
        print(f"\nliger_cpp GPU time, {b['case']}: {b['by_category_ms']} ms")
        for t in b["top"]:
            print(f"  {t['ms']:8.3f} ms  x{t['launches']:<3d} {t['category']:9s} {t['kernel']}")


if __name__ == "__main__":
    main()
