"""Chunked preference-loss benchmark (bf16, fwd+bwd): DPO (sigmoid, reference model), ORPO, CPO,
SimPO and KTO (reference model) from liger_cpp.chunked_loss against PyTorch eager (full logits:
x @ W.T, log_softmax(logits.float()), gathered per-token log-probs, each loss's published TRL-style
formula, the reference model's forward under no_grad), a torch.compile of that eager function, and
Liger-Kernel's chunked losses (when importable), in one run.

Reported per row: median ms, x GEMM floor (policy 6*M*H*V FLOPs, plus 2*M*H*V for the reference
model's forward in DPO and KTO, at the bf16 GEMM rate measured in this run with harness.gemm_tflops;
M = 2 * pairs * T, KTO gets the same 2 * pairs unpaired sequences), TFLOP/s of those FLOPs, peak
memory above the inputs (max_memory_allocated after a reset, minus what was allocated before the
call; it includes the returned dX and dW), and |loss - eager loss| of the first call (catches a
wrong argument order or a different loss configuration in a baseline).
A second table ("memory flat as the batch grows"): liger_cpp's peak MiB for DPO and ORPO at
2, 4, 8, 16 pairs (T 1024, H 4096, V 128256, chunk 1), with the returned dX (which grows with the
batch) subtracted in its own column.

--device cpu: a debug check with tiny fp32 shapes (no timing, no Liger, no compile): each eager
formula against liger_cpp's loss, dX and dW (max abs differences; expect ~1e-5).
Usage: python benchmarks/bench_chunked_loss.py [--out FILE.json] [--quick] [--losses dpo,orpo,cpo,simpo,kto]
       [--chunk-sizes 1,2] [--no-batch-sweep] [--device cpu]
"""

import argparse
import time

import torch
import torch.nn.functional as F
from harness import bench_ms, fmt_table, gemm_tflops, meta, peak_extra_bytes, try_import_liger, write_json

import liger_cpp
from liger_cpp import chunked_loss as cl

SHAPES = [(8, 1024, 4096, 128256), (4, 512, 4096, 128256)]  # pairs, T, H, V
CPU_SHAPE = (3, 16, 64, 256)
SWEEP_PAIRS = (2, 4, 8, 16)
SWEEP_TVH = (1024, 4096, 128256)
SWEEP_LOSSES = ("dpo", "orpo")
IGNORE, BETA, ALPHA, GAMMA = -100, 0.1, 1.0, 0.5
MiB = 1 << 20


# ---------------------------------------------------------------- eager references (full logits)
def _seq_logps(x, w, t, avg=False):
    """Per-sequence log-probs (sum, or mean over non-ignored tokens), masked token log-probs, mask."""
    logp = F.log_softmax((x @ w.t()).float(), dim=-1)
    mask = t != IGNORE
    tok = logp.gather(-1, torch.where(mask, t, 0).unsqueeze(-1)).squeeze(-1) * mask
    s = tok.sum(-1)
    return (s / mask.sum(-1) if avg else s), tok, mask


def _nll(tok, mask, B):
    """Chosen-half NLL averaged over its non-ignored tokens (the NLL term of ORPO/CPO/SimPO)."""
    return -tok[:B].sum() / mask[:B].sum()


def eager_dpo(w, x, t, rx, rw, lab):
    B = t.shape[0] // 2
    s = _seq_logps(x, w, t)[0]
    with torch.no_grad():
        rs = _seq_logps(rx, rw, t)[0]
    d = BETA * ((s[:B] - rs[:B]) - (s[B:] - rs[B:]))
    return -F.logsigmoid(d).mean()


def eager_orpo(w, x, t, rx, rw, lab):
    B = t.shape[0] // 2
    s, tok, mask = _seq_logps(x, w, t, avg=True)
    c, r = s[:B], s[B:]
    log_odds = (c - r) - (torch.log1p(-torch.exp(c)) - torch.log1p(-torch.exp(r)))
    return -BETA * F.logsigmoid(log_odds).mean() + _nll(tok, mask, B)


