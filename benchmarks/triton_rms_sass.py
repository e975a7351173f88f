"""Torch Inductor's RMSNorm forward kernel (bf16, hidden N), compiled ahead of time for sm_90 with
Triton (no GPU needed), and its SASS memory / barrier skeleton, to compare with our kernels' SASS.

The kernel body is Inductor's `triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0` as torch 2.11
generated it for the bench's eager formula (benchmarks/results/2026-12-01-h200-inductor-code-
rms_fwd-db00fe4.txt), with the constant sizes as constexprs. R0_BLOCK and num_warps are the
autotuned config's (at 16384 x 8192 ncu showed 512-thread blocks, 32 registers: R0_BLOCK 4096
with 16 warps compiles to 30, R0_BLOCK 2048 to 23).
Needs triton (3.6) and cuobjdump + nvdisasm on PATH.
Usage: python benchmarks/triton_rms_sass.py [N [R0_BLOCK [NUM_WARPS]]]   (default 8192 4096 16)
"""

import os
import subprocess
import sys
import tempfile

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def inductor_rms_fwd(
    in_ptr0, in_ptr1, out_ptr1, XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr, N: tl.constexpr
):
    x0 = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    acc = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, N, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < N
        v = tl.load(in_ptr0 + (r0_index + N * x0), r0_mask, eviction_policy="evict_last", other=0.0).to(
            tl.float32
        )
        acc = tl.where(r0_mask, acc + v * v, acc)
    ss = tl.sum(acc, 1)[:, None]
    for r0_offset in tl.range(0, N, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < N
        w = tl.load(in_ptr1 + r0_index, r0_mask, eviction_policy="evict_last", other=0.0).to(tl.float32)
        v = tl.load(in_ptr0 + (r0_index + N * x0), r0_mask, eviction_policy="evict_first", other=0.0).to(
            tl.float32
        )
        tl.store(out_ptr1 + (r0_index + N * x0), w * (v * tl.math.rsqrt(ss / N + 1e-06)), r0_mask)


def main():
    n, rb, nw = ([int(a) for a in sys.argv[1:4]] + [8192, 4096, 16][len(sys.argv[1:4]) :])[:3]
    sig = {"in_ptr0": "*bf16", "in_ptr1": "*bf16", "out_ptr1": "*bf16"}
    sig.update({k: "constexpr" for k in ("XBLOCK", "R0_BLOCK", "N")})
    src = ASTSource(
        fn=inductor_rms_fwd,
        signature=sig,
        constexprs={"XBLOCK": 1, "R0_BLOCK": rb, "N": n},
        attrs={(i,): [["tt.divisibility", 16]] for i in range(3)},
    )
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": nw, "num_stages": 1})
    with tempfile.TemporaryDirectory() as d:
        cubin = os.path.join(d, "k.cubin")
        with open(cubin, "wb") as f:
            f.write(k.asm["cubin"])
        res = subprocess.run(["cuobjdump", "-res-usage", cubin], capture_output=True, text=True).stdout
        sass = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True).stdout
    print(f"N {n}, R0_BLOCK {rb}, {nw} warps:", " ".join(w for w in res.split() if w.startswith("REG")))
    for line in sass.splitlines():
        if any(op in line for op in ("LDG", "STG", "BAR", "MUFU", "BRA")):
            print(line.split("/*", 2)[1].split("*/")[0].strip(), line.split("*/", 1)[1].split(";")[0].strip())
    ptx = [x.strip() for x in k.asm["ptx"].splitlines() if "ld.global" in x or "st.global" in x]
    print(
        "PTX accesses:",
        *sorted(set(p.split("{")[0].split("[")[0].replace("@%p1 ", "") for p in ptx)),
        sep="\n  ",
    )


if __name__ == "__main__":
    main()
