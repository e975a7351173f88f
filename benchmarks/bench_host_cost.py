"""Host cost of an eager call: forward + backward of each op on a tiny tensor, against the same
PyTorch op in the same process (issue 32's acceptance: each at most 1.25x).

At 1 x 64 the kernels do almost nothing, so the time per call is the host's: the Python wrapper,
argument parsing, the dispatcher, autograd (node creation, the engine, the backward), allocations
and the CPU kernels' fixed costs (on CUDA: the launches). One thread (torch.set_num_threads(1)).
Each op and its reference run in alternating rounds of --calls calls (so both see the same machine
state); the figure is the fastest round's mean per call, in microseconds.

Pairs (liger_cpp's functional API against PyTorch's):
  rms_norm     liger_rms_norm(x, w)            F.rms_norm(x, (64,), w)
  layer_norm   liger_layer_norm(x, w, b)       F.layer_norm(x, (64,), w, b)
  swiglu       liger_swiglu(a, b)              F.silu(a) * b
  cross_entropy liger_cross_entropy(x, t)      F.cross_entropy(x, t)
  ce_tvd       fused_ce_tvd(x, q, t)           F.cross_entropy(x, t, reduction="none") and
               (LigerFusedCETVDLoss's op)      0.5 (softmax(x) - softmax(q)).abs().sum(-1)
  rope         liger_rope(q, k, cos, sin)      HF's q * cos + rotate_half(q) * sin (and k)
  glu_mlp      glu_mlp(x, wg, wu, wd)          HF LlamaMLP: F.linear(silu(F.linear(x, wg)) *
               (LigerSwiGLUMLP's op)           F.linear(x, wu), wd), x (1, 1, 64), I = 128
  qkv_rope     qkv_rope(x, wq, wk, wv, ...)    HF LlamaAttention's three projections, view,
               (the Llama attention's op)      transpose and HF's RoPE; 4 / 2 heads of 16
  qkv_norm_rope qkv_rope(..., n_q, n_k)        HF Qwen3Attention's: the same with F.rms_norm on
               (Qwen3's attention inputs)      each head of q and k before RoPE
Modes: fwd+bwd (the acceptance: y = f(); torch.autograd.grad(y, inputs, dy)) and fwd (no_grad).
Runs on the CPU and, when CUDA and liger_cpp's CUDA kernels are present, on the GPU (float32).

Usage: python benchmarks/bench_host_cost.py [--calls N] [--rounds R] [--devices cpu,cuda]
       [--modes fwd+bwd,fwd] [--out FILE.json]
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import fmt_table, meta, write_json  # noqa: E402

import liger_cpp  # noqa: E402
from liger_cpp.ops.ce_tvd import fused_ce_tvd  # noqa: E402
from liger_cpp.ops.dyt import dyt  # noqa: E402
from liger_cpp.ops.glu_mlp import glu_mlp  # noqa: E402
from liger_cpp.ops.poly_norm import poly_norm  # noqa: E402
from liger_cpp.ops.qkv_rope import qkv_rope  # noqa: E402
from liger_cpp.transformers.functional import (  # noqa: E402
    liger_cross_entropy,
    liger_layer_norm,
    liger_rms_norm,
    liger_rope,
    liger_swiglu,
)

N = 64
EPS = 1e-6
LIMIT = 1.25  # the acceptance ratio


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _hf_rope(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def cases(dev):
    """{op: (ours(mode), reference(mode))}: each returns a zero-argument callable for the mode."""
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape, grad=True):
        t = torch.randn(*shape, generator=g).to(dev)
        return t.requires_grad_(grad)

    x, w, b = rnd(1, N), (1 + 0.1 * rnd(N, grad=False)).requires_grad_(), rnd(N)
    a, u = rnd(1, N), rnd(1, N)
    dy = rnd(1, N, grad=False)
    t = torch.randint(0, N, (1,), generator=g).to(dev)
    g1 = rnd(1, grad=False)
    q, k = rnd(1, 1, 1, N), rnd(1, 1, 1, N)
    cos, sin = rnd(1, N, grad=False), rnd(1, N, grad=False)
    dq, dk = rnd(1, 1, 1, N, grad=False), rnd(1, 1, 1, N, grad=False)
    mx, mdy = rnd(1, 1, N), rnd(1, 1, N, grad=False)
    wg, wu, wd = (
        (0.1 * rnd(2 * N, N, grad=False)).requires_grad_(),
        (0.1 * rnd(2 * N, N, grad=False)).requires_grad_(),
        (0.1 * rnd(N, 2 * N, grad=False)).requires_grad_(),
    )

    def make(f, inputs, grads):
        def fwd_bwd():
            out = f()
            return torch.autograd.grad(out, inputs, grads)

        def fwd():
            with torch.no_grad():
                return f()

        return {"fwd+bwd": fwd_bwd, "fwd": fwd}

    qw, kw, vw = ((0.1 * rnd(n, N, grad=False)).requires_grad_() for n in (N, N // 2, N // 2))
    qcos, qsin = rnd(1, 16, grad=False), rnd(1, 16, grad=False)
    qdy = [rnd(1, h, 1, 16, grad=False) for h in (4, 2, 2)]

    def hf_qkv():
        b, s = mx.shape[0], mx.shape[1]
        q, k, v = (F.linear(mx, w).view(b, s, -1, 16).transpose(1, 2) for w in (qw, kw, vw))
        return (*_hf_rope(q, k, qcos, qsin), v)

    nq, nk = ((1 + 0.1 * rnd(16, grad=False)).requires_grad_() for _ in "qk")

    def hf_qkv_norm():
        b, s = mx.shape[0], mx.shape[1]
        q = F.rms_norm(F.linear(mx, qw).view(b, s, -1, 16), (16,), nq, EPS).transpose(1, 2)
        k = F.rms_norm(F.linear(mx, kw).view(b, s, -1, 16), (16,), nk, EPS).transpose(1, 2)
        v = F.linear(mx, vw).view(b, s, -1, 16).transpose(1, 2)
        return (*_hf_rope(q, k, qcos, qsin), v)

    al, pw, pb = rnd(1), rnd(3), rnd(())

    def torch_poly_norm():
        def n(v):
            return v * torch.rsqrt(v.square().mean(-1, keepdim=True) + EPS)

        return pw[0] * n(x**3) + pw[1] * n(x**2) + pw[2] * n(x) + pb

    return {
        "rms_norm": (
            make(lambda: liger_rms_norm(x, w, EPS), [x, w], dy),
            make(lambda: F.rms_norm(x, (N,), w, EPS), [x, w], dy),
        ),
        "layer_norm": (
            make(lambda: liger_layer_norm(x, w, b, EPS), [x, w, b], dy),
            make(lambda: F.layer_norm(x, (N,), w, b, EPS), [x, w, b], dy),
        ),
        "swiglu": (
            make(lambda: liger_swiglu(a, u), [a, u], dy),
            make(lambda: F.silu(a) * u, [a, u], dy),
        ),
        "dyt": (
            make(lambda: dyt(x, al, w, b), [x, al, w, b], dy),
            make(lambda: w * torch.tanh(al * x) + b, [x, al, w, b], dy),
        ),
        "poly_norm": (
            make(lambda: poly_norm(x, pw, pb, EPS), [x, pw, pb], dy),
            make(torch_poly_norm, [x, pw, pb], dy),
        ),
        "cross_entropy": (
            make(lambda: liger_cross_entropy(x, t), [x], None),
            make(lambda: F.cross_entropy(x, t), [x], None),
        ),
        "ce_tvd": (
            make(lambda: fused_ce_tvd(x, a.detach(), t), [x], [g1, g1]),
            make(
                lambda: (
                    F.cross_entropy(x, t, reduction="none"),
                    0.5 * (x.softmax(-1) - a.detach().softmax(-1)).abs().sum(-1),
                ),
                [x],
                [g1, g1],
            ),
        ),
        "rope": (
            make(lambda: liger_rope(q, k, cos, sin), [q, k], [dq, dk]),
            make(lambda: _hf_rope(q, k, cos, sin), [q, k], [dq, dk]),
        ),
        "glu_mlp": (
            make(lambda: glu_mlp(mx, wg, wu, wd), [mx, wg, wu, wd], mdy),
            make(lambda: F.linear(F.silu(F.linear(mx, wg)) * F.linear(mx, wu), wd), [mx, wg, wu, wd], mdy),
        ),
        "qkv_rope": (
            make(lambda: qkv_rope(mx, qw, kw, vw, qcos, qsin, 16), [mx, qw, kw, vw], qdy),
            make(hf_qkv, [mx, qw, kw, vw], qdy),
        ),
        "qkv_norm_rope": (
            make(
                lambda: qkv_rope(mx, qw, kw, vw, qcos, qsin, 16, n_q=nq, n_k=nk, norm_eps=EPS),
                [mx, qw, kw, vw, nq, nk],
                qdy,
            ),
            make(hf_qkv_norm, [mx, qw, kw, vw, nq, nk], qdy),
        ),
    }


def per_call_us(fn, calls, sync):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) / calls * 1e6


def measure(ours, ref, calls, rounds, sync):
    """Fastest round's mean per call of each, the rounds alternating between the two."""
    for fn in (ours, ref):  # warm-up: first-call costs, allocator caches
        per_call_us(fn, max(calls // 10, 20), sync)
    best_o = best_r = float("inf")
    for _ in range(rounds):
        best_o = min(best_o, per_call_us(ours, calls, sync))
        best_r = min(best_r, per_call_us(ref, calls, sync))
    return best_o, best_r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000, help="calls per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--devices", default=None, help="comma-separated (default: cpu, and cuda if present)")
    ap.add_argument("--modes", default="fwd+bwd,fwd")
    ap.add_argument("--ops", default=None, help="comma-separated subset")
    ap.add_argument("--out", default=None, help="JSON file for the results")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from liger_cpp.env import has_cuda_kernels

    devices = args.devices.split(",") if args.devices else ["cpu"]
    if args.devices is None and torch.cuda.is_available() and has_cuda_kernels():
        devices.append("cuda")
    modes = args.modes.split(",")
    rows = []
    for dev in devices:
        if dev == "cuda" and not (torch.cuda.is_available() and has_cuda_kernels()):
            print("bench_host_cost: no CUDA device or no CUDA kernels in this build; cuda skipped")
            continue
        sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
        for op, (ours, ref) in cases(dev).items():
            if args.ops and op not in args.ops.split(","):
                continue
            for mode in modes:
                o, r = measure(ours[mode], ref[mode], args.calls, args.rounds, sync)
                ratio = o / r
                rows.append(
                    {
                        "device": dev,
                        "op": op,
                        "mode": mode,
                        "liger_cpp_us": round(o, 1),
                        "torch_us": round(r, 1),
                        "ratio": round(ratio, 2),
                        "ok": ("yes" if ratio <= LIMIT else "NO") if mode == "fwd+bwd" else "",
                    }
                )
                print(fmt_table(rows[-1:], list(rows[-1])).splitlines()[-1], flush=True)
    where = meta(devices[-1] if devices else "cpu")
    payload = {
        "op": "host_cost",
        "shape": f"1x{N}",
        "dtype": "float32",
        "threads": torch.get_num_threads(),
        "calls": args.calls,
        "rounds": args.rounds,
        "limit": LIMIT,
        **where,
        "liger_cpp_version": liger_cpp.__version__,
        "rows": rows,
    }
    if args.out:
        write_json(args.out, payload)
    print(
        f"\nHost cost per eager call (1x{N} float32, one thread, fastest of {args.rounds} rounds of "
        f"{args.calls} calls) on {where['gpu']}, commit {where['commit']}; "
        f"acceptance: fwd+bwd ratio <= {LIMIT}"
    )
    print(fmt_table(rows, ["device", "op", "mode", "liger_cpp_us", "torch_us", "ratio", "ok"]))


if __name__ == "__main__":
    main()