def eager_cpo(w, x, t, rx, rw, lab):
    B = t.shape[0] // 2
    s, tok, mask = _seq_logps(x, w, t)
    d = BETA * (s[:B] - s[B:])
    return -F.logsigmoid(d).mean() + ALPHA * _nll(tok, mask, B)


def eager_simpo(w, x, t, rx, rw, lab):
    B = t.shape[0] // 2
    s, tok, mask = _seq_logps(x, w, t, avg=True)
    d = BETA * (s[:B] - s[B:]) - GAMMA
    return -F.logsigmoid(d).mean() + ALPHA * _nll(tok, mask, B)


def eager_kto(w, x, t, rx, rw, lab):
    s = _seq_logps(x, w, t)[0]
    with torch.no_grad():
        rs = _seq_logps(rx, rw, t)[0]
    sign = torch.where(lab, 1.0, -1.0)
    return (1 - torch.sigmoid(BETA * (s - rs) * sign)).mean()


# ---------------------------------------------------------------- losses: config and call order
# Same keyword arguments for liger_cpp's and Liger's modules (only ones liger-kernel.md §3 lists).
# The paired modules take (lin_weight, _input, target, bias, ...); KTO takes (_input, lin_weight,
# target, bias, preference_labels, ref_input, ref_weight, ref_bias, kl), in both libraries.
def _call_without_reference(m, w, x, t, rx, rw, lab):
    """ORPO, CPO, SimPO: (weight, input, target, bias) only; the loss is the first output."""
    return m(w, x, t, None)[0]


LOSSES = {
    "dpo": {
        "cls": "LigerFusedLinearDPOLoss",
        "kw": {"beta": BETA, "use_ref_model": True, "loss_type": "sigmoid", "compute_nll_loss": False},
        "call": lambda m, w, x, t, rx, rw, lab: m(w, x, t, None, rx, rw)[0],
        "eager": eager_dpo,
        "ref": True,
        "desc": "sigmoid, reference model",
    },
    "orpo": {
        "cls": "LigerFusedLinearORPOLoss",
        "kw": {"beta": BETA, "compute_nll_loss": True},
        "call": _call_without_reference,
        "eager": eager_orpo,
        "ref": False,
        "desc": "with NLL",
    },
    "cpo": {
        "cls": "LigerFusedLinearCPOLoss",
        "kw": {"beta": BETA, "alpha": ALPHA, "compute_nll_loss": True, "average_log_prob": False},
        "call": _call_without_reference,
        "eager": eager_cpo,
        "ref": False,
        "desc": "with NLL",
    },
    "simpo": {
        "cls": "LigerFusedLinearSimPOLoss",
        "kw": {"beta": BETA, "alpha": ALPHA, "gamma": GAMMA, "compute_nll_loss": True},
        "call": _call_without_reference,
        "eager": eager_simpo,
        "ref": False,
        "desc": "with NLL",
    },
    "kto": {
        "cls": "LigerFusedLinearKTOLoss",
        "kw": {"beta": BETA, "use_ref_model": True},
        "call": lambda m, w, x, t, rx, rw, lab: m(x, w, t, None, lab, rx, rw)[0],
        "eager": eager_kto,
        "ref": True,
        "desc": "unpaired, reference model",
    },
}


def variants(loss, have_liger, chunk_sizes, device):
    """name -> factory returning the loss function f(w, x, t, rx, rw, lab); factories run inside the
    per-row try so a baseline whose constructor rejects an argument becomes an error row."""
    spec = LOSSES[loss]
    out = {}
    for cs in chunk_sizes:

        def make(cs=cs):
            mod = getattr(cl, spec["cls"])(chunk_size=cs, **spec["kw"])
            return lambda *a, mod=mod: spec["call"](mod, *a)

        out[f"liger_cpp[chunk={cs}]"] = make
    out["eager"] = lambda: spec["eager"]
    if device == "cpu":
        return out
    out["compile"] = lambda: _compiled(loss)
    if have_liger:

        def make_liger():
            import liger_kernel.chunked_loss as lk

            lmod = getattr(lk, spec["cls"])(**spec["kw"])
            return lambda *a: spec["call"](lmod, *a)

        out["liger"] = make_liger
    return out


