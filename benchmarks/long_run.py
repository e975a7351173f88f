"""A long training run (issue 29, item 4): the training demo's Llama ("1b": Llama 3.2 1B's shape) for
thousands of steps in bf16, plain Hugging Face against HF patched by liger_cpp, from the same
initial weights on the same batches, and a third run that measures the noise those numbers live in.

    python benchmarks/long_run.py --steps 2000 --batch 2 --seq 512 --out-dir out/long_run
    python benchmarks/long_run.py --device cpu --size tiny --steps 40 --batch 2 --seq 64  # a dry run

Runs (each in its own process, one after the other; the first saves the initial weights, the others
load them):
  hf      transformers' LlamaForCausalLM, SDPA attention
  liger   the same after apply_liger_kernel_to_llama() (RoPE, RMSNorm, SwiGLU, fused linear CE)
  hf_alt  transformers with eager attention: the same function as `hf` with another summation
          order (softmax and the attention GEMMs in other kernels), i.e. what "the same model in
          bf16" varies by. Its per-step distance from `hf` is the bound the liger run is held to.

Every step: forward, loss, backward, gradient clipping at --clip, fused AdamW, the loss and the
gradient norm read back (one synchronisation a step: the log). Reported (JSON, a text summary and a
PNG of the curves): non-finite losses / gradient norms / final weights; per-step loss differences
liger - hf and hf_alt - hf in windows (mean, 95th percentile, max) and the verdict "within bf16
noise": in every window mean |liger - hf| <= 2 x mean |hf_alt - hf| + 2^-8 x 0.01 x mean loss (the
last term keeps windows where both runs agree to a few bf16 units from deciding on zero); memory
allocated after step --settle against the end (growth <= 64 MiB), and the peak; tokens/s per
window. Each run's partial results are written every 100 steps, and the reports (summary, analysis,
PNG) after each run, so a run cut short by a time limit still reports (--report-only re-reads them).

Steady tokens/s. A window's tokens/s is batch x seq over its MEDIAN step time (steps after --settle;
one stalled step cannot decide a window, and stalls are counted on their own: steps over 1.5 x their
window's median, their excess time). Windows are the loss table's (1-200, 201-400, ...); in both
tables one with fewer than half a window of steps is shown, not judged. The 2026-12-02 H200 run
showed why the median alone is not enough: at batch 2 x 512 the step time drifts with the machine
over tens of seconds (autocorrelation 0.76 at lag 1 and 0.38 at lag 50 for HF; its 200-step window
medians 53-72 ms; isolated spikes only ~0.5 % of steps, at most 1.4 x the local median; no warm-up
after step 1; no periodic stall), and HF ran 12 % FASTER in its last quarter than in its first.
So every --probe-every steps, outside the timed step, each run times the same fixed probes: the
host's (500 tiny tensor adds on the run's device: Python, dispatcher, allocator and launch, the work
a host-bound step is made of) and the GPU's (a 2048^3 bf16 GEMM by CUDA events, and the SM clock
where NVML answers). A run is steady when every judged window's tokens/s is within 5 % of the run's
median, after correcting each window by the host probe (tokens/s x probe / the probes' median) when
the run has probes; raw otherwise. A slowdown of the run's own (memory fragmentation, growing Python
state) moves the step time and not the probe; a slower host moves both; a drift of the GPU's, or a
step only partly host-bound, leaves the corrected windows spread (the check errs towards "not
steady"). Reported beside it: the raw window spread, the probe's correlation with the window
medians, the host's share of each step (time until the host had queued the step / the step's time),
the last quarter's median step time over the first quarter's, the step after a probe over the
others, and the steps with a generation-2 garbage collection (gc.get_stats() around each step,
outside the timed span).

Time budget: --budget S (scripts/reliability_gpu.sh: 500) bounds the runs and their reports. Each
run gets a deadline: its share of the time left (less a reserve for the last report), by the runs'
relative costs (RUNS' "cost", from the 2026-12-02 H200 run: HF 65 ms a step, liger_cpp 40, HF eager
66, plus ~20 s of start-up each), so a slow run cannot take the time of the runs after it, and what
a run leaves unused goes to those after it. A worker past its deadline stops after the step, writes
its records (done: false, "stopped") and exits; a hard timeout (the share + 30 s) kills a worker
that hangs.

Batch and sequence: the issue's budget is one 10-minute device call. At the demo's batch 8 x 1024
a step takes ~0.12 s (liger_cpp, 70 k tokens/s) and ~0.16 s (HF): 2,000 steps of two stacks alone
would need 9.5 minutes, and the noise run a third as much again. The default is batch 2 x 512
(1,024 tokens a step, an eighth of the demo's; per-step overheads such as the fused AdamW over 1.24 B
parameters and the host's launches do not shrink): on the H200 (2026-12-02) a step took 40 ms
(liger_cpp) and 65 ms (HF, either attention), so the three runs take ~6.9 minutes with start-up
(HF ~150 s, liger_cpp ~100 s, HF eager ~153 s), in a device call of their own.
"""

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

