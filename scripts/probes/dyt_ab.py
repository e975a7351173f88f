"""A/B of DyT's kernels between builds: run once per build with that build's package first on
PYTHONPATH (scripts/gpu_dyt_ab.sh alternates them). bf16, parameters bf16 and float32, the forward
alone (inference) and fwd+bwd, median of 51 CUDA-event timings after 10 warm-ups, as % of the copy
bandwidth measured in the same process.

    PYTHONPATH=.ab_base:benchmarks python3 scripts/probes/dyt_ab.py
"""

import torch
from dw_gemm_torch import med  # this folder: on the path when the script runs
from harness import copy_bandwidth_gbs

import liger_cpp
from liger_cpp.ops.dyt import dyt


def med_ms(fn):
    return med(fn, steps=51, warm=10)


def main():
    C = copy_bandwidth_gbs()
    print(f"liger_cpp from {liger_cpp.__file__}, C = {C:.0f} GB/s")
    g = torch.Generator(device="cuda").manual_seed(0)
    for m, n in ((16384, 4096), (8192, 8192), (32768, 2048), (4097, 2304)):
        for pdt in (torch.bfloat16, torch.float32):
            x = torch.randn(m, n, generator=g, device="cuda", dtype=torch.bfloat16).requires_grad_()
            dy = torch.randn_like(x)
            ps = [
                torch.full((1,), 0.5, device="cuda", dtype=pdt),
                torch.randn(n, generator=g, device="cuda", dtype=pdt),
                torch.randn(n, generator=g, device="cuda", dtype=pdt),
            ]
            ps = [p.requires_grad_() for p in ps]
            with torch.no_grad():
                f = med_ms(lambda x=x, ps=ps: dyt(x, *ps))
            fb = med_ms(lambda x=x, ps=ps, dy=dy: dyt(x, *ps).backward(dy))
            fwd_pct = 100 * (2 * m * n * 2 / f / 1e6) / C
            fb_pct = 100 * (5 * m * n * 2 / fb / 1e6) / C
            name = str(pdt).replace("torch.", "")
            print(
                f"dyt {m}x{n} params {name:8s} fwd {f:.4f} ms {fwd_pct:5.1f} %C  "
                f"fwd+bwd {fb:.4f} ms {fb_pct:5.1f} %C"
            )


if __name__ == "__main__":
    main()
