"""Llama 4 complex RoPE benchmark (bf16, HF's (B, S, H, D) layout, Llama-4-Scout's 40 / 8 heads of
128): liger_cpp against HF's apply_rotary_emb (eager), torch.compile of it and Liger-Kernel's
liger_llama4_text_rotary_pos_emb (when importable), in one run, as % of the copy bandwidth C.

Bytes (minimum): fwd 2*(q + k) (read q, k; write both; the frequencies, B*S*D/2 complex64, are
counted too), fwd+bwd twice that.
Usage: python benchmarks/bench_llama4_rope.py [--out FILE.json] [--quick]
"""

import argparse

import torch
from harness import bandwidth_rows, copy_bandwidth_gbs, report, try_import_liger
from transformers.models.llama4.modeling_llama4 import apply_rotary_emb

import liger_cpp
from liger_cpp.transformers.llama4_rope import liger_llama4_text_rotary_pos_emb


def variants(have_liger):
    out = {
        "liger_cpp": liger_llama4_text_rotary_pos_emb,
        "eager": apply_rotary_emb,
        "compile": torch.compile(apply_rotary_emb, dynamic=False),
    }
    if have_liger:
        from liger_kernel.transformers.llama4_rope import liger_llama4_text_rotary_pos_emb as liger_fn

        out["liger"] = liger_fn
    return out


def run(B, S, Hq, Hk, D, fns, C):
    q = torch.randn(B, S, Hq, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, S, Hk, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    angle = torch.rand(B, S, D // 2, device="cuda") * 6.28
    freqs = torch.polar(torch.ones_like(angle), angle)
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    qk_bytes = (q.numel() + k.numel()) * 2
    f_bytes = freqs.numel() * 8

    def step(f):
        qo, ko = f(q, k, freqs)
        torch.autograd.backward((qo, ko), (gq, gk))

    base = {"shape": f"B{B} S{S} {Hq}/{Hk}x{D}"}
    nbytes = {"fwd": 2 * qk_bytes + f_bytes, "fwd+bwd": 4 * qk_bytes + 2 * f_bytes}
    return bandwidth_rows(base, fns, lambda f: f(q, k, freqs), step, nbytes, [q, k], C)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="B1 S4096 only")
    args = ap.parse_args()
    C = copy_bandwidth_gbs()
    shapes = [(1, 4096, 40, 8, 128)] if args.quick else [(4, 4096, 40, 8, 128), (1, 8192, 40, 8, 128)]
    fns = variants(try_import_liger())
    rows = [r for s in shapes for r in run(*s, fns, C)]
    cols = ["shape", "mode", "impl", "ms", "GB/s", "%C", "error"]
    report("llama4_rope", "Llama 4 RoPE bf16", rows, C, args.out, cols, liger_cpp.__version__)


if __name__ == "__main__":
    main()
