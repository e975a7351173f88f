"""Multi-GPU training throughput and memory (issue 30): Llama-3-8B (random init, bf16, AdamW,
gradient checkpointing) under FSDP1 (use_orig_params=True), FSDP2 (fully_shard per decoder layer,
optionally HSDP over a 2-D mesh) or DeepSpeed ZeRO-3, for plain Hugging Face, HF + Liger-Kernel and
HF + liger_cpp, at several contexts; tokens/s per GPU and peak memory per GPU, one JSON per run.

One configuration a launch (what the issue's table needs: an out-of-memory run ends only itself):

    torchrun --standalone --nproc-per-node 8 benchmarks/bench_distributed.py \\
        --stacks liger_cpp --kinds fsdp2 --contexts 8192 --batch 8 --out-dir results/dist

The whole table, each configuration in its own torchrun launch, contexts ascending per stack and
kind until one runs out of memory, then the longest that fits found by bisection (multiples of
--max-step tokens); and the table from the JSON files:

    python benchmarks/bench_distributed.py sweep --nproc 8 --stacks hf,liger,liger_cpp \\
        --kinds fsdp1,fsdp2 --contexts 4096,8192,16384,32768 --find-max --out-dir results/dist
    python benchmarks/bench_distributed.py report --out-dir results/dist

--tiny runs a tiny Llama on the CPU with gloo (the CI test: tests/test_bench_distributed.py), every
listed stack, kind and context in one launch (stacks switched in-process: hf, then liger_cpp).
Multi-node: the same script under torchrun --nnodes / --rdzv-endpoint (docs/distributed.md);
--hsdp G shards within groups of G ranks (a node) and replicates across them (FSDP2's 2-D mesh).
Timing: --warmup steps, then --steps timed steps, each ending in a synchronisation (the loss read).
"""

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

LLAMA3_8B = dict(
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    rope_theta=500000.0,
)
TINY = dict(
    hidden_size=64,
    intermediate_size=172,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=512,
)
STACKS = ("hf", "liger", "liger_cpp")
KINDS = ("fsdp1", "fsdp2", "zero3")
OOM_EXIT = 3


# --------------------------------------------------------------------------------------------
# stacks


def real_liger_available() -> str:
    """Liger-Kernel's version when the real package imports ('' otherwise; liger_cpp's compatibility
    package, also named liger_kernel, does not count)."""
    try:
        from importlib.metadata import version

        import liger_kernel  # noqa: F401

        v = version("liger-kernel")
    except Exception:  # noqa: BLE001 - not installed, or broken
        return ""
    return "" if "liger.cpp" in v else v


def apply_stack(stack: str) -> str:
    """Patches the Llama classes for `stack` (before the model is built); returns its version."""
    if stack == "hf":
        import transformers

        return transformers.__version__
    if stack == "liger_cpp":
        import liger_cpp
        from liger_cpp.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama()
        return liger_cpp.__version__
    v = real_liger_available()
    if not v:
        raise SystemExit("bench_distributed: --stacks liger needs Liger-Kernel (pip install liger-kernel)")
    from liger_kernel.transformers import apply_liger_kernel_to_llama

    apply_liger_kernel_to_llama()
    return v


def revert_stack(stack: str) -> None:
    if stack == "liger_cpp":
        from liger_cpp.transformers.monkey_patch import revert_liger_kernel

        revert_liger_kernel()


# --------------------------------------------------------------------------------------------
# model and sharding


def build_config(args, seq: int):
    from liger_cpp.demo import build_llama_config

    return build_llama_config(TINY if args.tiny else LLAMA3_8B, seq, use_cache=False)