_T0 = time.time()  # the process's start, near enough (the worker's start-up time)
# cost: a run's relative wall time (start-up included) in the budget's shares; the H200, 2026-12-02,
# 2,000 steps at 2 x 512: HF 20 + 130 s, liger_cpp 20 + 79 s, HF eager 20 + 133 s (800 steps x 66 ms)
RUNS = {
    "hf": dict(label="HF transformers (sdpa)", patched=False, attn="sdpa", cost=1.0),
    "liger": dict(label="liger_cpp (sdpa)", patched=True, attn="sdpa", cost=0.66),
    "hf_alt": dict(label="HF transformers (eager attention)", patched=False, attn="eager", cost=1.0),
}
BF16_EPS = 2.0**-8
STEADY_TOL = 0.05  # a window's tokens/s within 5 % of the run's median
STALL = 1.5  # a step over 1.5 x its window's median step time is a stall
REPORT_RESERVE_S = 15.0  # the budget kept for the last report (analysis, summary, PNG)
HARD_GRACE_S = 30.0  # a worker past its deadline + this is killed (it hangs)
MIN_SHARE_S = 30.0  # a run whose share is less is not started (its start-up alone is ~20 s)


# --------------------------------------------------------------------------------------------
# worker: one run


def _checksum(model) -> list:
    import torch

    with torch.no_grad():
        s = sum(p.detach().double().sum() for p in model.parameters())
        q = sum(p.detach().double().pow(2).sum() for p in model.parameters())
    return [float(s), float(q)]


def build_model(args, run: str, device):
    import torch

    from liger_cpp.demo import SIZES, build_llama_config

    if RUNS[run]["patched"]:
        from liger_cpp.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama()
    from transformers import LlamaForCausalLM

    cfg = build_llama_config(SIZES[args.size], args.seq, use_cache=False)
    cfg._attn_implementation = RUNS[run]["attn"]
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    init = Path(args.init) if args.init else None
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    if init is not None and init.exists():
        model.load_state_dict(torch.load(init, map_location=device, weights_only=True))
    elif init is not None:
        torch.save(model.state_dict(), init)
    model.train()
    return model


class Probes:
    """Fixed probes of the machine's speed, timed between steps (never inside one): the host's (tiny
    tensor adds on the run's device: Python, dispatcher, allocator, kernel launch) and the GPU's (a
    2048^3 bf16 GEMM by CUDA events; the SM clock where NVML answers). The same in every run."""

    def __init__(self, torch, device):
        self.torch, self.device = torch, device
        self.cuda = device.type == "cuda"
        self.x = torch.zeros(8, device=device)
        self.nvml = self.cuda
        if self.cuda:  # 24 MiB, allocated once before the memory statistics start
            g = torch.Generator(device=device).manual_seed(2)
            self.a = torch.randn(2048, 2048, device=device, dtype=torch.bfloat16, generator=g)
            self.b = torch.randn(2048, 2048, device=device, dtype=torch.bfloat16, generator=g)
            self.c = torch.empty_like(self.a)
            self.e0 = torch.cuda.Event(enable_timing=True)
            self.e1 = torch.cuda.Event(enable_timing=True)

    def __call__(self, step: int) -> dict:
        torch = self.torch
        t0 = time.perf_counter()
        y = self.x
        for _ in range(500):
            y = y + 1.0
        host = time.perf_counter() - t0  # the host's time to queue them
        out = dict(step=step, host_s=host, gpu_s=None, sm_mhz=None)
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.e0.record()
            for _ in range(20):
                torch.mm(self.a, self.b, out=self.c)
            self.e1.record()
            self.e1.synchronize()
            out["gpu_s"] = self.e0.elapsed_time(self.e1) / 1e3 / 20
            if self.nvml:
                try:
                    out["sm_mhz"] = torch.cuda.clock_rate(self.device)
                except Exception:  # no NVML: no clock, and no second try
                    self.nvml = False
        return out


