"""Which CE row kernel runs, with which grid and block, per vocabulary size (bf16, 64 rows).

A diagnostic for the launch plan in csrc/kernels/cross_entropy/cross_entropy.cu (the cluster size is
not in the trace: it is grid / rows). Reads the kernels' launch configuration from a torch.profiler trace.
Usage: python benchmarks/ce_launch_shapes.py [V ...]
"""

import json
import sys
import tempfile

import torch

from liger_cpp.ops.cross_entropy import cross_entropy


def main():
    vocab = [int(v) for v in sys.argv[1:]] or [8192, 32000, 128256, 151936, 262144]
    rows = 64
    for V in vocab:
        x = torch.randn(rows, V, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        t = torch.randint(0, V, (rows,), device="cuda")
        cross_entropy(x, t).backward()  # warm-up: plans and opt-ins happen here
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            cross_entropy(x, t).backward()
            torch.cuda.synchronize()
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            prof.export_chrome_trace(f.name)
            trace = json.load(open(f.name))
        for e in trace.get("traceEvents", []):
            if e.get("cat") == "kernel" and "ce_" in e.get("name", ""):
                grid, block = e["args"].get("grid"), e["args"].get("block")
                per_row = grid[0] // rows if grid else None
                print(f"V={V:7d} {e['name'][:60]:60s} grid={grid} block={block} blocks/row={per_row}")


if __name__ == "__main__":
    main()
