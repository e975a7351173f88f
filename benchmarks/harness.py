"""Timing harness shared by the benchmarks (method: docs/benchmarking.md).

- Ceilings measured in the same run: copy bandwidth C (1 GiB uint8 `b.copy_(a)`, read + write
  bytes over the median time) and the bf16 GEMM rate G (8192^3).
- Times are medians of CUDA-event timings of single calls (the discipline of
  `triton.testing.do_bench(warmup=50, rep=300)`: L2 flushed by zeroing 256 MiB before each call),
  with one addition: before each timed call the GPU sleeps long enough for the host to enqueue the
  whole call (twice its measured host time). A call whose Python/launch overhead exceeds its GPU
  time would otherwise be charged for host time, and that varies with the machine's CPU: it made
  fwd+bwd rows of Triton baselines and of our own kernels read 1.5–3x slow in one session.
  `LIGER_CPP_BENCH_LEAD=0` times without the lead (the old figures). Inputs are random, never zeros.
- Results are rows of dicts, written as JSON with the GPU, date and commit.
"""

import datetime
import json
import os
import subprocess
import time

import torch


def _git_commit():
    if os.environ.get("LIGER_CPP_COMMIT"):
        return os.environ["LIGER_CPP_COMMIT"]
    try:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except OSError:
        return os.environ.get("LIGER_CPP_COMMIT", "unknown")


def set_variant_env(variant_env: dict, name) -> None:
    """Kernel-variant rows: clears every environment variable any row of variant_env ({row name:
    {variable: value}}) sets, then sets row `name`'s (none for a row not in it, or None)."""
    for k in {k for env in variant_env.values() for k in env}:
        os.environ.pop(k, None)
    os.environ.update(variant_env.get(name, {}))


def set_variant_plan(variant_plan: dict, name) -> None:
    """Kernel rows forced through the developer plan override (liger_cpp._testing; keys in
    docs/tuning.md): sets row `name`'s choices ({row name: {key: value}}), clearing every other
    override (none for a row not in variant_plan, or None)."""
    from liger_cpp._testing import set_plan_override

    set_plan_override(",".join(f"{k}={v}" for k, v in variant_plan.get(name, {}).items()))


_SLEEP_CYCLES_PER_MS = None
_FLUSH = None


def _sleep_cycles_per_ms():
    """torch.cuda._sleep's cycles per millisecond on this GPU (measured once)."""
    global _SLEEP_CYCLES_PER_MS
    if _SLEEP_CYCLES_PER_MS is None:
        n = 2_000_000
        torch.cuda._sleep(n)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.cuda._sleep(n)
        e.record()
        torch.cuda.synchronize()
        _SLEEP_CYCLES_PER_MS = n / max(s.elapsed_time(e), 1e-3)
    return _SLEEP_CYCLES_PER_MS


