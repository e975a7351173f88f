"""Probe (issue 31's FLCE heads): a chunk's logits GEMM (L[R, V] = X[R, H] W^T) and dX GEMM
(dX[R, H] = G[R, V] W) as ATen runs them at the chunk's R rows, against the same GEMM issued as
row blocks (e.g. 632 = 512 + 120) into views of the same output, and against the full-M GEMM's
time per row. Why: at 512 rows cuBLAS runs Llama 4's logits and dX GEMMs faster per row than at
full size, at 632 (the op's chunk) 13-21 % slower (scripts/probes/chunk_gemm_algos.cu).

    python scripts/probes/chunk_gemm_split.py
"""

import torch
from dw_gemm_torch import med  # median ms of CUDA-event-timed calls

# name, M (full rows), V, H, chunk rows (the op's chunks at today's heads and the distillation losses')
HEADS = [
    ("llama4", 8192, 202048, 5120, 632),
    ("qwen", 16384, 151936, 4096, 864),
    ("gemma2", 8192, 256000, 2304, 512),
    ("gemma3", 8192, 262144, 2304, 488),
    ("llama3", 8192, 128256, 4096, 1024),
    ("h8192", 8192, 128256, 8192, 1024),
    ("jsd student", 8192, 151936, 2048, 2048),
    ("jsd teacher", 8192, 151936, 4096, 2048),
]


def blocks_of(R, cap, min_last=128):
    """R rows as blocks of `cap` rows, a last block under min_last rows merged into the one before."""
    out = []
    while R > 0:
        out.append(min(cap, R))
        R -= out[-1]
    if len(out) > 1 and out[-1] < min_last:
        last = out.pop()
        out[-1] += last
    return out


def halves(R, parts=2):
    """R rows as `parts` near-equal blocks, multiples of 8 but the last."""
    b = (R + parts - 1) // parts
    b = (b + 7) // 8 * 8
    return blocks_of(R, b, 0)


def splits_of(R):
    cands = [halves(R), halves(R, 3), blocks_of(R, 256), blocks_of(R, 384), blocks_of(R, 512)]
    out = []
    for c in cands:
        if len(c) > 1 and c not in out:
            out.append(c)
    return out


def timed(fn):
    return med(fn, steps=15, warm=3)


def blocks(a, b, out, split):
    """out = a @ b issued as row blocks of the given sizes."""
    s = 0
    for n in split:
        torch.mm(a[s : s + n], b, out=out[s : s + n])
        s += n


def full_rate(M, K, b, R):
    """The full-M GEMM [M, K] x b, its median ms scaled to R rows."""
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16) * 1e-2
    ms = timed(lambda a=a: torch.mm(a, b)) * R / M
    del a
    torch.cuda.empty_cache()
    return ms


def probe_head(name, M, V, H, R):
    w = torch.randn(V, H, device="cuda", dtype=torch.bfloat16) * H**-0.5
    x = torch.randn(R, H, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(R, V, device="cuda", dtype=torch.bfloat16) * 1e-3
    lg = torch.empty(R, V, device="cuda", dtype=torch.bfloat16)
    dx = torch.empty(R, H, device="cuda", dtype=torch.bfloat16)
    full_l, full_dx = full_rate(M, H, w.t(), R), full_rate(M, V, w, R)
    print(
        f"== {name}: chunk {R} rows, V {V}, H {H}; full-M rate for these rows: logits {full_l:.3f}, "
        f"dX {full_dx:.3f} ms"
    )
    for split in [[R], *splits_of(R)]:
        tl = timed(lambda split=split: blocks(x, w.t(), lg, split))
        td = timed(lambda split=split: blocks(g, w, dx, split))
        print(
            f"   {'+'.join(map(str, split)):>14}: logits {tl:.3f} ({tl / full_l:.3f} x full rate), "
            f"dX {td:.3f} ({td / full_dx:.3f}), sum {tl + td:.3f}"
        )


def main():
    for head in HEADS:
        probe_head(*head)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