def _init_weights(model, seed: int) -> None:
    """HF's own initialisation (normal / ones, the rotary tables) on weights materialised from the
    meta device (FSDP2's DTensor shards, FSDP1's flat-parameter views): same values on every run."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        model.initialize_weights()


def build_model(args, seq: int, device, mesh=None):
    """The sharded model for args.kind on `device` (DeepSpeed's is built by its engine)."""
    import torch
    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    cfg = build_config(args, seq)
    cfg._attn_implementation = args.attn
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg).to(dtype)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    if args.kind == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        if args.lm_head_unit:
            fully_shard(model.lm_head, mesh=mesh)
        fully_shard(model, mesh=mesh)
        model.to_empty(device=device)
    elif args.kind == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        model = FullyShardedDataParallel(
            model,
            auto_wrap_policy=ModuleWrapPolicy({LlamaDecoderLayer}),
            use_orig_params=True,
            device_id=device,
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            param_init_fn=lambda m: m.to_empty(device=device, recurse=False),
        )
    _init_weights(model.module if args.kind == "fsdp1" else model, args.seed)
    return model


def build_zero3(args, seq: int, device):
    import deepspeed
    import torch
    from transformers import LlamaForCausalLM

    cfg = build_config(args, seq)
    cfg._attn_implementation = args.attn
    ds = {
        "train_micro_batch_size_per_gpu": args.batch,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": args.dtype == "bf16"},
        "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True},
        "zero_allow_untested_optimizer": True,
        "gradient_clipping": 0.0,
        "steps_per_print": 10**9,
    }
    torch.manual_seed(args.seed)
    with deepspeed.zero.Init(config_dict_or_path=ds):
        model = LlamaForCausalLM(cfg)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=ds)
    return engine


# --------------------------------------------------------------------------------------------
# one run


