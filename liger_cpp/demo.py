"""Training demo: a Llama-architecture model trained twice from the same initialisation on the same
batches, once with plain Hugging Face transformers and once patched by liger_cpp
(``apply_liger_kernel_to_llama()``: RoPE, RMSNorm, SwiGLU, fused linear cross entropy), each run in
its own subprocess; tokens/s, peak memory and the loss curves side by side, and a PNG of both
when matplotlib is importable.

    python -m liger_cpp.demo                      # ~1B-class config on a GPU, a tiny one on CPU
    python -m liger_cpp.demo --size small --batch 4 --seq 512 --steps 30 --dtype bf16

The data ships with the package: liger_cpp's own Python sources, tokenised byte-level (token id =
byte value, so any vocabulary >= 256 fits; the configs keep Llama's vocabulary so the output layer
and its loss have their real cost). Nothing is downloaded.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Llama-architecture configs: "1b" is Llama 3.2 1B's shape (tied embeddings, 128k vocabulary).
SIZES = {
    "tiny": dict(
        hidden_size=64,
        intermediate_size=172,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    "small": dict(
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        vocab_size=32000,
    ),
    "1b": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        tie_word_embeddings=True,
        rope_theta=500000.0,
    ),
}
DTYPES = ("bf16", "fp16", "fp32")
RUNS = (("hf", "HF transformers"), ("liger", "liger_cpp"))


def corpus() -> bytes:
    """liger_cpp's Python sources, in a fixed order (the training text)."""
    root = Path(__file__).resolve().parent
    return b"\n".join(p.read_bytes() for p in sorted(root.rglob("*.py")))


def build_llama_config(shape: dict, seq: int, **extra):
    """A LlamaConfig of the given shape (SIZES entries; benchmarks/bench_e2e.py passes its own) for
    sequences of `seq` tokens, with rope_theta set the way the installed transformers takes it."""
    from transformers import LlamaConfig

    kw = dict(vocab_size=256, max_position_embeddings=max(seq, 256), rms_norm_eps=1e-5, hidden_act="silu")
    kw.update(shape)
    kw.update(extra)
    theta = kw.pop("rope_theta", 10000.0)
    cfg = LlamaConfig(bos_token_id=None, eos_token_id=None, pad_token_id=None, **kw)
    if getattr(cfg, "rope_parameters", None) is not None:  # transformers 5.x
        cfg.rope_parameters["rope_theta"] = theta
    else:  # pragma: no cover - transformers 4.x
        cfg.rope_theta = theta
    return cfg


def llama_config(size: str, seq: int):
    return build_llama_config(SIZES[size], seq)


# --------------------------------------------------------------------------------------------
# worker: one training run