def _gc_counts() -> list:
    return [g["collections"] for g in gc.get_stats()]


def worker(args, run: str, result_path=None) -> dict:
    """Trains one run; returns (and every 100 steps writes) its per-step records. Stops after the
    step that passes args.deadline (seconds since the epoch; 0: none), its records marked stopped."""
    import torch

    from liger_cpp.demo import corpus

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    model = build_model(args, run, device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, fused=cuda)
    data = torch.frombuffer(bytearray(corpus()), dtype=torch.uint8).long()
    gen = torch.Generator().manual_seed(1)
    probe_every = getattr(args, "probe_every", 20)
    deadline = getattr(args, "deadline", 0.0) or 0.0
    probes = Probes(torch, device) if probe_every else None
    rec = dict(
        run=run,
        label=RUNS[run]["label"],
        init_checksum=_checksum(model),
        params=sum(p.numel() for p in model.parameters()),
        device=torch.cuda.get_device_name(device) if cuda else "CPU",
        losses=[],
        grad_norms=[],
        step_s=[],
        host_s=[],  # from the step's start until the host had queued all of it (before the read-back)
        gc=[],  # collections of generations 0, 1, 2 during the step
        mem_allocated=[],
        mem_peak=[],
        probes=[],
        setup_s=None,
    )
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)

    def save():
        if result_path:
            Path(result_path).write_text(json.dumps(rec))

    t_start = time.perf_counter()
    rec["setup_s"] = time.time() - _T0
    for step in range(args.steps):
        starts = torch.randint(0, data.numel() - args.seq, (args.batch,), generator=gen)
        ids = torch.stack([data[s : s + args.seq] for s in starts.tolist()]).to(device)
        if cuda:
            torch.cuda.synchronize(device)
        g0 = _gc_counts()
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t_host = time.perf_counter()
        lv, gv = loss.item(), gn.item()  # synchronises: the step's end
        t1 = time.perf_counter()
        g1 = _gc_counts()
        rec["step_s"].append(t1 - t0)
        rec["host_s"].append(t_host - t0)
        rec["gc"].append([b - a for a, b in zip(g0, g1)])
        rec["losses"].append(lv)
        rec["grad_norms"].append(gv)
        rec["mem_allocated"].append(torch.cuda.memory_allocated(device) if cuda else 0)
        rec["mem_peak"].append(torch.cuda.max_memory_allocated(device) if cuda else 0)
        if probes is not None and (step + 1) % probe_every == 0:
            rec["probes"].append(probes(step + 1))
        late = deadline and time.time() >= deadline and step + 1 < args.steps
        if late:
            rec["stopped"] = f"deadline, after step {step + 1} of {args.steps}"
        if (step + 1) % 100 == 0 or step + 1 == args.steps or late:
            rec["train_s"] = time.perf_counter() - t_start
            save()
            el = time.perf_counter() - t_start
            sys.stderr.write(f"  {run:<7} step {step + 1}/{args.steps}  loss {lv:.4f}  {el:.0f} s\n")
            sys.stderr.flush()
        if late:
            sys.stderr.write(f"  {run:<7} stopped at its deadline after step {step + 1}\n")
            break
    with torch.no_grad():
        rec["final_weights_finite"] = bool(all(torch.isfinite(p).all() for p in model.parameters()))
    rec["done"] = len(rec["losses"]) == args.steps
    save()
    return rec


# --------------------------------------------------------------------------------------------
# analysis


def _finite(xs) -> bool:
    return all(math.isfinite(x) for x in xs)


def _pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))] if s else float("nan")