_COMPILED = {}


def _compiled(loss):
    # One wrapper per loss: the second shape recompiles (static shapes) under the same wrapper.
    if loss not in _COMPILED:
        _COMPILED[loss] = torch.compile(LOSSES[loss]["eager"], dynamic=False)
    return _COMPILED[loss]


def make_inputs(shape, device, dtype, seed=0):
    p, T, h, v = shape
    # Generated on the device: CPU randn of two 128256 x 4096 weights would take seconds per shape.
    g = torch.Generator(device=device).manual_seed(seed)

    def rnd(*s, scale=1.0):
        return (torch.randn(*s, generator=g, device=device) * scale).to(dtype)

    x = rnd(2 * p, T, h).requires_grad_(True)
    w = rnd(v, h, scale=h**-0.5).requires_grad_(True)
    rx = rnd(2 * p, T, h)
    rw = rnd(v, h, scale=h**-0.5)
    t = torch.randint(0, v, (2 * p, T), generator=g, device=device)
    t[:, : T // 4] = IGNORE  # prompt tokens
    t[0, -3:] = IGNORE  # and a ragged end, so sequences have different lengths
    lab = (torch.arange(2 * p) % 3 != 1).to(device)  # KTO: desirable / undesirable, unbalanced
    return w, x, t, rx, rw, lab


def _flops(loss, shape):
    p, T, h, v = shape
    m = 2 * p * T
    return (8.0 if LOSSES[loss]["ref"] else 6.0) * m * h * v


def _row(loss, shape, impl, ms, floor_ms, flops, peak, dloss, error=None):
    p, T, h, v = shape
    r = {"loss": loss, "shape": f"pairs{p} T{T} H{h} V{v}", "impl": impl}
    if error is not None:
        return {**r, "ms": None, "xFloor": None, "TFLOP/s": None, "peak_MiB": None, "error": error}
    r.update(
        {
            "ms": round(ms, 3),
            "xFloor": round(ms / floor_ms, 3),
            "TFLOP/s": round(flops / (ms * 1e-3) / 1e12, 1),
            "peak_MiB": round(peak / MiB) if peak is not None else None,
            "dLoss": f"{dloss:.1e}" if dloss is not None else None,
        }
    )
    return r


def _err(e):
    lines = str(e).strip().splitlines() or [type(e).__name__]
    return f"{type(e).__name__}: {lines[0]}"[:120]


def run_shape(loss, shape, inputs, have_liger, chunk_sizes, rate):
    w, x, t, rx, rw, lab = inputs
    args = (w, x, t, rx, rw, lab)
    flops = _flops(loss, shape)
    floor_ms = flops / (rate * 1e12) * 1e3
    p, T, h, v = shape
    rows = [
        {"loss": loss, "shape": f"pairs{p} T{T} H{h} V{v}", "impl": "GEMM floor", "ms": round(floor_ms, 3)}
    ]
    with torch.no_grad():
        ref_loss = float(LOSSES[loss]["eager"](*args))
    torch.cuda.empty_cache()
    for name, make in variants(loss, have_liger, chunk_sizes, "cuda").items():
        try:
            f = make()

            def step(f=f):
                f(*args).backward()

            t0 = time.perf_counter()
            out = f(*args)  # warm-up (compilation, cuBLAS heuristics) and the loss check
            out.backward()
            dloss = abs(float(out.detach()) - ref_loss)
            del out
            x.grad = w.grad = None
            peak = peak_extra_bytes(step)
            x.grad = w.grad = None
            # do_bench sizes its loops by these millisecond budgets: ~5 timed calls at 100 ms a call.
            ms = bench_ms(step, grad_to_none=[x, w], warmup=1, rep=500)
            rows.append(_row(loss, shape, name, ms, floor_ms, flops, peak, dloss))
            print(
                f"  {loss} {rows[-1]['shape']} {name}: {ms:.2f} ms ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
        except Exception as e:  # noqa: BLE001 - a failing baseline (OOM, API mismatch) is reported, not fatal
            rows.append(_row(loss, shape, name, None, floor_ms, flops, None, None, error=_err(e)))
            print(f"  {loss} {name}: {rows[-1]['error']}", flush=True)
        finally:
            x.grad = w.grad = None
            torch.cuda.empty_cache()
    return rows


def batch_sweep(losses, rate):
    """liger_cpp (chunk 1) peak memory as the batch grows; what grows should be dX only."""
    T, h, v = SWEEP_TVH
    rows = []
    for loss in losses:
        spec = LOSSES[loss]
        mod = getattr(cl, spec["cls"])(chunk_size=1, **spec["kw"])
        for p in SWEEP_PAIRS:
            shape = (p, T, h, v)
            r = {"loss": loss, "shape": f"pairs{p} T{T} H{h} V{v}", "impl": "liger_cpp[chunk=1]"}
            args = None
            try:
                args = make_inputs(shape, "cuda", torch.bfloat16)
                x, w = args[1], args[0]

                def step(args=args, call=spec["call"], mod=mod):
                    call(mod, *args).backward()

                step()
                x.grad = w.grad = None
                peak = peak_extra_bytes(step)
                x.grad = w.grad = None
                ms = bench_ms(step, grad_to_none=[x, w], warmup=1, rep=1)  # one timed call: indicative
                dx = x.numel() * x.element_size()
                r.update(
                    {
                        "ms": round(ms, 2),
                        "xFloor": round(ms / (_flops(loss, shape) / (rate * 1e12) * 1e3), 3),
                        "peak_MiB": round(peak / MiB),
                        "dX_MiB": round(dx / MiB),
                        "peak-dX_MiB": round((peak - dx) / MiB),
                    }
                )
            except Exception as e:  # noqa: BLE001
                r["error"] = _err(e)
            finally:
                del args
                torch.cuda.empty_cache()
            print(f"  sweep {loss} pairs{p}: {r.get('peak_MiB')} MiB {r.get('error', '')}", flush=True)
            rows.append(r)
    return rows


# ---------------------------------------------------------------- CPU debug check
def cpu_check(losses, chunk_sizes):
    rows = []
    shape = CPU_SHAPE
    for loss in losses:
        w, x, t, rx, rw, lab = make_inputs(shape, "cpu", torch.float32)
        args = (w, x, t, rx, rw, lab)
        res = {}
        for name, make in variants(loss, False, chunk_sizes, "cpu").items():
            try:
                out = make()(*args)
                out.backward()
                res[name] = (float(out.detach()), x.grad.clone(), w.grad.clone())
            except Exception as e:  # noqa: BLE001
                res[name] = _err(e)
            x.grad = w.grad = None
        ref = res.pop("eager")
        for name, got in res.items():
            r = {
                "loss": loss,
                "impl": name,
                "eager_loss": round(ref[0], 6) if isinstance(ref, tuple) else None,
            }
            if isinstance(got, str) or isinstance(ref, str):
                r["error"] = got if isinstance(got, str) else f"eager: {ref}"
            else:
                r.update(
                    {
                        "loss_value": round(got[0], 6),
                        "|dLoss|": f"{abs(got[0] - ref[0]):.1e}",
                        "max|d dX|": f"{(got[1] - ref[1]).abs().max().item():.1e}",
                        "max|d dW|": f"{(got[2] - ref[2]).abs().max().item():.1e}",
                    }
                )
            rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--quick", action="store_true", help="the first shape only (8 pairs, T 1024), no batch sweep"
    )
    ap.add_argument("--losses", default=",".join(LOSSES), help="comma-separated: " + ",".join(LOSSES))
    ap.add_argument("--chunk-sizes", default="1,2", help="comma-separated pairs (KTO: sequences) per chunk")
    ap.add_argument("--batch-sweep", dest="batch_sweep", action="store_true", default=None)
    ap.add_argument("--no-batch-sweep", dest="batch_sweep", action="store_false")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: tiny fp32 formula check")
    args = ap.parse_args()
    losses = [s.strip() for s in args.losses.split(",") if s.strip()]
    bad = [s for s in losses if s not in LOSSES]
    if bad:
        ap.error(f"--losses: unknown {bad}; expected some of {list(LOSSES)}")
    chunk_sizes = [int(s) for s in args.chunk_sizes.split(",")]

    if args.device == "cpu":
        rows = cpu_check(losses, chunk_sizes)
        p, T, h, v = CPU_SHAPE
        if args.out:
            write_json(args.out, {"op": "chunked_loss_cpu_check", "dtype": "float32", "rows": rows})
        print(
            f"Chunked preference losses: eager formulas vs liger_cpp (fp32, pairs{p} T{T} H{h} V{v}) on cpu"
        )
        cols = ["loss", "impl", "eager_loss", "loss_value", "|dLoss|", "max|d dX|", "max|d dW|", "error"]
        print(fmt_table(rows, cols))
        return

    sweep = args.batch_sweep if args.batch_sweep is not None else not args.quick
    have_liger = try_import_liger()
    t0 = time.perf_counter()
    rate = gemm_tflops()
    shapes = SHAPES[:1] if args.quick else SHAPES
    rows = []
    for shape in shapes:
        inputs = make_inputs(shape, "cuda", torch.bfloat16)
        for loss in losses:
            rows += run_shape(loss, shape, inputs, have_liger, chunk_sizes, rate)
        del inputs
        torch.cuda.empty_cache()
    sweep_losses = [s for s in SWEEP_LOSSES if s in losses]
    sweep_rows = batch_sweep(sweep_losses, rate) if sweep and sweep_losses else []
    payload = {
        "op": "chunked_loss",
        "dtype": "bfloat16",
        **meta(),
        "gemm_tflops": round(rate, 1),
        "liger_cpp_version": liger_cpp.__version__,
        "liger_importable": have_liger,
        "losses": {k: LOSSES[k]["desc"] + ", " + str(LOSSES[k]["kw"]) for k in losses},
        "rows": rows,
        "batch_sweep_rows": sweep_rows,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    if args.out:
        write_json(args.out, payload)
    descs = ", ".join(k + ": " + LOSSES[k]["desc"] for k in losses)
    print(
        f"Chunked preference losses fwd+bwd (bf16; {descs}) "
        f"on {payload['gpu']}, commit {payload['commit']}; bf16 GEMM rate {rate:.0f} TFLOP/s; "
        f"{payload['wall_s']:.0f} s"
    )
    print(
        f"beta {BETA}, alpha {ALPHA}, SimPO gamma {GAMMA}; KTO: 2*pairs unpaired sequences, chunk = sequences"
    )
    print(
        "floor: policy 6*M*H*V (+ reference 2*M*H*V for dpo, kto) FLOPs at that rate; dLoss: |loss - eager|"
    )
    if sweep_rows:
        print("\nMemory as the batch grows (liger_cpp, chunk 1; dX grows with the batch, dW does not):")
        print(
            fmt_table(
                sweep_rows,
                ["loss", "shape", "impl", "ms", "xFloor", "peak_MiB", "dX_MiB", "peak-dX_MiB", "error"],
            )
        )
        print()
    cols = ["loss", "shape", "impl", "ms", "xFloor", "TFLOP/s", "peak_MiB", "dLoss", "error"]
    print(fmt_table(rows, cols))


if __name__ == "__main__":
    main()
