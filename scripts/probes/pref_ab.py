"""A/B probe for the preference losses' chunk loop: liger_cpp's DPO (reference model), ORPO and KTO
(reference model) at 8 pairs x T 1024, H 4096, V 128256 (bf16, fwd+bwd), each chunk size given,
timed with harness.paired_ms against a GEMM floor of the same FLOPs (the policy's logits, dX and dW
GEMMs at full size, plus the reference's logits GEMM), so that two builds run in alternate processes
compare by the ratio (robust to the clock drift of a sustained H100 load). One line a case: ms,
floor ms, median ratio, peak MiB above the inputs.

Usage: PYTHONPATH=<build>:benchmarks python scripts/probes/pref_ab.py [--losses dpo,orpo,kto] [--chunks 1,2,8]
"""

import argparse

import torch
from bench_chunked_loss import LOSSES, make_inputs
from harness import paired_ms, peak_extra_bytes

from liger_cpp import chunked_loss as cl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--losses", default="dpo,orpo,kto")
    ap.add_argument("--chunks", default="1,2,8")
    ap.add_argument("--shape", default="8,1024,4096,128256", help="pairs,T,H,V")
    args = ap.parse_args()
    shape = tuple(int(v) for v in args.shape.split(","))
    p, T, h, v = shape
    w, x, t, rx, rw, lab = make_inputs(shape, "cuda", torch.bfloat16)
    m = 2 * p * T
    xs, ws = x.detach(), w.detach()
    dl = torch.empty(m, v, device="cuda", dtype=torch.bfloat16)
    for loss in args.losses.split(","):
        spec = LOSSES[loss]

        def floor(ref=spec["ref"]):
            torch.mm(xs.view(m, h), ws.t(), out=dl)
            if ref:
                torch.mm(rx.view(m, h), rw.t(), out=dl)
            torch.mm(dl, ws)
            torch.mm(dl.t(), xs.view(m, h))

        for cs in (int(c) for c in args.chunks.split(",")):
            mod = getattr(cl, spec["cls"])(chunk_size=cs, **spec["kw"])

            def step(mod=mod, call=spec["call"]):
                call(mod, w, x, t, rx, rw, lab).backward()

            step()
            x.grad = w.grad = None
            peak = peak_extra_bytes(step)
            x.grad = w.grad = None
            ms, fl, ratio = paired_ms(step, floor, grad_to_none=[x, w], rounds=5, rep=400)
            mib = peak / 2**20
            print(f"{loss} chunk={cs}: {ms:.3f} ms floor {fl:.3f} x{ratio:.4f} peak {mib:.0f} MiB")
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