def windows(n: int, size: int):
    return [(s, min(n, s + size)) for s in range(0, n, size)]


def _corr(xs, ys):
    if len(xs) < 3:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy) if sx and sy else None


def throughput(r: dict, batch: int, seq: int, window: int, settle: int) -> dict:
    """Tokens/s of one run per window (the module docstring: median step time, stalls apart,
    corrected by the host probe where recorded) and the verdict `steady`."""
    t, host, gcs = r["step_s"], r.get("host_s") or [], r.get("gc") or []
    probes = r.get("probes") or []
    tokens = batch * seq
    rows = []
    for s, e in windows(len(t), window):
        w = t[max(s, settle) : e]
        if not w:
            continue
        med = statistics.median(w)
        stalls = [x - STALL * med for x in w if x > STALL * med]
        row = dict(
            steps=[max(s, settle) + 1, e],
            n=len(w),
            judged=len(w) >= window / 2,
            median_step_s=med,
            tokens_per_s=tokens / med,
            tokens_per_s_mean=tokens * len(w) / sum(w),
            stalls=len(stalls),
            stall_excess_s=sum(stalls),
        )
        if len(host) >= e:
            row["host_share"] = statistics.median(h / x for h, x in zip(host[max(s, settle) : e], w))
        if len(gcs) >= e:
            g2 = [x for x, g in zip(w, gcs[max(s, settle) : e]) if len(g) > 2 and g[2]]
            row["gc2_steps"] = len(g2)
            row["gc2_excess_s"] = sum(x - med for x in g2)
        pw = [p for p in probes if s < p["step"] <= e and p["step"] > settle]
        if pw:
            row["host_probe_s"] = statistics.median(p["host_s"] for p in pw)
            gp = [p["gpu_s"] for p in pw if p.get("gpu_s") is not None]
            row["gpu_probe_s"] = statistics.median(gp) if gp else None
            mhz = [p["sm_mhz"] for p in pw if p.get("sm_mhz") is not None]
            row["sm_mhz"] = statistics.median(mhz) if mhz else None
        rows.append(row)
    judged = [w for w in rows if w["judged"]]
    timed = t[settle:]
    out = dict(
        windows=rows,
        tokens_per_s=tokens * len(timed) / sum(timed) if timed else None,
        stalls=sum(w["stalls"] for w in rows),
        stall_share=sum(w["stall_excess_s"] for w in rows) / sum(timed) if timed else None,
        gc2_steps=sum(w.get("gc2_steps", 0) for w in rows) if gcs else None,
        setup_s=r.get("setup_s"),
        train_s=r.get("train_s"),
    )
    after = {p["step"] for p in probes if p["step"] >= settle}  # 0-based: the step after a probe
    nxt = [x for i, x in enumerate(t) if i in after]
    rest = [x for i, x in enumerate(t) if i >= settle and i not in after]
    # a probe must not change the step after it (GPU clocks, caches): that step over the others
    out["after_probe_ratio"] = statistics.median(nxt) / statistics.median(rest) if nxt and rest else None
    q = len(timed) // 4
    out["last_over_first_quarter"] = (
        statistics.median(timed[-q:]) / statistics.median(timed[:q]) if q >= window // 2 and q else None
    )
    tps = [w["tokens_per_s"] for w in judged]
    out["steady"] = None
    if len(tps) >= 2:
        med = statistics.median(tps)
        out["raw_spread"] = (max(tps) - min(tps)) / med
        out["raw_max_dev"] = max(abs(x - med) for x in tps) / med
        basis, vals = "raw", tps
        hp = [w.get("host_probe_s") for w in judged]
        if all(hp):
            ref = statistics.median(hp)
            vals = [x * h / ref for x, h in zip(tps, hp)]
            for w, v in zip(judged, vals):
                w["tokens_per_s_host_corrected"] = v
            out["host_probe_spread"] = (max(hp) - min(hp)) / ref
            out["host_probe_corr"] = _corr([w["median_step_s"] for w in judged], hp)
            basis = "host-corrected"
            m2 = statistics.median(vals)
            out["corrected_spread"] = (max(vals) - min(vals)) / m2
            out["corrected_max_dev"] = max(abs(x - m2) for x in vals) / m2
        out["steady_basis"] = basis
        out["max_dev"] = out["corrected_max_dev"] if basis != "raw" else out["raw_max_dev"]
        out["steady"] = out["max_dev"] <= STEADY_TOL
    return out


