"""MoE experts layer benchmark (GPU only, bf16): forward and forward+backward of the routed experts
(issue 28) at Qwen3-30B-A3B's shape (H 2048, E 128, k 8, I 768, 16384 tokens) and a Mixtral-like one
(E 8, k 2, H 4096, I 14336, 8192 tokens), in one run:

- hf_grouped_mm: HF's Qwen3MoeExperts with experts_implementation="grouped_mm" (transformers 5.x's
  default: sort, gather, torch._grouped_mm, the activation, grouped_mm, weighting, un-permute, sum);
- hf_eager:      the same class's eager per-expert loop (--eager; slow, host-synchronising);
- liger:         Liger-Kernel 0.8.5's LigerExperts (Triton fused MoE), when importable (--liger-whl:
  a liger_kernel wheel unpacked into a temporary directory and put first on sys.path; default
  .whl/liger_kernel-*.whl of the repository when present); skipped with a note otherwise. Its
  autotuner is off by default (one pinned config a kernel: the tuning takes minutes per shape);
  --liger-autotune turns it on;
- liger_cpp:     liger_cpp's LigerExperts (torch.ops.liger.moe_experts_fwd / _bwd).

Every variant gets the same weights, router choices (top-k of random router logits, softmax of the
chosen ones) and output gradient; the outputs are cross-checked against hf_grouped_mm (max |diff|
in the JSON). Times: harness.bench_ms (CUDA events, L2 flushed). The routed GEMMs' FLOP floor at
the bf16 GEMM rate G measured in the same run (8192^3): forward 6 S H I, backward 12 S H I flops
(S = tokens x k); each row reports time / floor. Peak: the extra memory a fwd+bwd allocates.
Usage: python benchmarks/bench_moe.py [--shapes qwen3,mixtral] [--eager] [--liger-whl PATH]
       [--liger-autotune] [--out FILE.json]  (default JSON: $OUT/bench_moe.json when $OUT is set).
       About 1 minute on an H200 without --eager and --liger-autotune (Liger's Triton JIT included).
"""

import argparse
import os
import sys

import torch
from harness import (
    bench_ms,
    fmt_table,
    gemm_tflops,
    meta,
    peak_extra_bytes,
    put_liger_wheel_first,
    write_json,
)

import liger_cpp  # noqa: F401
from liger_cpp.transformers.moe import LigerExperts

SHAPES = {
    "qwen3": dict(tokens=16384, hidden=2048, experts=128, top_k=8, inter=768),
    "mixtral": dict(tokens=8192, hidden=4096, experts=8, top_k=2, inter=14336),
}


def add_liger(whl, autotune=False):
    """Puts an unpacked liger_kernel wheel first on sys.path; whether LigerExperts imports.
    Without `autotune`, Liger's fused-MoE kernels run one pinned config each (its own escape hatch
    LIGER_FUSED_MOE_AUTOTUNE=0): its autotuner compiles and times 32 configs per GEMM kernel and
    shape, minutes per shape, beyond this benchmark's budget; --liger-autotune lets it tune."""
    if not autotune:
        os.environ.setdefault("LIGER_FUSED_MOE_AUTOTUNE", "0")
    whl = put_liger_wheel_first(whl)
    try:
        import liger_kernel
        from liger_kernel.transformers.swiglu import LigerExperts as _  # noqa: F401

        if hasattr(liger_kernel, "_surface"):  # liger_cpp's compat package, not Liger-Kernel
            return False, f"{liger_kernel.__file__} is liger_cpp's compat layer; pass --liger-whl"
        return True, whl or liger_kernel.__file__
    except Exception as e:  # noqa: BLE001 - any failure: the row is skipped with the reason
        return False, f"{type(e).__name__}: {e}"


def config(s):
    import transformers

    cfg = transformers.Qwen3MoeConfig(
        hidden_size=s["hidden"],
        moe_intermediate_size=s["inter"],
        num_experts=s["experts"],
        num_experts_per_tok=s["top_k"],
        hidden_act="silu",
    )
    return cfg


