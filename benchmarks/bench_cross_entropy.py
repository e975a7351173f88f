"""Cross-entropy benchmark (bf16 logits 8192 x V, V in 32000, 128256, 151936, 262144): liger_cpp
(default, and inplace=True), PyTorch eager as Hugging Face computes it (`F.cross_entropy(logits.float(),
t)`), torch.compile of that, and Liger-Kernel's LigerCrossEntropyFunction (when importable), in one
run: time, % of the copy bandwidth C and peak memory above the inputs.

Bytes (minimum): fwd+bwd 2*M*V*2 (read the logits, write the gradient), forward without gradient
M*V*2. Peak memory is measured over one forward + backward from a state with only the logits and
targets allocated, so it includes the returned gradient (a logits-sized buffer, except for the
in-place variants, which write it into the logits). Liger and liger_cpp inplace=True overwrite the
logits with the gradient, so after the first iteration they run on gradient values (not zeros).
Usage: python benchmarks/bench_cross_entropy.py [--out FILE.json] [--quick | --vocab V,V] [--ours-only]
       [--plans "SPEC;SPEC"]
--plans adds a liger_cpp row per launch-plan override (docs/tuning.md), e.g. `--plans
"ce=cluster;ce_smem_blocks=4;ce=two_pass"`: the kernels of an A/B in one process, against the same
copy bandwidth C. --ours-only times liger_cpp alone; with LIGER_CPP_PLAN set for the whole process
its rows carry that spec in their names.
"""

import argparse
import os

import torch
import torch.nn.functional as F
from harness import (
    bench_ms,
    copy_bandwidth_gbs,
    fmt_table,
    meta,
    peak_extra_bytes,
    set_variant_plan,
    try_import_liger,
    write_json,
)

import liger_cpp
from liger_cpp.ops.cross_entropy import cross_entropy


def eager_ce(logits, target):
    # HF's ForCausalLMLoss: logits upcast to float32, then F.cross_entropy.
    return F.cross_entropy(logits.float(), target)


def plan_tag():
    spec = os.environ.get("LIGER_CPP_PLAN", "")
    return f"[{spec}]" if spec else ""


# Rows forced through the plan override ({row name: {key: value}}), filled by --plans.
VARIANT_PLAN = {}


def variants(have_liger, ours_only=False, plans=()):
    tag = plan_tag()
    out = {
        "liger_cpp" + tag: lambda x, t: cross_entropy(x, t),
        "liger_cpp inplace" + tag: lambda x, t: cross_entropy(x, t, inplace=True),
    }
    for spec in plans:
        VARIANT_PLAN[f"liger_cpp[{spec}]"] = dict(kv.split("=") for kv in spec.split(","))
        out[f"liger_cpp[{spec}]"] = lambda x, t: cross_entropy(x, t)
    if ours_only:
        return out
    out["eager"] = eager_ce
    out["compile"] = torch.compile(eager_ce, dynamic=False)
    if have_liger:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

        def liger(x, t):
            r = LigerCrossEntropyFunction.apply(x, t, None)
            return r[0] if isinstance(r, tuple) else r

        out["liger"] = liger
    return out


def _row(V, m, mode, name, ms, nbytes, C, peak=None, error=None):
    r = {"V": V, "shape": f"{m}x{V}", "mode": mode, "impl": name}
    if error is not None:
        return {**r, "ms": None, "GB/s": None, "%C": None, "peak MiB": None, "error": error}
    gbs = nbytes / (ms * 1e-3) / 1e9
    r.update({"ms": round(ms, 4), "GB/s": round(gbs), "%C": round(100 * gbs / C, 1)})
    r["peak MiB"] = None if peak is None else round(peak / 2**20)
    return r


def run_shape(m, V, fns, C):
    rows = []
    x = torch.randn(m, V, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    t = torch.randint(0, V, (m,), device="cuda")
    for name, f in fns.items():
        set_variant_plan(VARIANT_PLAN, name)
        try:
            with torch.no_grad():
                x.copy_(torch.randn_like(x))
            ms = bench_ms(lambda f=f, x=x, t=t: f(x, t).backward(), grad_to_none=[x])
            x.grad = None
            torch.cuda.empty_cache()
            peak = peak_extra_bytes(lambda f=f, x=x, t=t: f(x, t).backward())
            x.grad = None
            rows.append(_row(V, m, "fwd+bwd", name, ms, 2 * m * V * 2, C, peak))
        except Exception as e:  # noqa: BLE001 - a failing baseline is reported, not fatal
            x.grad = None
            rows.append(_row(V, m, "fwd+bwd", name, None, 0, C, error=str(e).splitlines()[0][:120]))
        torch.cuda.empty_cache()
    # forward only (no gradient): one read of the logits
    with torch.no_grad():
        x.copy_(torch.randn_like(x))
        for name in [n for n in fns if n.startswith("liger_cpp") and "inplace" not in n] + [
            n for n in ("eager", "compile") if n in fns
        ]:
            set_variant_plan(VARIANT_PLAN, name)
            ms = bench_ms(lambda f=fns[name], x=x, t=t: f(x, t))
            rows.append(_row(V, m, "fwd (no grad)", name, ms, m * V * 2, C))
    set_variant_plan(VARIANT_PLAN, None)
    del x, t
    torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true", help="V in 32000, 128256 only")
    ap.add_argument("--ours-only", action="store_true", help="liger_cpp alone (kernel A/B runs)")
    ap.add_argument("--vocab", default=None, help="comma-separated V list (overrides --quick)")
    ap.add_argument("--plans", default="", help="';'-separated plan overrides as extra rows (ce=cluster;...)")
    args = ap.parse_args()
    have_liger = not args.ours_only and try_import_liger()
    C = copy_bandwidth_gbs()
    m = 8192
    vocab = [32000, 128256] if args.quick else [32000, 128256, 151936, 262144]
    if args.vocab:
        vocab = [int(v) for v in args.vocab.split(",")]
    fns = variants(have_liger, args.ours_only, [v for v in args.plans.split(";") if v])
    rows = []
    for V in vocab:
        rows += run_shape(m, V, fns, C)
    payload = {
        "op": "cross_entropy",
        "dtype": "bfloat16",
        "copy_GBps": round(C),
        **meta(),
        "liger_cpp_version": liger_cpp.__version__,
        "rows": rows,
    }
    if args.out:
        write_json(args.out, payload)
    gpu, commit = payload["gpu"], payload["commit"]
    print(f"CrossEntropy bf16 {m} x V on {gpu}, copy bandwidth C = {C:.0f} GB/s, commit {commit}")
    print(fmt_table(rows, ["shape", "mode", "impl", "ms", "GB/s", "%C", "peak MiB"]))


if __name__ == "__main__":
    main()