def _bar(done: int, total: int, label: str, loss: float, tps: float) -> None:
    width = 30
    fill = int(width * done / total)
    tok = f"{tps / 1e3:,.1f}k tok/s" if tps else "warm-up"
    sys.stderr.write(
        f"\r  {label:<16} [{'#' * fill}{'.' * (width - fill)}] {done}/{total}  loss {loss:.4f}  {tok}  "
    )
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _peak_memory(device) -> int:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def worker(args) -> dict:
    import torch

    device = torch.device(args.device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    if args.run == "liger":
        from liger_cpp.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama()  # before the model is built (class level)
    from transformers import LlamaForCausalLM

    cfg = llama_config(args.size, args.seq)
    cfg._attn_implementation = args.attn
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    if args.grad_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=device.type == "cuda")
    data = torch.frombuffer(bytearray(corpus()), dtype=torch.uint8).long()
    gen = torch.Generator().manual_seed(1)
    label = dict(RUNS)[args.run]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses, times = [], []
    warmup = min(3, max(1, args.steps // 4))
    try:
        for step in range(args.steps):
            starts = torch.randint(0, data.numel() - args.seq, (args.batch,), generator=gen)
            ids = torch.stack([data[s : s + args.seq] for s in starts.tolist()]).to(device)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            value = loss.item()  # synchronises
            times.append(time.perf_counter() - t0)
            losses.append(value)
            timed = times[warmup:]
            tps = args.batch * args.seq * len(timed) / sum(timed) if timed else 0.0
            _bar(step + 1, args.steps, label, value, tps)
    except torch.cuda.OutOfMemoryError:
        sys.stderr.write(f"\n  {label}: out of memory at step {len(losses) + 1}\n")
        return dict(error="out of memory", losses=losses)
    timed = times[warmup:] or times
    return dict(
        losses=losses,
        step_s=times,
        tokens_per_s=args.batch * args.seq * len(timed) / sum(timed),
        peak_memory=_peak_memory(device),
        params=sum(p.numel() for p in model.parameters()),
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
    )


# --------------------------------------------------------------------------------------------
# driver: both runs, the comparison, the plot


def _fmt_mem(b) -> str:
    return f"{b / 2**30:,.2f} GiB" if b is not None else "-"


def _change(new, old) -> str:
    return f"{100.0 * (new / old - 1.0):+.0f}%" if new and old else ""


def report(args, results: dict) -> str:
    hf, lg = results["hf"], results["liger"]
    cfg = SIZES[args.size]
    ok = [r for r in (hf, lg) if "error" not in r]
    device = ok[0]["device"] if ok else args.device
    n = ok[0]["params"] if ok else 0
    params = (f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M") + " params, " if ok else ""
    lines = [
        f"Llama-architecture '{args.size}' model ({params}{cfg['num_hidden_layers']} layers, hidden "
        f"{cfg['hidden_size']}, vocab {cfg.get('vocab_size', 256)}) on {device}, {args.dtype}, "
        f"batch {args.batch} x {args.seq} tokens, {args.steps} steps",
        "",
        f"{'':<22}{'HF transformers':>18}{'liger_cpp':>18}{'change':>12}",
    ]

    def row(name, key, fmt):
        a, b = hf.get(key), lg.get(key)
        sa = fmt(a) if a is not None else hf.get("error", "-")
        sb = fmt(b) if b is not None else lg.get("error", "-")
        lines.append(f"{name:<22}{sa:>18}{sb:>18}{_change(b, a):>12}")

    row("tokens/s", "tokens_per_s", lambda v: f"{v:,.0f}")
    row("peak memory", "peak_memory", _fmt_mem)

    def last(r):
        return f"{r['losses'][-1]:.4f}" if r.get("losses") else "-"

    lines.append(f"{'final loss':<22}{last(hf):>18}{last(lg):>18}")
    n = min(len(hf.get("losses", [])), len(lg.get("losses", [])))
    if n:
        lines += ["", f"{'step':<22}{'loss (HF)':>18}{'loss (liger_cpp)':>18}{'diff':>12}"]
        every = max(1, n // 10)
        for i in list(range(0, n, every)) + ([n - 1] if (n - 1) % every else []):
            a, b = hf["losses"][i], lg["losses"][i]
            lines.append(f"{i + 1:<22}{a:>18.4f}{b:>18.4f}{b - a:>+12.4f}")
    if args.device == "cpu":
        lines.append("\n(CPU: peak memory is the process's peak RSS; speed is not what liger_cpp targets.)")
    return "\n".join(lines)


def plot(results: dict, path: str, title: str) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no PNG written (pip install matplotlib)."
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    for key, name in RUNS:
        losses = results[key].get("losses") or []
        ax1.plot(range(1, len(losses) + 1), losses, label=name)
    ax1.set_xlabel("step")
    ax1.set_ylabel("training loss")
    ax1.legend()
    ax1.grid(alpha=0.3)
    names = [name for _, name in RUNS]
    mem = [(results[k].get("peak_memory") or 0) / 2**30 for k, _ in RUNS]
    bars = ax2.bar(names, mem, color=["tab:blue", "tab:orange"])
    ax2.bar_label(bars, fmt="%.2f")
    ax2.set_ylabel("peak memory (GiB)")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return f"Plot written to {path}"


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m liger_cpp.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="cuda, cpu or auto (cuda when available)")
    p.add_argument("--size", choices=[*SIZES, "auto"], default="auto", help="auto: 1b on a GPU, tiny on CPU")
    p.add_argument("--batch", type=int, default=None, help="sequences per step (default 8 GPU, 8 CPU)")
    p.add_argument("--seq", type=int, default=None, help="tokens per sequence (default 1024 GPU, 128 CPU)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default 30 GPU, 20 CPU)")
    p.add_argument("--dtype", choices=DTYPES, default=None, help="model dtype (default bf16 GPU, fp32 CPU)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--attn", default="sdpa", help="attention implementation (sdpa, eager, flash_attention_2)")
    p.add_argument("--grad-checkpointing", action="store_true")
    p.add_argument("--png", default="liger_cpp_demo.png", help="plot path ('' for none)")
    p.add_argument("--json", default="", help="also write both runs' results to this JSON file")
    p.add_argument("--run", choices=[k for k, _ in RUNS], help=argparse.SUPPRESS)  # worker mode
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = args.device.startswith("cuda")
    if args.size == "auto":
        args.size = "1b" if gpu else "tiny"
    args.batch = args.batch or 8
    args.seq = args.seq or (1024 if gpu else 128)
    args.steps = args.steps or (30 if gpu else 20)
    args.dtype = args.dtype or ("bf16" if gpu else "fp32")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.run:  # worker subprocess
        Path(args.result).write_text(json.dumps(worker(args)))
        return 0
    if args.seq >= len(corpus()):
        raise SystemExit(f"liger_cpp.demo: --seq must be below the corpus size ({len(corpus())} bytes)")
    print(
        f"liger_cpp demo: {args.size} Llama on {args.device}, {args.dtype}, batch {args.batch} x {args.seq}"
    )
    results = {}
    common = [
        f"--{k}={getattr(args, k.replace('-', '_'))}"
        for k in ("device", "size", "batch", "seq", "steps", "dtype", "lr", "attn")
    ] + (["--grad-checkpointing"] if args.grad_checkpointing else [])
    with tempfile.TemporaryDirectory() as tmp:
        for key, _ in RUNS:
            out = os.path.join(tmp, f"{key}.json")
            cmd = [sys.executable, "-m", "liger_cpp.demo", *common, f"--run={key}", f"--result={out}"]
            proc = subprocess.run(cmd)  # progress bar on the inherited stderr
            if proc.returncode != 0 or not os.path.exists(out):
                results[key] = dict(error=f"failed (exit {proc.returncode})")
            else:
                results[key] = json.loads(Path(out).read_text())
    text = report(args, results)
    print("\n" + text)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(args=vars(args), results=results), indent=1))
    if args.png:
        print("\n" + plot(results, args.png, text.splitlines()[0]))
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