def analyse(results: dict, batch: int, seq: int, window: int = 200, settle: int = 10, expected=None) -> dict:
    """Statistics and verdicts from the runs' records (see the module docstring); `expected`: the
    runs asked for (complete only when each of them ran all its steps)."""
    out = dict(window=window, settle=settle, runs={})
    for k, r in results.items():
        out["runs"][k] = dict(
            label=r.get("label", k),
            steps=len(r["losses"]),
            done=bool(r.get("done")),
            losses_finite=_finite(r["losses"]),
            grad_norms_finite=_finite(r["grad_norms"]),
            final_weights_finite=r.get("final_weights_finite"),
            first_loss=r["losses"][0] if r["losses"] else None,
            last_loss=r["losses"][-1] if r["losses"] else None,
        )
    ok = dict(finite=all(v["losses_finite"] and v["grad_norms_finite"] for v in out["runs"].values()))
    ok["finite"] = ok["finite"] and all(v["final_weights_finite"] is not False for v in out["runs"].values())
    checks = [results[k].get("init_checksum") for k in results]
    out["same_init"] = all(c == checks[0] for c in checks)
    ok["same_init"] = out["same_init"]

    hf = results.get("hf")
    if hf and "liger" in results:
        n = min(len(hf["losses"]), len(results["liger"]["losses"]))
        alt = results.get("hf_alt")
        n_alt = min(n, len(alt["losses"])) if alt else 0
        d = [results["liger"]["losses"][i] - hf["losses"][i] for i in range(n)]
        dn = [alt["losses"][i] - hf["losses"][i] for i in range(n_alt)] if alt else []
        rows = []
        within, judged = True, 0
        for s, e in windows(n, window):
            ad = [abs(x) for x in d[s:e]]
            mean_loss = statistics.fmean(hf["losses"][s:e])
            row = dict(
                steps=[s + 1, e], mean_abs=statistics.fmean(ad), p95_abs=_pct(ad, 0.95), max_abs=max(ad)
            )
            row["mean_loss"] = mean_loss
            if e <= n_alt:
                an = [abs(x) for x in dn[s:e]]
                row.update(
                    noise_mean_abs=statistics.fmean(an), noise_p95_abs=_pct(an, 0.95), noise_max_abs=max(an)
                )
                bound = 2.0 * row["noise_mean_abs"] + BF16_EPS * 0.01 * mean_loss
                row["bound"] = bound
                row["within"] = row["mean_abs"] <= bound
                if e - s >= window / 2:  # the tail of a run cut short: shown, not judged
                    within = within and row["within"]
                    judged += 1
            rows.append(row)
        out["loss_diff"] = dict(
            windows=rows,
            step1_abs=abs(d[0]) if d else None,
            mean_abs=statistics.fmean(abs(x) for x in d) if d else None,
            max_abs=max(abs(x) for x in d) if d else None,
            noise_mean_abs=statistics.fmean(abs(x) for x in dn) if dn else None,
            noise_max_abs=max(abs(x) for x in dn) if dn else None,
            noise_steps=n_alt,
        )
        ok["within_noise"] = within if judged else None

    for k, r in results.items():
        v = out["runs"][k]
        mem = r["mem_allocated"]
        if len(mem) > settle:
            v["mem_after_settle"] = mem[settle - 1]
            v["mem_end"] = mem[-1]
            v["mem_growth"] = mem[-1] - mem[settle - 1]
            v["mem_max_after_settle"] = max(mem[settle - 1 :])
            v["peak_after_settle"] = r["mem_peak"][-1]
            v["peak_at_settle"] = r["mem_peak"][settle - 1]
        tp = throughput(r, batch, seq, window, settle)
        v["throughput"] = tp
        v["tokens_per_s"] = tp["tokens_per_s"]
        v["tokens_per_s_windows"] = [w["tokens_per_s"] for w in tp["windows"]]
        v["tokens_per_s_spread"] = tp.get("raw_spread")
        v["steady"] = tp["steady"]
        if r.get("stopped"):
            v["stopped"] = r["stopped"]
    ok["no_memory_growth"] = all(v.get("mem_growth", 0) <= 64 * 2**20 for v in out["runs"].values())
    ok["peak_steady"] = all(
        v.get("peak_after_settle", 0) <= v.get("peak_at_settle", 0) + 64 * 2**20 for v in out["runs"].values()
    )
    steady = [v["steady"] for v in out["runs"].values() if v["steady"] is not None]
    ok["tokens_per_s_steady"] = all(steady) if steady else None
    out["missing"] = [k for k in expected or () if k not in results]
    ok["complete"] = all(v["done"] for v in out["runs"].values()) and not out["missing"]
    out["ok"] = ok
    return out