def make_inputs(s, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    T, H, E, k, I = s["tokens"], s["hidden"], s["experts"], s["top_k"], s["inter"]  # noqa: E741
    x = torch.randn(T, H, device="cuda", generator=g).bfloat16()
    logits = torch.randn(T, E, device="cuda", generator=g)
    top, idx = logits.topk(k, dim=-1)
    w = top.softmax(-1).bfloat16()
    gate_up = (torch.randn(E, 2 * I, H, device="cuda", generator=g) * H**-0.5).bfloat16()
    down = (torch.randn(E, H, I, device="cuda", generator=g) * I**-0.5).bfloat16()
    go = torch.randn(T, H, device="cuda", generator=g).bfloat16()
    return x, idx, w, gate_up, down, go


def build(variant, cfg, gate_up, down):
    import transformers

    if variant.startswith("hf_"):
        cfg._experts_implementation = {"hf_grouped_mm": "grouped_mm", "hf_eager": "eager"}[variant]
        m = transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeExperts(cfg)
    elif variant == "liger":
        from liger_kernel.transformers.swiglu import LigerExperts as LK

        m = LK(cfg)
    else:
        m = LigerExperts(cfg)
    m = m.to(device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        m.gate_up_proj.copy_(gate_up)
        m.down_proj.copy_(down)
    return m


def run_shape(name, s, variants, G):
    cfg = config(s)
    x0, idx, w0, gate_up, down, go = make_inputs(s)
    S = s["tokens"] * s["top_k"]
    flops_fwd = 6 * S * s["hidden"] * s["inter"]
    floor_fwd = flops_fwd / (G * 1e12) * 1e3
    rows, ref = [], None
    for v in variants:
        m = build(v, cfg, gate_up, down)
        x = x0.clone().requires_grad_(True)
        w = w0.clone().requires_grad_(True)
        params = list(m.parameters())

        def fwd(m=m, x=x, w=w):
            with torch.no_grad():
                return m(x, idx, w)

        def fwd_bwd(m=m, x=x, w=w):
            m(x, idx, w).backward(go)

        out = m(x, idx, w)
        out.backward(go)
        grads = [x.grad.clone(), w.grad.clone()] + [p.grad.clone() for p in params]
        if ref is None:
            ref = (out.detach().float(), [g.float() for g in grads])
        diff = (out.detach().float() - ref[0]).abs().max().item()
        gdiff = max(
            (a.float() - b).abs().max().item() / max(b.abs().max().item(), 1e-30)
            for a, b in zip(grads, ref[1])
        )
        del out, grads
        for t in [x, w, *params]:
            t.grad = None
        ms_f = bench_ms(fwd)
        ms_fb = bench_ms(fwd_bwd, grad_to_none=[x, w, *params])
        peak = peak_extra_bytes(fwd_bwd)
        for t in [x, w, *params]:
            t.grad = None
        rows.append(
            dict(
                shape=name,
                variant=v,
                fwd_ms=round(ms_f, 3),
                fwd_bwd_ms=round(ms_fb, 3),
                fwd_x_floor=round(ms_f / floor_fwd, 2),
                fwd_bwd_x_floor=round(ms_fb / (3 * floor_fwd), 2),
                peak_gib=round(peak / 2**30, 2),
                max_abs_diff_vs_first=diff,
                max_rel_grad_diff_vs_first=gdiff,
            )
        )
        del m
        torch.cuda.empty_cache()
    base = {r["variant"]: r for r in rows}.get("hf_grouped_mm")
    for r in rows:
        if base:
            r["speedup_fwd_bwd_vs_hf"] = round(base["fwd_bwd_ms"] / r["fwd_bwd_ms"], 2)
    lig = {r["variant"]: r for r in rows}.get("liger")
    for r in rows:
        if lig:
            r["speedup_fwd_bwd_vs_liger"] = round(lig["fwd_bwd_ms"] / r["fwd_bwd_ms"], 2)
    return rows, dict(floor_fwd_ms=floor_fwd, floor_fwd_bwd_ms=3 * floor_fwd, routed_slots=S)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="qwen3,mixtral")
    p.add_argument("--eager", action="store_true", help="also time HF's eager per-expert loop")
    p.add_argument("--liger-whl", default=None)
    p.add_argument(
        "--liger-autotune", action="store_true", help="let Liger's Triton autotuner run (minutes per shape)"
    )
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_moe: needs a CUDA GPU", file=sys.stderr)
        return 1
    have_liger, liger_note = add_liger(args.liger_whl, args.liger_autotune)
    if have_liger:
        liger_note += f" (autotune {'on' if args.liger_autotune else 'off: LIGER_FUSED_MOE_AUTOTUNE=0'})"
    variants = ["hf_grouped_mm"] + (["hf_eager"] if args.eager else []) + (["liger"] if have_liger else [])
    variants.append("liger_cpp")
    G = gemm_tflops()
    rows, floors = [], {}
    for name in args.shapes.split(","):
        r, f = run_shape(name, SHAPES[name], variants, G)
        rows += r
        floors[name] = f
    cols = [
        "shape",
        "variant",
        "fwd_ms",
        "fwd_bwd_ms",
        "fwd_x_floor",
        "fwd_bwd_x_floor",
        "speedup_fwd_bwd_vs_hf",
        "speedup_fwd_bwd_vs_liger",
        "peak_gib",
        "max_abs_diff_vs_first",
    ]
    print(f"MoE experts layer fwd / fwd+bwd (bf16) on {torch.cuda.get_device_name()}")
    print(
        f"bf16 GEMM rate G = {G:.0f} TFLOP/s; liger: {'LigerExperts of ' if have_liger else ''}{liger_note}"
    )
    print(fmt_table(rows, cols))
    out = args.out or (os.path.join(os.environ["OUT"], "bench_moe.json") if os.environ.get("OUT") else None)
    if out:
        write_json(
            out,
            dict(
                meta=meta(),
                gemm_tflops=G,
                liger=liger_note,
                shapes={k: SHAPES[k] for k in floors},
                floors=floors,
                rows=rows,
            ),
        )
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
