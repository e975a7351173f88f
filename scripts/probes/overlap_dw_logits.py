"""Probe (not part of the extension): can the chunk loop hide the weight-gradient GEMM's re-read of dW
(beta 1, K = a chunk's rows) by running it beside the next chunk's logits GEMM, each on its own
share of the SMs? At Gemma's head (H 2304, V 256000) the logits budget allows ~512-row chunks and
dW's GEMM is then about half memory traffic (2.4 GB of dW a chunk), the logits GEMM compute-bound.
Times one step = logits GEMM of chunk c+1 + dW GEMM of chunk c, sequential on one stream against
two streams with the SMs split by torch's experimental SM carve-out (read when ATen launches a GEMM),
at 256 and 512 rows. bf16, median of 20 steps after 5.
With `dx` as its argument the other GEMM is the same chunk's dX GEMM (dlogits @ W, K = V: compute
bound, and independent of dW's: both only read dlogits), so no second logits buffer is needed.
Run on the GPU: python3 scripts/probes/overlap_dw_logits.py [dx]"""

import sys

import torch
from dw_gemm_torch import med  # this folder: on the path when the script runs

H, V = 2304, 256000


def med_ms(fn):
    return med(fn, steps=20, warm=5)


def one_size(R, w, dw, sms, pair):
    dev, bf = "cuda", torch.bfloat16
    set_co = torch._C._set_sm_carveout_experimental
    x = torch.randn(R, H, device=dev, dtype=bf) * 0.02
    x2 = torch.randn(R, H, device=dev, dtype=bf) * 0.02
    g = torch.randn(R, V, device=dev, dtype=bf) * 1e-3
    logits = torch.empty(R, V, device=dev, dtype=bf)
    dx = torch.empty(R, H, device=dev, dtype=bf)
    s_main = torch.cuda.current_stream()
    s_side = torch.cuda.Stream()

    def logits_only():
        if pair == "dx":
            torch.mm(g, w, out=dx)
        else:
            torch.mm(x2, w.t(), out=logits)

    def dw_only():
        dw.addmm_(g.t(), x)

    def sequential():
        logits_only()
        dw_only()

    def overlapped(dw_sms, split=True):
        def step():
            s_side.wait_stream(s_main)
            if split:
                set_co(sms - dw_sms)  # dW's kernel on dw_sms SMs
            dw_only()
            with torch.cuda.stream(s_side):
                if split:
                    set_co(dw_sms)  # the logits on the rest
                logits_only()
            set_co(None)
            s_main.wait_stream(s_side)

        return step

    print(
        f"R {R}: {pair} {med_ms(logits_only):.3f} ms, dW (beta 1) {med_ms(dw_only):.3f} ms, "
        f"sequential {med_ms(sequential):.3f} ms, two streams without a split "
        f"{med_ms(overlapped(0, split=False)):.3f} ms"
    )
    for dw_sms in (22, 33, 44, 66, 88):
        print(f"    dW on {dw_sms} SMs, {pair} on {sms - dw_sms}: {med_ms(overlapped(dw_sms)):.3f} ms")


def main():
    pair = sys.argv[1] if len(sys.argv) > 1 else "logits"
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    w = torch.randn(V, H, device="cuda", dtype=torch.bfloat16) * 0.02
    dw = torch.zeros(V, H, device="cuda", dtype=torch.bfloat16)
    print(f"{torch.cuda.get_device_name()} {sms} SMs, torch {torch.__version__}")
    for lib in ("cublas", "cublaslt"):  # ATen's two paths (the carve-out may reach only one)
        torch.backends.cuda.preferred_blas_library(lib)
        print(f"-- ATen's preferred BLAS library: {lib}")
        for R in (256, 512):
            one_size(R, w, dw, sms, pair)


if __name__ == "__main__":
    main()
