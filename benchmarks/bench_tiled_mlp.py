"""Tiled MLP benchmark (GPU only, bf16): one SwiGLU MLP's forward + backward over a long sequence,
untiled and tiled, at Llama-3-8B's MLP (H 4096, I 14336, 32768 tokens) and Llama-3.2-1B's
(H 2048, I 8192, 65536 tokens):

- hf:              HF's LlamaMLP (nn.Linear, SiLU, product), untiled;
- liger_cpp:       liger_cpp's LigerSwiGLUMLP (one glu_mlp op), untiled;
- liger_cpp_tiled: liger_cpp's LigerTiledSwiGLUMLP (default shards: ceil(seq / hidden)): plain
                   projections, so the C++ op glu_mlp_tiled;
- liger_cpp_tiled[module]: the same module forced onto its general path (a no-op forward hook on
                   a projection, as PEFT layers or ZeRO-3's hooks force it): apply_tiled_mlp;
- liger_tiled:     Liger-Kernel 0.8.5's LigerTiledSwiGLUMLP, same shards (from the carried wheel,
                   .whl/liger_kernel-*.whl, or an installed liger_kernel that is not liger_cpp's
                   compat package); skipped with the reason otherwise.

Each row: fwd+bwd median ms (harness.bench_ms: CUDA events, L2 flushed, the host hidden), the eager
wall time of the same call with a synchronize (the host included), the ratio to the untiled
liger_cpp row, the memory the forward keeps for the backward (allocated after the forward, output
excluded), the peak extra memory of forward + backward, and max |diff| of the output and of every
gradient against the untiled liger_cpp row. The tiled MLP computes the forward twice: its time
floor is 4 / 3 of the untiled one (12 GEMMs of 2 M H I against 9).
Usage: python benchmarks/bench_tiled_mlp.py [--shapes 8b,1b] [--out FILE.json]
"""

import argparse
import os
import time
import types

import torch
from harness import bench_ms, fmt_table, meta, put_liger_wheel_first, write_json

import liger_cpp  # noqa: F401
from liger_cpp.transformers import LigerSwiGLUMLP, LigerTiledSwiGLUMLP

SHAPES = {"8b": (32768, 4096, 14336), "1b": (65536, 2048, 8192)}


def add_liger():
    """(LigerTiledSwiGLUMLP class of Liger-Kernel, or None, and a note)."""
    whl = put_liger_wheel_first()
    try:
        import liger_kernel

        if hasattr(liger_kernel, "_surface"):
            return None, "liger_kernel is liger_cpp's compat package"
        from liger_kernel.transformers.tiled_mlp import LigerTiledSwiGLUMLP as cls

        return cls, whl or liger_kernel.__file__
    except Exception as e:  # noqa: BLE001 - the row is skipped with the reason
        return None, f"{type(e).__name__}: {e}"


def hf_mlp(cfg):
    from transformers.models.llama.modeling_llama import LlamaMLP

    return LlamaMLP(cfg)


def _hooked(m):
    m.gate_proj.register_forward_hook(lambda mod, i, o: None)
    return m


def run_shape(name, tokens, hidden, inter, liger_cls):
    import transformers

    cfg = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=inter, hidden_act="silu")
    simple = types.SimpleNamespace(hidden_size=hidden, intermediate_size=inter, hidden_act="silu")
    torch.manual_seed(0)
    ref = LigerSwiGLUMLP(simple).cuda().bfloat16()
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0, 0.02)
    shards = -(-tokens // hidden)
    builders = {  # liger_cpp first: the base of every row's ratio and max |diff|
        "liger_cpp": lambda: LigerSwiGLUMLP(simple),
        "hf": lambda: hf_mlp(cfg),
        "liger_cpp_tiled": lambda: LigerTiledSwiGLUMLP(simple),
        # the general path (what PEFT layers or ZeRO-3's hooks get): a no-op hook forces it
        "liger_cpp_tiled[module]": lambda: _hooked(LigerTiledSwiGLUMLP(simple)),
    }
    if liger_cls is not None:
        builders["liger_tiled"] = lambda: liger_cls(simple)
    x0 = torch.randn(1, tokens, hidden, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(1, tokens, hidden, device="cuda", dtype=torch.bfloat16) * 0.01
    rows, base = [], {}
    for variant, build in builders.items():
        m = build().cuda().bfloat16()
        m.load_state_dict(ref.state_dict())
        x = x0.clone().requires_grad_()
        params = list(m.parameters())

        def step(m=m, x=x):
            y = m(x)
            y.backward(dy)
            return y

        def clear(params=params, x=x):
            for t in [*params, x]:
                t.grad = None

        try:
            clear()
            y = step()
            got = [y.detach(), x.grad, *[p.grad for p in params]]
            if variant == "liger_cpp":
                base["got"] = got
            diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(got, base["got"]))
            # memory kept for the backward, and the peak of a whole step
            clear()
            del y, got
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            y = m(x)
            kept = torch.cuda.memory_allocated() - before - y.numel() * y.element_size()
            y.backward(dy)
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - before
            del y
            clear()
            ms = bench_ms(step, grad_to_none=[*params, x], rep=200)
            walls = []
            for _ in range(10):
                clear()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                step()
                torch.cuda.synchronize()
                walls.append((time.perf_counter() - t0) * 1e3)
            if variant == "liger_cpp":
                base["ms"] = ms
            rows.append(
                {
                    "shape": f"{name} M{tokens} H{hidden} I{inter}",
                    "impl": variant,
                    "shards": shards if "tiled" in variant else 1,
                    "ms": round(ms, 3),
                    "wall_ms": round(sorted(walls)[5], 3),
                    "x_untiled": round(ms / base["ms"], 3),
                    "kept_MiB": kept >> 20,
                    "peak_MiB": peak >> 20,
                    "max_diff": f"{diff:.1e}",
                }
            )
        except Exception as e:  # noqa: BLE001 - one failing variant is a row, not the end of the run
            rows.append({"shape": name, "impl": variant, "error": f"{type(e).__name__}: {str(e)[:80]}"})
        finally:
            clear()
            del m
            torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="8b,1b")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_tiled_mlp.json"))
    args = ap.parse_args()
    liger_cls, note = add_liger()
    rows = []
    for s in args.shapes.split(","):
        rows += run_shape(s, *SHAPES[s], liger_cls)
    m = meta()
    print(f"Tiled MLP fwd+bwd (bf16) on {m['gpu']}, commit {m['commit']}; Liger: {note}")
    cols = [
        "shape",
        "impl",
        "shards",
        "ms",
        "wall_ms",
        "x_untiled",
        "kept_MiB",
        "peak_MiB",
        "max_diff",
        "error",
    ]
    print(fmt_table(rows, cols))
    write_json(args.out, {"meta": m, "liger": note, "rows": rows})


if __name__ == "__main__":
    main()
