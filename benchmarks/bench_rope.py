"""RoPE / mRoPE benchmark (bf16, B4 T4096, 32 q / 8 kv heads, d128): liger_cpp against HF's eager
apply_rotary_pos_emb (transformers.models.llama.modeling_llama), torch.compile of it and
Liger-Kernel's LigerRopeFunction / LigerQwen2VLMRopeFunction (when importable), in one run, as %
of the copy bandwidth C.

Inputs are built as HF builds them: q = q_proj(x).view(B, T, H, D).transpose(1, 2) (a strided
view of a (B, T, H*D) leaf), the same for k; the output gradients arrive in SDPA's (flash) layout,
(B, T, H, D) in memory. cos/sin: HF's (1, T, D) table in bf16 (position_ids (1, T)), and a (B, T, D)
float32 table for liger_cpp.
Bytes (minimum): fwd and bwd 2*(|q|+|k|)*2 (read q, k; write q', k' / read dq', dk'; write dq, dk),
fwd+bwd 4*(|q|+|k|)*2; cos/sin are not counted. bwd alone runs backward(retain_graph=True) on one kept
graph. "kernel ms": the GPU time of the kernels one call launches (torch.profiler); "ms" well above
it means the call is bound by the host (Python, dispatcher, autograd engine), not by the GPU.
fwd+bwd includes the backward of HF's view/transpose (free when the gradient has the projection's
layout).
Liger's kernel rotates q and k in place (here: the leaves' storage) and its backward writes into
the incoming gradients; liger_cpp and HF allocate outputs.
Usage: python benchmarks/bench_rope.py [--out FILE.json] [--quick]
"""

import argparse

import torch
from harness import (
    bench_ms,
    copy_bandwidth_gbs,
    fmt_table,
    meta,
    peak_extra_bytes,
    try_import_liger,
    write_json,
)

