"""Probe: the one-block-per-row kernels of the RL and distillation ops on given logits (token
log-probs forward, CE + TVD, JSD / KL / TVD) timed with whichever liger_cpp is first on the path, so
that two builds can be A/B'd in alternating processes (scripts/gpu_row_kernels_ab.sh). bf16, median
ms (harness.bench_ms); one line a case: `case ms`.
Usage: PYTHONPATH=<package root>:benchmarks python scripts/probes/row_kernels_ab.py"""

import torch
from harness import bench_ms

from liger_cpp.ops import fused_ce_tvd, fused_linear_token_logprobs, jsd, kl_div, selective_log_softmax, tvd

V1, V2 = 151936, 128256


def logits(rows, v, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(rows, v, device="cuda", generator=g) * 4).bfloat16()


def ids(rows, v, ignore_every=0):
    t = torch.randint(0, v, (rows,), device="cuda")
    if ignore_every:
        keep = torch.arange(rows, device="cuda") % ignore_every == 0
        t = torch.where(keep, t, torch.full_like(t, -100))
    return t


def main():
    cases = {}
    for rows, ign in ((8200, 0), (8200, 2), (1032, 0), (16400, 0), (264, 0)):
        z, t = logits(rows, V1, 0), ids(rows, V1, ign)
        cases[f"selective {rows}x{V1} ignore_every={ign}"] = lambda z=z, t=t: selective_log_softmax(z, t, 0.9)
    for rows, v in ((4096, V1), (8192, V2)):
        s = logits(rows, v, 1).requires_grad_()
        tt, y = logits(rows, v, 2), ids(rows, v)

        def ce_tvd_step(s=s, tt=tt, y=y):
            ce, tv = fused_ce_tvd(s, tt, y)
            (ce.sum() + tv.sum()).backward()

        cases[f"ce_tvd fwd+bwd {rows}x{v}"] = (ce_tvd_step, [s])
    rows, v = 4096, V1
    x = torch.log_softmax(logits(rows, v, 3).float(), -1).bfloat16().requires_grad_()
    p = torch.log_softmax(logits(rows, v, 4).float(), -1).bfloat16()

    def jsd_step():
        jsd(x, p, beta=0.5).backward()

    def kl_step():
        kl_div(x, p, log_target=True).backward()

    cases[f"jsd fwd+bwd {rows}x{v}"] = (jsd_step, [x])
    cases[f"kl_div fwd+bwd {rows}x{v}"] = (kl_step, [x])
    q = torch.softmax(logits(rows, v, 5).float(), -1).bfloat16()
    xp = q.clone().requires_grad_()
    q2 = torch.softmax(logits(rows, v, 6).float(), -1).bfloat16()
    cases[f"tvd fwd+bwd {rows}x{v}"] = (lambda: tvd(xp, q2).backward(), [xp])
    m, h = 8192, 4096  # the token log-probs op's chunk rows (GEMMs around them)
    hid = (torch.randn(m, h, device="cuda") * 0.5).bfloat16().requires_grad_()
    w = (torch.randn(V1, h, device="cuda") * 0.02).bfloat16().requires_grad_()
    tk = ids(m, V1)

    def logprobs_step():
        lp, ent = fused_linear_token_logprobs(hid, w, tk, temperature=0.9, return_entropy=True)
        (lp.sum() + ent.sum()).backward()

    cases[f"token_logprobs+entropy fwd+bwd {m}x{h}x{V1}"] = (logprobs_step, [hid, w])
    for name, c in cases.items():
        fn, g = c if isinstance(c, tuple) else (c, None)
        rep = 40 if "token_logprobs" in name else 200
        print(f"{name}: {bench_ms(fn, grad_to_none=g, warmup=10, rep=rep):.4f}", flush=True)


if __name__ == "__main__":
    main()