def bench_ms(fn, grad_to_none=None, warmup=50, rep=300):
    """Median milliseconds of fn() on the GPU: single calls, each after an L2 flush and, unless
    LIGER_CPP_BENCH_LEAD=0, a GPU sleep that lets the host enqueue the whole call before it starts."""
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    lead = os.environ.get("LIGER_CPP_BENCH_LEAD", "1") != "0"

    def clear_grads():
        for t in grad_to_none or ():
            t.grad = None

    fn()
    torch.cuda.synchronize()
    # Estimate GPU and host time per call (5 calls).
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host = []
    s.record()
    for _ in range(5):
        clear_grads()
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
    e.record()
    torch.cuda.synchronize()
    est_ms = max(s.elapsed_time(e) / 5, 1e-3)
    host_ms = sorted(host)[2] * 1e3
    lead_cycles = int(min(2 * host_ms + 0.05, 50.0) * _sleep_cycles_per_ms()) if lead else 0
    n_warm = max(1, int(warmup / est_ms))
    n_rep = max(1, int(rep / est_ms))
    for _ in range(n_warm):
        clear_grads()
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for i in range(n_rep):
        clear_grads()
        _FLUSH.zero_()
        if lead_cycles:
            torch.cuda._sleep(lead_cycles)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b in zip(starts, ends))
    return times[len(times) // 2]


def paired_ms(fn, ref_fn, grad_to_none=None, rounds=5, rep=400):
    """fn's median ms against a reference timed beside it: `rounds` alternations of bench_ms(ref_fn)
    and bench_ms(fn). Returns (fn's median, ref's median, the median of the rounds' ratios). Why: an
    H100 under sustained load loses clock over tens of seconds, so a floor timed once before a
    series of implementations flatters the first and penalises the last (the same FLCE call read
    1.07 and 1.24 x its floor in two runs of 2026-12-06; alternated, 1.04)."""
    ms, ref, ratio = [], [], []
    for _ in range(rounds):
        r = bench_ms(ref_fn, rep=rep)
        m = bench_ms(fn, grad_to_none=grad_to_none, rep=rep)
        ms.append(m)
        ref.append(r)
        ratio.append(m / r)

    def med(v):
        return sorted(v)[len(v) // 2]

    return med(ms), med(ref), med(ratio)


def copy_bandwidth_gbs():
    a = torch.randint(0, 255, (1 << 30,), dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = bench_ms(lambda a=a, b=b: b.copy_(a))
    del a, b
    torch.cuda.empty_cache()
    return 2 * (1 << 30) / (ms * 1e-3) / 1e9


def gemm_tflops(n=8192):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = bench_ms(lambda a=a, b=b: a @ b)
    del a, b
    torch.cuda.empty_cache()
    return 2 * n**3 / (ms * 1e-3) / 1e12


def peak_extra_bytes(fn):
    """Peak memory allocated during fn() above what was allocated before it."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def put_liger_wheel_first(whl=None):
    """Unpacks a Liger-Kernel wheel (default: the repository's carried .whl/liger_kernel-*.whl)
    into a temporary directory put first on sys.path, so `import liger_kernel` is Liger-Kernel's
    and not liger_cpp's compat package; returns the wheel's path, or None where there is none."""
    import glob
    import sys
    import tempfile
    import zipfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    whl = whl or next(iter(sorted(glob.glob(os.path.join(root, ".whl", "liger_kernel-*.whl")))), None)
    if whl:
        d = tempfile.mkdtemp(prefix="liger_whl_")
        with zipfile.ZipFile(whl) as z:
            z.extractall(d)
        sys.path.insert(0, d)
    return whl


def try_import_liger():
    try:
        import liger_kernel  # noqa: F401

        return True
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return False


def meta(device="cuda"):
    """Where and when a run happened: the GPU (or, for CPU runs, the processor), date, commit, torch."""
    if str(device).startswith("cuda"):
        p = torch.cuda.get_device_properties(0)
        where = {"gpu": p.name, "sms": p.multi_processor_count}
    else:
        import platform

        where = {"gpu": f"CPU ({platform.processor() or platform.machine()})"}
    return {
        **where,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": _git_commit(),
        "torch": torch.__version__,
    }


def write_json(path, payload):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=1)


def fmt_table(rows, cols):
    """A plain text table of the given columns."""
    widths = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols]
    line = "  ".join(c.ljust(w) for c, w in zip(cols, widths))
    out = [line, "-" * len(line)]
    for r in rows:
        out.append("  ".join(str(r.get(c, "")).ljust(w) for c, w in zip(cols, widths)))
    return "\n".join(out)


def parse_shapes(arg):
    """Shapes from a --shapes argument: "16384x4096,8192x8192" -> [(16384, 4096), (8192, 8192)]."""
    return [tuple(int(v) for v in s.lower().split("x")) for s in arg.split(",")]


def bandwidth_rows(base, fns, fwd, step, nbytes, grad_to_none, C):
    """The element-wise ops' loop (DyT, PolyNorm, ReLU squared, Llama 4 RoPE): for each
    implementation in `fns` (name -> callable), a fwd+bwd row and a fwd row, each `base`'s keys plus
    mode, impl, median ms (bench_ms), GB/s of the mode's minimum bytes `nbytes[mode]` and % of the
    copy bandwidth C. `fwd(f)` runs the forward (timed under no_grad), `step(f)` forward and
    backward. A failing implementation gives a row with its error, not an exception."""
    rows = []
    for name, f in fns.items():
        for mode in ("fwd+bwd", "fwd"):
            row = {**base, "mode": mode, "impl": name}
            try:
                if mode == "fwd":
                    with torch.no_grad():
                        ms = bench_ms(lambda f=f: fwd(f))
                else:
                    ms = bench_ms(lambda f=f: step(f), grad_to_none=grad_to_none)
                gbs = nbytes[mode] / (ms * 1e-3) / 1e9
                row.update({"ms": round(ms, 4), "GB/s": round(gbs), "%C": round(100 * gbs / C, 1)})
            except Exception as e:  # noqa: BLE001 - a failing baseline is reported, not fatal
                row["error"] = str(e).splitlines()[0][:120]
            rows.append(row)
    torch.cuda.empty_cache()
    return rows


def report(op, title, rows, C, out, cols, version):
    """Writes the run's JSON (when `out`) and prints its table: `title` on this GPU, C and commit."""
    payload = {"op": op, "dtype": "bfloat16", "copy_GBps": round(C), **meta(), "rows": rows}
    payload["liger_cpp_version"] = version
    if out:
        write_json(out, payload)
    print(f"{title} on {payload['gpu']}, copy bandwidth C = {C:.0f} GB/s, commit {payload['commit']}")
    print(fmt_table(rows, cols))