def _peak(device) -> int:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_one(args, stack: str, seq: int, device, mesh, versions: dict) -> dict:
    """Trains warmup + steps steps of one configuration; every rank returns its record."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = device.type == "cuda"
    gc.collect()  # the previous configuration's model and optimizer state
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    t_build = time.perf_counter()
    if args.kind == "zero3":
        model = build_zero3(args, seq, device)
        opt = None
    else:
        model = build_model(args, seq, device, mesh)
        opt = torch.optim.AdamW(
            model.parameters(), lr=args.lr, weight_decay=0.0, fused=cuda, foreach=not cuda
        )
    build_s = time.perf_counter() - t_build
    vocab = (TINY if args.tiny else LLAMA3_8B)["vocab_size"]
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    losses, times, fused_path = [], [], []
    for _ in range(args.warmup + args.steps):
        ids = torch.randint(0, vocab, (args.batch, seq), generator=gen).to(device)
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        if opt is None:
            model.backward(out.loss)
            model.step()
        else:
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        loss = out.loss.detach().float()
        dist.all_reduce(loss)
        lv = loss.item() / world  # synchronises
        times.append(time.perf_counter() - t0)
        losses.append(lv)
        fused_path.append(out.logits is None)
        del out
    timed = times[args.warmup :]
    tps = args.batch * seq * len(timed) / sum(timed)
    peaks = [None] * world
    dist.all_gather_object(peaks, _peak(device))
    tps_all = [None] * world
    dist.all_gather_object(tps_all, tps)
    rec = dict(
        status="ok",
        stack=stack,
        kind=args.kind,
        world=world,
        hsdp=args.hsdp,
        lm_head_unit=args.lm_head_unit,
        batch_per_gpu=args.batch,
        global_batch=args.batch * world,
        seq=seq,
        tokens_per_step_per_gpu=args.batch * seq,
        warmup=args.warmup,
        steps=args.steps,
        step_s=times,
        losses=losses,
        fused_loss_path=all(fused_path),
        tokens_per_s_per_gpu=sum(tps_all) / world,
        tokens_per_s_per_gpu_by_rank=tps_all,
        peak_memory_per_gpu=max(peaks),
        peak_memory_by_rank=peaks,
        build_s=build_s,
        model="tiny" if args.tiny else "llama3-8b",
        dtype=args.dtype,
        attn=args.attn,
        versions=versions,
        device=torch.cuda.get_device_name(device) if cuda else "CPU",
    )
    del model, opt
    return rec


def _out_name(stack, kind, seq, batch, world) -> str:
    return f"{stack}-{kind}-t{seq}-b{batch}-w{world}.json"


def worker_main(args) -> int:
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if args.tiny:
        torch.set_num_threads(1)
        if os.path.isdir("/sys/class/net/lo"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    device = torch.device("cpu") if args.tiny else torch.device("cuda", local)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    kinds = args.kinds.split(",")
    if "zero3" in kinds:
        if args.tiny:
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed

        if args.tiny:  # no JIT build of DeepSpeed's shared-memory all-reduce: gloo does it all
            deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        deepspeed.init_distributed(
            dist_backend="gloo" if args.tiny else "nccl", timeout=timedelta(seconds=600)
        )
    else:
        dist.init_process_group(
            "gloo" if args.tiny else "nccl",
            timeout=timedelta(seconds=600),
            **({"device_id": device} if device.type == "cuda" else {}),
        )
    world = dist.get_world_size()
    out_dir = Path(args.out_dir)
    if rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
    mesh = None
    from torch.distributed.device_mesh import init_device_mesh

    if args.hsdp:
        if world % args.hsdp:
            raise SystemExit(f"bench_distributed: --hsdp {args.hsdp} must divide the world size {world}")
        mesh = init_device_mesh(
            device.type, (world // args.hsdp, args.hsdp), mesh_dim_names=("replicate", "shard")
        )
    elif "fsdp2" in kinds:
        mesh = init_device_mesh(device.type, (world,))
    stacks = args.stacks.split(",")
    if len(stacks) > 1 and not args.tiny:
        raise SystemExit("bench_distributed: one stack a launch on GPUs (the sweep mode launches each)")
    try:
        for stack in sorted(stacks, key=STACKS.index):  # hf first: the liger_cpp patch is reverted after
            versions = dict(stack=apply_stack(stack), torch=torch.__version__)
            for kind in kinds:
                args.kind = kind
                for seq in (int(s) for s in args.contexts.split(",")):
                    name = _out_name(stack, kind, seq, args.batch, world)
                    try:
                        rec = run_one(args, stack, seq, device, mesh, versions)
                    except torch.cuda.OutOfMemoryError as e:
                        rec = dict(
                            status="oom",
                            stack=stack,
                            kind=kind,
                            seq=seq,
                            batch_per_gpu=args.batch,
                            world=world,
                            rank=rank,
                            message=str(e)[:500],
                        )
                        # this rank's record, then out at once: torchrun ends the others, which may be
                        # waiting for this one in a collective
                        (out_dir / f"{name[:-5]}.oom-rank{rank}.json").write_text(json.dumps(rec))
                        sys.stdout.flush()
                        os._exit(OOM_EXIT)
                    if rank == 0:
                        (out_dir / name).write_text(json.dumps(rec, indent=1))
                        tps, peak = rec["tokens_per_s_per_gpu"], rec["peak_memory_per_gpu"] / 2**30
                        print(
                            f"{stack:>9} {kind} T={seq:>6} B={args.batch}: {tps:,.0f} tok/s/GPU, "
                            f"peak {peak:.2f} GiB/GPU, loss {rec['losses'][0]:.4f} -> "
                            f"{rec['losses'][-1]:.4f}, "
                            f"fused {rec['fused_loss_path']}",
                            flush=True,
                        )
            revert_stack(stack)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if args.tiny:
        # gloo's worker threads can outlive destroy_process_group and abort ("terminate called
        # without an active exception") while the interpreter finalises; CI saw it once under load.
        # Every record is written and flushed by now, so this rank leaves without finalising.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


# --------------------------------------------------------------------------------------------
# sweep and report (no GPU work in this process)


def _launch(args, stack, kind, seq) -> str:
    """One torchrun launch; 'ok', 'oom' or 'error'."""
    out = Path(args.out_dir)
    name = _out_name(stack, kind, seq, args.batch, args.nproc)
    if (out / name).exists() and not args.force:
        return "ok"
    cmd = (
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={args.nproc}",
            __file__,
            f"--stacks={stack}",
            f"--kinds={kind}",
            f"--contexts={seq}",
            f"--batch={args.batch}",
            f"--steps={args.steps}",
            f"--warmup={args.warmup}",
            f"--out-dir={args.out_dir}",
            f"--attn={args.attn}",
        ]
        + (["--lm-head-unit"] if args.lm_head_unit else [])
        + ([f"--hsdp={args.hsdp}"] if args.hsdp else [])
    )
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, timeout=args.launch_timeout).returncode
    if (out / name).exists():
        return "ok"
    return "oom" if list(out.glob(f"{name[:-5]}.oom-rank*.json")) else f"error (exit {rc})"


def sweep_main(args) -> int:
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    contexts = sorted(int(s) for s in args.contexts.split(","))
    for stack in args.stacks.split(","):
        if stack == "liger" and not real_liger_available():
            print("sweep: Liger-Kernel is not importable; skipping stack 'liger'")
            continue
        for kind in args.kinds.split(","):
            fits, fails = 0, None
            for seq in contexts:
                status = _launch(args, stack, kind, seq)
                print(f"sweep: {stack} {kind} T={seq}: {status}", flush=True)
                if status == "ok":
                    fits = seq
                else:
                    fails = seq
                    break
            if args.find_max:
                lo, hi = fits, fails or contexts[-1] * 2
                if fails is None:  # every listed context fit: double until one does not
                    while lo and hi <= args.max_context and _launch(args, stack, kind, hi) == "ok":
                        lo, hi = hi, hi * 2
                while hi - lo > args.max_step:
                    mid = (lo + hi) // 2 // args.max_step * args.max_step
                    if mid in (lo, hi):
                        break
                    lo, hi = (mid, hi) if _launch(args, stack, kind, mid) == "ok" else (lo, mid)
                print(f"sweep: {stack} {kind}: longest context that fits {lo}", flush=True)
                Path(args.out_dir, f"max-{stack}-{kind}-b{args.batch}-w{args.nproc}.json").write_text(
                    json.dumps(
                        dict(stack=stack, kind=kind, batch_per_gpu=args.batch, world=args.nproc, max_seq=lo)
                    )
                )
    return report_main(args)


def report_main(args) -> int:
    """The table from the JSON files of out_dir: per kind, world and batch, one row a context."""
    out = Path(args.out_dir)
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*-t*-b*-w*.json")) if "oom" not in p.name]
    ooms = {
        (r["stack"], r["kind"], r["seq"], r["batch_per_gpu"], r["world"])
        for r in (json.loads(p.read_text()) for p in out.glob("*.oom-rank*.json"))
    }
    maxes = {
        (m["stack"], m["kind"], m["batch_per_gpu"], m["world"]): m["max_seq"]
        for m in (json.loads(p.read_text()) for p in out.glob("max-*.json"))
    }
    lines = []
    groups = sorted(
        {(r["kind"], r["world"], r["batch_per_gpu"]) for r in runs} | {(k, w, b) for (_, k, _, b, w) in ooms}
    )
    for kind, world, batch in groups:
        got = {
            (r["stack"], r["seq"]): r
            for r in runs
            if (r["kind"], r["world"], r["batch_per_gpu"]) == (kind, world, batch)
        }
        stacks = [
            s for s in STACKS if any(k[0] == s for k in got) or any(o[0] == s and o[1] == kind for o in ooms)
        ]
        seqs = sorted(
            {k[1] for k in got} | {o[2] for o in ooms if o[1] == kind and o[4] == world and o[3] == batch}
        )
        lines.append(f"\n{kind}, {world} GPUs, batch {batch} per GPU (tokens/s per GPU, peak GiB per GPU)")
        head = f"{'context':>8} " + " ".join(f"{s + ' tok/s':>16} {s + ' GiB':>14}" for s in stacks)
        if "liger_cpp" in stacks and "liger" in stacks:
            head += f" {'cpp/liger tok/s':>16} {'cpp/liger mem':>14}"
        if "liger_cpp" in stacks and "hf" in stacks:
            head += f" {'cpp/hf tok/s':>13} {'cpp/hf mem':>11}"
        lines.append(head)
        for seq in seqs:
            row = f"{seq:>8} "
            for s in stacks:
                r = got.get((s, seq))
                if r:
                    row += f"{r['tokens_per_s_per_gpu']:>16,.0f} {r['peak_memory_per_gpu'] / 2**30:>14.2f} "
                else:
                    row += f"{'OOM' if (s, kind, seq, batch, world) in ooms else '-':>16} {'':>14} "
            for base in ("liger", "hf"):
                a, b = got.get(("liger_cpp", seq)), got.get((base, seq))
                if "liger_cpp" in stacks and base in stacks:
                    if a and b:
                        row += f"{a['tokens_per_s_per_gpu'] / b['tokens_per_s_per_gpu']:>13.3f} "
                        row += f"{a['peak_memory_per_gpu'] / b['peak_memory_per_gpu']:>11.3f} "
                    else:
                        row += f"{'-':>13} {'-':>11} "
            lines.append(row.rstrip())
        for s in stacks:
            if (s, kind, batch, world) in maxes:
                lines.append(f"  longest context that fits, {s}: {maxes[(s, kind, batch, world)]}")
    text = "\n".join(lines).lstrip("\n") or "report: no results"
    print(text)
    (out / "table.txt").write_text(text + "\n")
    return 0


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", default="run", choices=["run", "sweep", "report"])
    p.add_argument("--stacks", default="liger_cpp", help=f"comma-separated of {STACKS}")
    p.add_argument("--kinds", default="fsdp2", help=f"comma-separated of {KINDS}")
    p.add_argument("--contexts", default="4096", help="comma-separated sequence lengths")
    p.add_argument("--batch", type=int, default=8, help="sequences per GPU per step")
    p.add_argument(
        "--global-batch", type=int, default=0, help="sequences per step over all GPUs (sets --batch)"
    )
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--dtype", default=None, choices=["bf16", "fp32"], help="default: bf16 (fp32 --tiny)")
    p.add_argument("--attn", default="sdpa")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--hsdp", type=int, default=0, help="FSDP2 hybrid sharding: shard within groups of this many ranks"
    )
    p.add_argument("--lm-head-unit", action="store_true", help="FSDP2: lm_head its own fully_shard unit")
    p.add_argument("--tiny", action="store_true", help="a tiny Llama on the CPU with gloo (tests)")
    p.add_argument("--out-dir", default="bench_distributed")
    p.add_argument("--nproc", type=int, default=8, help="sweep: GPUs a launch")
    p.add_argument("--find-max", action="store_true", help="sweep: bisect the longest context that fits")
    p.add_argument("--max-step", type=int, default=2048, help="sweep: bisection granularity (tokens)")
    p.add_argument("--max-context", type=int, default=262144, help="sweep: the longest context tried")
    p.add_argument("--launch-timeout", type=int, default=3600)
    p.add_argument("--force", action="store_true", help="sweep: rerun configurations with results")
    args = p.parse_args(argv)
    args.dtype = args.dtype or ("fp32" if args.tiny else "bf16")
    if args.global_batch:
        world = int(os.environ.get("WORLD_SIZE", args.nproc))
        if args.global_batch % world:
            p.error(f"--global-batch {args.global_batch} is not a multiple of the {world} ranks")
        args.batch = args.global_batch // world
    for k in args.kinds.split(","):
        if k not in KINDS:
            p.error(f"unknown kind {k!r} (of {KINDS})")
    for s in args.stacks.split(","):
        if s not in STACKS:
            p.error(f"unknown stack {s!r} (of {STACKS})")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.mode == "sweep":
        return sweep_main(args)
    if args.mode == "report":
        return report_main(args)
    return worker_main(args)


if __name__ == "__main__":
    sys.exit(main())