def _f(x, spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


def summary(args, a: dict) -> str:
    gib = 2.0**30
    lines = [
        f"Long run: Llama '{args.size}', {args.dtype}, batch {args.batch} x {args.seq}, {args.steps} steps"
    ]
    for v in a["runs"].values():
        lines.append(
            f"  {v['label']:<34} steps {v['steps']:>5}  loss {_f(v['first_loss'], '.4f')} -> "
            f"{_f(v['last_loss'], '.4f')}  {_f(v.get('tokens_per_s'), ',.0f')} tok/s"
            f"  mem {v.get('mem_after_settle', 0) / gib:.2f} -> {v.get('mem_end', 0) / gib:.2f} GiB"
            f"  peak {v.get('peak_after_settle', 0) / gib:.2f} GiB"
            + (f"  STOPPED ({v['stopped']})" if v.get("stopped") else "")
        )
    ld = a.get("loss_diff")
    if ld:
        lines.append(
            f"  |liger - hf|: step 1 {_f(ld['step1_abs'], '.2e')}, mean {_f(ld['mean_abs'], '.3e')}, "
            f"max {_f(ld['max_abs'], '.3e')}"
        )
        if ld["noise_steps"]:
            lines.append(
                f"  |hf_alt - hf| (noise, {ld['noise_steps']} steps): mean {ld['noise_mean_abs']:.3e}, "
                f"max {ld['noise_max_abs']:.3e}"
            )
        lines.append(
            f"  {'steps':>13} {'mean|d|':>10} {'p95|d|':>10} {'noise mean':>11} {'bound':>10}  within"
        )
        for w in ld["windows"]:
            lines.append(
                f"  {w['steps'][0]:>6}-{w['steps'][1]:<6} {w['mean_abs']:>10.3e} {w['p95_abs']:>10.3e} "
                f"{w.get('noise_mean_abs', float('nan')):>11.3e} {w.get('bound', float('nan')):>10.3e}  "
                f"{w.get('within', '-')}"
            )
    lines.append(
        f"  tokens/s per {a['window']}-step window (k; median step time, steps after {a['settle']}; "
        "* not judged: under half a window):"
    )
    for k, v in a["runs"].items():
        tp = v["throughput"]
        cells = " ".join(f"{w['tokens_per_s'] / 1e3:.1f}{'' if w['judged'] else '*'}" for w in tp["windows"])
        lines.append(f"    {k:<7} {cells}")
        if any("tokens_per_s_host_corrected" in w for w in tp["windows"]):
            cells = " ".join(
                _f(w.get("tokens_per_s_host_corrected", 0) / 1e3 or None, ".1f") for w in tp["windows"]
            )
            lines.append(f"    {'':<7} {cells}  (host-corrected)")
        host = [w["host_probe_s"] * 1e3 for w in tp["windows"] if w.get("host_probe_s")]
        gpu = [w["gpu_probe_s"] * 1e6 for w in tp["windows"] if w.get("gpu_probe_s")]
        mhz = [w["sm_mhz"] for w in tp["windows"] if w.get("sm_mhz")]
        share = [w["host_share"] for w in tp["windows"] if w.get("host_share") is not None]
        lines.append(
            f"    {'':<7} raw spread {_f(tp.get('raw_spread'), '.1%')}, "
            f"max dev {_f(tp.get('raw_max_dev'), '.1%')}"
            + (
                f"; host-corrected max dev {_f(tp.get('corrected_max_dev'), '.1%')}"
                f" (host probe spread {_f(tp.get('host_probe_spread'), '.1%')},"
                f" r with the step {_f(tp.get('host_probe_corr'), '.2f')})"
                if tp.get("steady_basis") == "host-corrected"
                else ""
            )
            + f"; steady ({tp.get('steady_basis', '-')}): {tp['steady']}"
        )
        extra = [
            f"last/first quarter step time {_f(tp['last_over_first_quarter'], '.3f')}",
            f"stalls (> {STALL} x median) {tp['stalls']} ({_f(tp['stall_share'], '.2%')} of the time)",
        ]
        if tp.get("gc2_steps") is not None:
            extra.append(f"steps with a gen-2 gc {tp['gc2_steps']}")
        if share:
            extra.append(f"host share {min(share):.2f}-{max(share):.2f}")
        if host:
            extra.append(f"host probe {min(host):.2f}-{max(host):.2f} ms")
        if tp.get("after_probe_ratio"):
            extra.append(f"step after a probe / others {tp['after_probe_ratio']:.3f}")
        if gpu:
            extra.append(f"GEMM probe {min(gpu):.0f}-{max(gpu):.0f} us")
        if mhz:
            extra.append(f"SM {min(mhz):.0f}-{max(mhz):.0f} MHz")
        if tp.get("setup_s") is not None:
            extra.append(f"start-up {tp['setup_s']:.0f} s, steps {_f(tp.get('train_s'), '.0f')} s")
        lines.append(f"    {'':<7} " + "; ".join(extra))
    if a.get("missing"):
        lines.append(f"  not run: {', '.join(a['missing'])}")
    lines.append("  checks: " + ", ".join(f"{k}={v}" for k, v in a["ok"].items()))
    lines.append(f"  same initial weights in every run: {a['same_init']}")
    return "\n".join(lines)


def _legend(ax, **kw):
    if ax.get_legend_handles_labels()[0]:  # a report before the runs it compares
        ax.legend(**kw)


def plot(results: dict, a: dict, path: str, title: str) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no PNG"
    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    ax = axes[0][0]
    for k, r in results.items():
        ax.plot(range(1, len(r["losses"]) + 1), r["losses"], label=RUNS[k]["label"], lw=0.8, alpha=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_yscale("log")
    _legend(ax)
    ax.grid(alpha=0.3)
    ax = axes[0][1]
    hf = results.get("hf")
    for k, c in (("liger", "tab:orange"), ("hf_alt", "tab:green")):
        if hf and k in results:
            n = min(len(hf["losses"]), len(results[k]["losses"]))
            d = [abs(results[k]["losses"][i] - hf["losses"][i]) + 1e-12 for i in range(n)]
            ax.plot(range(1, n + 1), d, lw=0.4, alpha=0.35, color=c)
            w = windows(n, max(5, n // 40))
            ax.plot(
                [e for _, e in w],
                [statistics.fmean(d[s:e]) for s, e in w],
                color=c,
                label=f"{k} - hf (windowed mean)",
            )
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("|loss difference| vs HF (sdpa)")
    _legend(ax)
    ax.grid(alpha=0.3)
    ax = axes[1][0]
    for k, r in results.items():
        ax.plot(
            range(1, len(r["mem_allocated"]) + 1),
            [m / 2**30 for m in r["mem_allocated"]],
            label=RUNS[k]["label"],
        )
    ax.set_xlabel("step")
    ax.set_ylabel("memory allocated after the step (GiB)")
    ax.ticklabel_format(axis="y", useOffset=False)
    _legend(ax)
    ax.grid(alpha=0.3)
    ax = axes[1][1]
    for i, (k, v) in enumerate(a["runs"].items()):
        rows = v["throughput"]["windows"]
        c = f"C{i}"
        ends = [w["steps"][1] for w in rows]
        ax.plot(ends, [w["tokens_per_s"] / 1e3 for w in rows], "o-", color=c, label=RUNS[k]["label"])
        hc = [
            (e, w["tokens_per_s_host_corrected"] / 1e3)
            for e, w in zip(ends, rows)
            if "tokens_per_s_host_corrected" in w
        ]
        if hc:
            ax.plot(*zip(*hc), "x--", color=c, alpha=0.7, label=f"{k}, host-corrected")
    ax.set_xlabel("step (window end)")
    ax.set_ylabel(f"k tokens/s ({a['window']}-step windows, median step)")
    _legend(ax, fontsize=7)
    ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"Plot written to {path}"


# --------------------------------------------------------------------------------------------
# driver


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", default="1b", choices=["tiny", "small", "1b"])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--runs", default="hf,liger,hf_alt")
    p.add_argument("--window", type=int, default=200)
    p.add_argument("--settle", type=int, default=10, help="steps before memory is taken as settled")
    p.add_argument("--probe-every", type=int, default=20, help="steps between the machine probes (0: none)")
    p.add_argument("--budget", type=float, default=0, help="seconds for all runs and reports (0: no limit)")
    p.add_argument("--after-each", default="", help="a shell command run after each run's reports")
    p.add_argument("--out-dir", default="long_run")
    p.add_argument("--report-only", action="store_true", help="analyse the runs' files already written")
    p.add_argument("--run", help=argparse.SUPPRESS)  # worker mode
    p.add_argument("--init", default="", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def report(args, out: Path, runs: list):
    """Analysis, summary and PNG of the runs' files in `out` so far; None when there are none."""
    results = {r: json.loads((out / f"{r}.json").read_text()) for r in runs if (out / f"{r}.json").exists()}
    if not results:
        return None
    a = analyse(results, args.batch, args.seq, args.window, args.settle, expected=runs)
    text = summary(args, a)
    (out / "summary.txt").write_text(text + "\n")
    (out / "analysis.json").write_text(json.dumps(dict(args=vars(args), analysis=a), indent=1))
    return a, text, plot(results, a, str(out / "long_run.png"), text.splitlines()[0])


def shares(left: float, runs: list) -> float:
    """The first of `runs`' share of `left` seconds, by RUNS' relative costs."""
    cost = [RUNS[r]["cost"] for r in runs]
    return max(0.0, left) * cost[0] / sum(cost)


def main(argv=None) -> int:
    args = parse(argv)
    if args.run:
        worker(args, args.run, args.result)
        return 0
    t_end = time.time() + args.budget if args.budget else None
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = args.runs.split(",")
    init = Path(os.environ.get("TMPDIR", "/tmp")) / f"long_run_init_{os.getpid()}.pt"
    common = [
        f"--{k.replace('_', '-')}={getattr(args, k)}"
        for k in ("device", "size", "steps", "batch", "seq", "dtype", "lr", "clip", "probe_every")
    ]
    rep = None
    if not args.report_only:  # an earlier invocation's files must not pass for this one's
        for run in runs:
            (out / f"{run}.json").unlink(missing_ok=True)
    try:
        for i, run in enumerate(runs):
            if args.report_only:
                break
            res = out / f"{run}.json"
            cmd = [sys.executable, __file__, *common, f"--run={run}", f"--init={init}", f"--result={res}"]
            hard = None
            if t_end is not None:
                share = shares(t_end - time.time() - REPORT_RESERVE_S, runs[i:])
                if share < MIN_SHARE_S:
                    print(f"long_run: {run}: not run, {share:.0f} s left for it", flush=True)
                    continue
                cmd.append(f"--deadline={time.time() + share:.3f}")
                hard = share + HARD_GRACE_S
                print(f"long_run: {run}: {share:.0f} s of the {t_end - time.time():.0f} s left", flush=True)
            t0 = time.time()
            try:
                rc = subprocess.run(cmd, timeout=hard).returncode
            except subprocess.TimeoutExpired:
                rc = f"killed after {hard:.0f} s"
            print(f"long_run: {run} finished in {time.time() - t0:.0f} s (exit {rc})", flush=True)
            rep = report(args, out, runs)
            if rep and args.after_each:
                subprocess.run(args.after_each, shell=True)
    finally:
        init.unlink(missing_ok=True)
    if args.report_only:
        rep = report(args, out, runs)
    if rep is None:
        print("long_run: no results")
        return 1
    a, text, plotted = rep
    print(text)
    print(plotted)
    return 0 if all(v is not False for v in a["ok"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
