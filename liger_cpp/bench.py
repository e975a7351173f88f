"""Check-and-benchmark of the available liger_cpp ops against PyTorch (the main job until the
training demo exists).

For every op: checks forward and backward against the PyTorch formula evaluated in float64, then
times forward+backward of liger_cpp and of PyTorch eager on the available device and prints a
table. `python -m liger_cpp.bench [--device cpu|cuda] [--dtype bf16|fp32|fp16] [--quick]`.
"""

import argparse
import sys
import time

import torch
import torch.nn.functional as F

import liger_cpp
from liger_cpp.ops import rms_norm

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _rms_ref(x, w):
    xf = x.float() if x.dtype != torch.float64 else x
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def _pair(m, n, dev, dt):
    return torch.randn(m, n, device=dev, dtype=dt), torch.randn(m, n, device=dev, dtype=dt)


def _ln_ref(x, w, b):
    return F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-6).to(x.dtype)


def _cases():
    """(name, make(rows, cols, device, dtype) -> inputs, liger fn, PyTorch fn, bytes moved fwd+bwd)."""
    cases = [
        (
            "rms_norm",
            lambda m, n, dev, dt: (
                torch.randn(m, n, device=dev, dtype=dt),
                (1 + 0.1 * torch.randn(n, device=dev)).to(dt),
            ),
            lambda x, w: rms_norm(x, w, 1e-6),
            _rms_ref,
            lambda m, n, b: 5 * m * n * b,
        )
    ]
    ops = liger_cpp.ops
    if hasattr(ops, "swiglu"):
        cases.append(
            (
                "swiglu",
                _pair,
                lambda a, b: ops.swiglu(a, b),
                lambda a, b: F.silu(a) * b,
                lambda m, n, b: 8 * m * n * b,
            )
        )
    if hasattr(ops, "geglu"):
        cases.append(
            (
                "geglu",
                _pair,
                lambda a, b: ops.geglu(a, b),
                lambda a, b: F.gelu(a, approximate="tanh") * b,
                lambda m, n, b: 8 * m * n * b,
            )
        )
    if hasattr(ops, "layer_norm"):
        cases.append(
            (
                "layer_norm",
                lambda m, n, dev, dt: (
                    torch.randn(m, n, device=dev, dtype=dt),
                    (1 + 0.1 * torch.randn(n, device=dev)).to(dt),
                    (0.1 * torch.randn(n, device=dev)).to(dt),
                ),
                lambda x, w, b: ops.layer_norm(x, w, b, 1e-6),
                _ln_ref,
                lambda m, n, b: 5 * m * n * b,
            )
        )
    return cases


def _time_ms(fn, device, reps):
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(reps):
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
    else:
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return times[len(times) // 2]


def _check(make, ours, ref, device, dtype):
    """Max relative error of ours against the float64 formula, forward and all gradients."""
    inputs = [t.requires_grad_(True) for t in make(37, 769, device, dtype)]
    inputs64 = [t.detach().double().requires_grad_(True) for t in inputs]
    y = ours(*inputs)
    y64 = ref(*inputs64)
    dy = torch.randn_like(y64)
    y.backward(dy.to(y.dtype))
    y64.backward(dy)
    worst = (y.double() - y64).abs().max().item() / max(y64.abs().max().item(), 1e-12)
    for t, t64 in zip(inputs, inputs64):
        err = (t.grad.double() - t64.grad).abs().max().item() / max(t64.grad.abs().max().item(), 1e-12)
        worst = max(worst, err)
    return worst


def _progress(i, n, label):
    bar = "#" * (20 * i // n)
    sys.stderr.write(f"\r[{bar:<20}] {i}/{n} {label:<30}")
    sys.stderr.flush()
    if i == n:
        sys.stderr.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    ap.add_argument("--quick", action="store_true", help="smaller shapes and fewer repetitions")
    args = ap.parse_args(argv)
    dtype = DTYPES[args.dtype]
    if args.device == "cpu" and dtype == torch.float16:
        dtype = torch.float32
    print(liger_cpp.env_report())
    if args.device == "cuda":
        m, n, reps = (4096, 4096, 20) if args.quick else (16384, 4096, 50)
    else:
        m, n, reps = (256, 1024, 3) if args.quick else (2048, 4096, 5)
    cases = _cases()
    rows = []
    for i, (name, make, ours, ref, nbytes) in enumerate(cases):
        _progress(i, len(cases), name)
        err = _check(make, ours, ref, args.device, dtype)
        inputs = [t.requires_grad_(True) for t in make(m, n, args.device, dtype)]
        dy = torch.randn(m, n, device=args.device, dtype=dtype)

        def run(fn, inputs=inputs, dy=dy):
            for t in inputs:
                t.grad = None
            fn(*inputs).backward(dy)

        t_ours = _time_ms(lambda o=ours: run(o), args.device, reps)
        t_ref = _time_ms(lambda r=ref: run(r), args.device, reps)
        gbs = nbytes(m, n, torch.finfo(dtype).bits // 8) / (t_ours * 1e-3) / 1e9
        speedup = f"{t_ref / t_ours:.2f}x"
        rows.append((name, f"{err:.1e}", f"{t_ours:.3f}", f"{t_ref:.3f}", speedup, f"{gbs:.1f}"))
    _progress(len(cases), len(cases), "done")
    head = ("op", "max rel err", "liger_cpp ms", "eager ms", "speed-up", "GB/s")
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(head)]
    print(f"\nfwd+bwd, {m}x{n} {args.dtype} on {args.device}; error vs a float64 PyTorch reference (37x769)")
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
