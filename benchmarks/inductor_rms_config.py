"""Which Triton kernel torch.compile runs for the RMSNorm forward (HF formula, bf16, no grad), per
hidden size: the autotuned config (num_warps, R0_BLOCK / XBLOCK) Inductor chose and cached, the
kernel's registers, and its source's reduction loop. For matching our forward kernels against it
(benchmarks/triton_rms_sass.py compiles a guess statically; this reads what ran).

Usage (GPU): python benchmarks/inductor_rms_config.py [MxN ...] [--save DIR]
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="*", default=["32768x4096", "16384x8192", "8192x16384"])
    ap.add_argument("--save", default=None, help="copy the kernels' sources and cubins here")
    args = ap.parse_args()
    out = {}
    for shape in args.shapes:
        cache = tempfile.mkdtemp(prefix="inductor_rms_")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # a fresh process (and cache) a shape
        m, n = shape.split("x")
        code = (
            "import torch\n"
            "def f(x, w):\n"
            "    xf = x.float()\n"
            "    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)\n"
            f"x = torch.randn({m}, {n}, device='cuda', dtype=torch.bfloat16)\n"
            f"w = torch.randn({n}, device='cuda', dtype=torch.bfloat16)\n"
            "g = torch.compile(f, dynamic=False)\n"
            "with torch.no_grad():\n"
            "    for _ in range(3): g(x, w)\n"
            "torch.cuda.synchronize()\n"
        )
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
        entry = {"rc": r.returncode}
        if r.returncode != 0:
            entry["stderr"] = r.stderr[-2000:]
        best = sorted(glob.glob(f"{cache}/**/*.best_config", recursive=True))
        entry["best_config"] = [json.load(open(b)) for b in best]
        kernels = []
        for p in glob.glob(f"{cache}/**/*.py", recursive=True):
            text = open(p).read()
            if "@triton.jit" not in text or "def triton_" not in text:
                continue
            lines = text.splitlines()
            marks = ("@triton_heuristics", "def triton_", "r0_numel", "for r0_offset", "R0_BLOCK", "tl.load")
            marks += ("tl.store", "rsqrt", "tl.sum")
            keep = [ln for ln in lines if any(k in ln for k in marks)]
            kernels.append({"file": os.path.relpath(p, cache), "lines": keep[:60]})
        entry["kernels"] = kernels
        meta = [json.load(open(p)) for p in glob.glob(f"{cache}/**/*.json", recursive=True) if "triton" in p]
        entry["triton_meta"] = [
            {k: v for k, v in mm.items() if k in ("name", "num_warps", "num_stages", "shared", "num_ctas")}
            for mm in meta
            if isinstance(mm, dict)
        ]
        if shutil.which("cuobjdump"):  # registers of every cubin Inductor built
            entry["res_usage"] = [
                subprocess.run(["cuobjdump", "-res-usage", c], capture_output=True, text=True).stdout[-600:]
                for c in glob.glob(f"{cache}/**/*.cubin", recursive=True)
            ]
            for ru in entry["res_usage"]:
                print("  ", " ".join(ru.split()))
        if args.save:
            dst = os.path.join(args.save, shape)
            shutil.copytree(cache, dst, dirs_exist_ok=True)
        out[shape] = entry
        print(f"== {shape}: rc {r.returncode}")
        for b in entry["best_config"]:
            print("  best_config", b)
        for mm in entry["triton_meta"]:
            print("  meta", mm)
        for k in kernels:
            print("  kernel", k["file"])
            for ln in k["lines"]:
                print("    ", ln.strip()[:160])
        if r.returncode != 0:
            print(entry["stderr"])
    if args.save:
        with open(os.path.join(args.save, "inductor_rms_config.json"), "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