import liger_cpp
from liger_cpp.transformers import liger_multimodal_rotary_pos_emb, liger_rotary_pos_emb


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _local_hf_apply(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def hf_apply():
    """HF's own apply_rotary_pos_emb (transformers' Llama), or the same formula if not installed."""
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        return apply_rotary_pos_emb, "transformers"
    except Exception:  # noqa: BLE001
        return _local_hf_apply, "local copy of HF's formula"


def hf_mrope(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    """Qwen2-VL's apply_multimodal_rotary_pos_emb (transformers 4.x formula)."""
    sec = list(mrope_section) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sec, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sec, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def tables(B, T, D, planes=None, dtype=torch.bfloat16):
    """HF's rotary tables: cat(freqs, freqs) of positions; (B or 1, T, D) or (3, B, T, D)."""
    inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device="cuda", dtype=torch.float32) / D))
    pos = torch.arange(T, device="cuda", dtype=torch.float32)
    if planes is not None:
        pos = pos.expand(3, B, T) + torch.arange(3, device="cuda")[:, None, None]
    else:
        pos = pos.expand(B, T)
    f = pos[..., None] * inv
    emb = torch.cat((f, f), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def kernel_ms(fn, grad_to_none=(), iters=20):
    """GPU time of the kernels (and memsets/copies) one fn() launches, from the profiler: ms well
    above it means fn is bound by the host (Python, dispatcher, autograd engine), not by its kernels."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            for t in grad_to_none:
                t.grad = None
            fn()
        torch.cuda.synchronize()
    us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA)
    return us / iters / 1e3


def _row(case, mode, impl, ms, nbytes, C, mib=None, error=None, kernel=None):
    r = {"case": case, "mode": mode, "impl": impl, "ms": None, "GB/s": None, "%C": None, "peak MiB": mib}
    r["kernel ms"] = None if kernel is None else round(kernel, 4)
    if ms is not None:
        gbs = nbytes / (ms * 1e-3) / 1e9
        r.update({"ms": round(ms, 4), "GB/s": round(gbs), "%C": round(100 * gbs / C, 1)})
    if error:
        r["error"] = error
    return r


def run_case(case, B, T, Hq, Hk, D, fns, cos, sin, C):
    """fns: name -> f(q, k, cos, sin) -> (q', k')."""
    rows = []
    xq = torch.randn(B, T, Hq * D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    xk = torch.randn(B, T, Hk * D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    # output gradients in flash-attention's dq/dk layout: (B, T, H, D) in memory
    gq = torch.randn(B, T, Hq, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    gk = torch.randn(B, T, Hk, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    n = (xq.numel() + xk.numel()) * 2

    def views():
        return xq.view(B, T, Hq, D).transpose(1, 2), xk.view(B, T, Hk, D).transpose(1, 2)

    for name, f in fns.items():
        for mode in ("fwd", "bwd", "fwd+bwd"):
            try:
                if mode == "fwd":

                    def fn(f=f):
                        with torch.no_grad():
                            f(*views(), cos, sin)

                    nbytes = 2 * n
                elif mode == "bwd":
                    # backward alone, through a graph kept alive (retain_graph)
                    outs = f(*views(), cos, sin)

                    def fn(outs=outs):
                        torch.autograd.backward(list(outs), [gq, gk], retain_graph=True)

                    nbytes = 2 * n
                else:

                    def fn(f=f):
                        qo, ko = f(*views(), cos, sin)
                        # fresh gradient copies are not needed: neither impl modifies them except
                        # Liger's backward, which rotates them in place (values stay random)
                        torch.autograd.backward([qo, ko], [gq, gk])

                    nbytes = 4 * n
                ms = bench_ms(fn, grad_to_none=[xq, xk])
                xq.grad = xk.grad = None
                kms = kernel_ms(fn, grad_to_none=[xq, xk])
                xq.grad = xk.grad = None
                mib = round(peak_extra_bytes(fn) / 2**20, 1)
                xq.grad = xk.grad = None
                rows.append(_row(case, mode, name, ms, nbytes, C, mib, kernel=kms))
            except Exception as e:  # noqa: BLE001 - a failing baseline is reported, not fatal
                rows.append(_row(case, mode, name, None, 0, C, error=str(e).splitlines()[0][:120]))
            finally:
                outs = None
    return rows


def check_agreement(B, T, Hq, Hk, D, cos, sin):
    """liger_cpp against HF's formula on the benchmark's own inputs (bf16: within a few ulps)."""
    xq = torch.randn(B, T, Hq * D, device="cuda", dtype=torch.bfloat16)
    xk = torch.randn(B, T, Hk * D, device="cuda", dtype=torch.bfloat16)
    q, k = xq.view(B, T, Hq, D).transpose(1, 2), xk.view(B, T, Hk, D).transpose(1, 2)
    got = liger_rotary_pos_emb(q, k, cos, sin)
    want = _local_hf_apply(q.double(), k.double(), cos.double(), sin.double())
    return max((g.double() - w).abs().max().item() for g, w in zip(got, want))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="B1 instead of B4")
    args = ap.parse_args()
    have_liger = try_import_liger()
    C = copy_bandwidth_gbs()
    B, T, Hq, Hk, D = (1 if args.quick else 4), 4096, 32, 8, 128
    apply, apply_src = hf_apply()
    rows = []

    cos, sin = tables(1, T, D)
    fns = {
        "liger_cpp": liger_rotary_pos_emb,
        "eager": apply,
        "compile": torch.compile(apply, dynamic=False),
    }
    if have_liger:
        from liger_kernel.ops.rope import LigerRopeFunction

        fns["liger"] = LigerRopeFunction.apply
    case = f"rope B{B} T{T} {Hq}/{Hk}h d{D} cos(1,T,D) bf16"
    rows += run_case(case, B, T, Hq, Hk, D, fns, cos, sin, C)
    max_err = check_agreement(B, T, Hq, Hk, D, cos, sin)

    cos32, sin32 = tables(B, T, D, dtype=torch.float32)
    case = f"rope B{B} T{T} {Hq}/{Hk}h d{D} cos(B,T,D) fp32"
    fns32 = {"liger_cpp": liger_rotary_pos_emb, "eager": apply}
    torch.cuda.empty_cache()
    rows += run_case(case, B, T, Hq, Hk, D, fns32, cos32, sin32, C)

    # Qwen2-VL-7B-like mRoPE: 28 q / 4 kv heads, d128, sections [16, 24, 24]
    sec = [16, 24, 24]
    c3, s3 = tables(B, T, D, planes=B)
    mfns = {
        "liger_cpp": lambda q, k, c, s: liger_multimodal_rotary_pos_emb(q, k, c, s, sec),
        "eager": lambda q, k, c, s: hf_mrope(q, k, c, s, sec),
        "compile": torch.compile(lambda q, k, c, s: hf_mrope(q, k, c, s, sec), dynamic=False),
    }
    if have_liger:
        from liger_kernel.ops.qwen2vl_mrope import LigerQwen2VLMRopeFunction

        mfns["liger"] = lambda q, k, c, s: LigerQwen2VLMRopeFunction.apply(q, k, c, s, sec)
    torch.cuda.empty_cache()
    rows += run_case(f"mrope B{B} T{T} 28/4h d{D} {sec} bf16", B, T, 28, 4, D, mfns, c3, s3, C)

    payload = {
        "op": "rope",
        "dtype": "bfloat16",
        "copy_GBps": round(C),
        "hf_apply": apply_src,
        "max_abs_err_vs_fp64_hf": max_err,
        **meta(),
        "liger_cpp_version": liger_cpp.__version__,
        "rows": rows,
    }
    if args.out:
        write_json(args.out, payload)
    gpu, commit = payload["gpu"], payload["commit"]
    print(f"RoPE / mRoPE bf16 on {gpu}, copy bandwidth C = {C:.0f} GB/s, commit {commit}")
    print(f"HF eager = {apply_src}; liger_cpp max |err| vs float64 HF formula: {max_err:.3g}")
    print(fmt_table(rows, ["case", "mode", "impl", "ms", "kernel ms", "GB/s", "%C", "peak MiB"]))


if __name__ == "__main__":
    main()
