"""Probe: Liger 0.8.5's per-token scaled cross entropy (LigerFusedLinearScaledCrossEntropyFunction):
NLL + entropy, fwd+bwd, with and without `selected_token_ids` (K 2: a yes / no verifier's ids),
liger_cpp against Liger's own (its CuTe DSL kernel where nvidia-cutlass-dsl is installed, else its
PyTorch fallback), M 8192, H 4096, V 151936 bf16, T 0.9. Median ms with the host hidden
(harness.bench_ms) and of the eager call as a user makes it (host included: a synchronise either
side), peak memory above the inputs, and the largest difference of the selected log-probs to the
float64 reference on the first 256 rows.
Usage: PYTHONPATH=.:benchmarks python scripts/probes/scaled_ce_selected.py"""

import statistics
import subprocess
import sys
import time

import torch
from harness import bench_ms, peak_extra_bytes

M, H, V, T = 8192, 4096, 151936, 0.9


def inputs():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(M, H, device="cuda", generator=g) * 0.5).bfloat16().requires_grad_(True)
    w = (torch.randn(V, H, device="cuda", generator=g) * 0.02).bfloat16().requires_grad_(True)
    t = torch.randint(0, V, (M,), device="cuda", generator=g)
    t[::17] = -100
    return x, w, t, torch.tensor([9454, 2753], device="cuda")


def measure(name, fn_cls):
    x, w, t, ids = inputs()
    gen = torch.Generator(device="cuda").manual_seed(1)
    g_nll, g_ent = torch.randn(M, device="cuda", generator=gen), torch.randn(M, device="cuda", generator=gen)
    g_sel = torch.randn(M, 2, device="cuda", generator=gen)
    xr, wr = x[:256].detach().double(), w.detach().double()
    ref = torch.log_softmax(xr @ wr.T / T, -1)[:, ids] * (t[:256] != -100)[:, None]
    for selected in (False, True):
        extra = (ids,) if selected else ()

        def step(extra=extra, selected=selected):
            out = fn_cls.apply(x, w, t, T, -100, 1, True, *extra)
            total = (out[0] * g_nll).sum() + (out[1].float() * g_ent).sum()
            if selected:
                total = total + (out[2] * g_sel).sum()
            total.backward()
            return out

        out = step()
        err = (out[2][:256].double() - ref).abs().max().item() if selected else float("nan")
        ms = bench_ms(step, grad_to_none=[x, w])
        eager = []
        for _ in range(10):
            x.grad = w.grad = None
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            eager.append((time.perf_counter() - t0) * 1e3)
        x.grad = w.grad = None
        mib = peak_extra_bytes(step) / 2**20
        print(
            f"{name:10s} selected={selected!s:5s} {ms:8.3f} ms (host hidden), "
            f"{statistics.median(eager):8.3f} ms eager, peak +{mib:7.0f} MiB, selected max|diff| {err:.2e}",
            flush=True,
        )


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "liger":
        from harness import put_liger_wheel_first

        put_liger_wheel_first()
        from liger_kernel.ops import fused_linear_scaled_cross_entropy as lsce

        try:
            print(f"liger implementation here: {lsce._resolve_implementation(torch.device('cuda')).__name__}")
            measure("liger", lsce.LigerFusedLinearScaledCrossEntropyFunction)
        except ImportError as e:  # sm_90 without nvidia-cutlass-dsl: Liger's dispatcher has no fallback
            print(f"liger: its sm_90 kernel is not importable ({e}); its PyTorch fallback instead")

            class Fallback:
                @staticmethod
                def apply(x, w, t, temperature, ignore_index, _tiles, entropy, *ids):
                    return lsce._FusedLinearPPOFallbackFunction.apply(
                        x, w, t, temperature, ignore_index, entropy, *ids
                    )

            measure("liger-fb", Fallback)
        return
    from liger_cpp.ops import LigerFusedLinearScaledCrossEntropyFunction

    measure("liger_cpp", LigerFusedLinearScaledCrossEntropyFunction)
    # Liger in its own process: its liger_kernel would collide with nothing here, but a fresh
    # process keeps the allocator's peak to its own.
    subprocess.run([sys.executable, __file__, "liger"], check=False)


if __name__ == "__main__":
    main()
