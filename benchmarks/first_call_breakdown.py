"""Where the first RMSNorm call's time goes in a fresh process (issue 2: first call <= 50 ms).

Each case runs in its own interpreter, after CUDA is initialised and torch's first backward has run
(as bench_rms_norm's first-call row does), with liger_cpp imported before the clock starts:
- op:       torch.ops.liger.rms_norm_fwd called directly (the C++ op: dispatcher, host wrapper, kernel);
- module:   liger_cpp's rms_norm (autograd function, torch.library registration) forward, then backward;
- eager:    as module, with CUDA_MODULE_LOADING=EAGER (every kernel of every loaded library is loaded
            at import, so what remains is not module loading);
- profile:  as module, under cProfile: the 15 functions with the most cumulative time of that call;
- per op:   the first forward of each other op (its kernels live in their own .cu file, i.e. their
            own CUDA module, loaded on first use), to relate the first call's time to module size.
Usage (GPU): python benchmarks/first_call_breakdown.py [case ...]
"""

import os
import subprocess
import sys
import textwrap

SETUP = textwrap.dedent(
    """
    import time, torch
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    z = x.float() * 2; z.backward(torch.ones_like(z)); x.grad = None; torch.cuda.synchronize()
    t = time.perf_counter()
    import liger_cpp
    from liger_cpp.ops.rms_norm import rms_norm
    import liger_cpp.transformers.functional as F
    torch.cuda.synchronize()
    print(f"import liger_cpp {1e3 * (time.perf_counter() - t):.1f} ms")
    def timed(name, fn):
        t0 = time.perf_counter(); out = fn(); torch.cuda.synchronize()
        print(f"{name} {1e3 * (time.perf_counter() - t0):.1f} ms")
        return out
    """
)

CASES = {
    "op": """
timed("first op fwd", lambda: torch.ops.liger.rms_norm_fwd(x.detach(), w.detach(), 1e-6))
timed("second op fwd", lambda: torch.ops.liger.rms_norm_fwd(x.detach(), w.detach(), 1e-6))
y, r = torch.ops.liger.rms_norm_fwd(x.detach(), w.detach(), 1e-6)
timed("first op bwd", lambda: torch.ops.liger.rms_norm_bwd(dy, x.detach(), w.detach(), r))
""",
    "module": """
y = timed("first fwd", lambda: rms_norm(x, w, 1e-6))
timed("first bwd", lambda: y.backward(dy))
y = timed("second fwd", lambda: rms_norm(x, w, 1e-6))
timed("second bwd", lambda: y.backward(dy))
""",
    "swiglu": """
a = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
timed("first swiglu fwd", lambda: F.liger_swiglu(a, a))
timed("second swiglu fwd", lambda: F.liger_swiglu(a, a))
""",
    "layer_norm": """
timed("first layer_norm fwd", lambda: F.liger_layer_norm(x.detach(), w.detach(), w.detach(), 1e-6))
timed("second layer_norm fwd", lambda: F.liger_layer_norm(x.detach(), w.detach(), w.detach(), 1e-6))
""",
    "cross_entropy": """
lg = torch.randn(4096, 32000, device="cuda", dtype=torch.bfloat16)
tg = torch.randint(0, 32000, (4096,), device="cuda")
timed("first cross_entropy fwd", lambda: F.liger_cross_entropy(lg, tg))
timed("second cross_entropy fwd", lambda: F.liger_cross_entropy(lg, tg))
""",
    "rope": """
q = torch.randn(4, 32, 1024, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(4, 8, 1024, 128, device="cuda", dtype=torch.bfloat16)
cos = torch.randn(4, 1024, 128, device="cuda", dtype=torch.bfloat16)
timed("first rope fwd", lambda: F.liger_rope(q, k, cos, cos))
timed("second rope fwd", lambda: F.liger_rope(q, k, cos, cos))
""",
    "profile": """
import cProfile, pstats
pr = cProfile.Profile(); pr.enable()
y = timed("first fwd (profiled)", lambda: rms_norm(x, w, 1e-6))
pr.disable()
pstats.Stats(pr).sort_stats("cumulative").print_stats(15)
""",
}


def main():
    names = ["op", "module", "eager", "profile", "swiglu", "layer_norm", "cross_entropy", "rope"]
    for name in sys.argv[1:] or names:
        body = CASES["module" if name == "eager" else name]
        env = dict(os.environ)
        if name == "eager":
            env["CUDA_MODULE_LOADING"] = "EAGER"
        r = subprocess.run(
            [sys.executable, "-c", SETUP + body], capture_output=True, text=True, env=env, timeout=300
        )
        print(f"== {name}")
        print(r.stdout.rstrip() if r.returncode == 0 else r.stderr[-2000:])


if __name__ == "__main__":
    main()
