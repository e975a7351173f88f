"""End-to-end training benchmark (docs/benchmarking.md): a Hugging
Face Llama-architecture model, random init, bf16 params, fused AdamW, SDPA attention, trained on
random token batches. Each variant runs in its own subprocess (patching and CUDA memory do not leak
between them), with the same seed, the same initial weights and the same batches:

- hf:        plain transformers;
- liger_cpp: liger_cpp.transformers.apply_liger_kernel_to_llama() (rope, swiglu, rms_norm, FLCE),
             applied before the model is built;
- liger:     Liger-Kernel's apply_liger_kernel_to_llama() (same defaults), when importable;
- compile:   torch.compile(model) of plain HF.

Measured per variant: tokens/s (batch * seq over the median step time of the timed steps, each step
bracketed by torch.cuda.synchronize, after the warm-up steps), peak memory
(torch.cuda.max_memory_allocated() since a reset taken after the model, optimizer and batches exist,
so it includes weights, gradients and optimizer state; on the CPU: the process's peak RSS) and the
final loss. The first-step loss of every variant is compared with hf's (same init, same batch).

Presets: 1b-b8t2048, 1b-b4t8192 (Llama 3.2 1B shape: hidden 2048, 16 layers, 32/8 heads, inter 8192,
vocab 128256, tied), 8b-gc (Llama-3-8B, untied, gradient checkpointing, B1 T16384), tiny (CPU
check: hidden 64, 2 layers, vocab 1000, B2 T64, fp32) and host16 (CPU: the 1B's 16 layers with
grouped-query attention at hidden 64, 4/2 heads, vocab 512, B1 T16, fp32: a step that is mostly host
work, the proxy of the batch-1 GPU step; run it with OMP_NUM_THREADS=1; also with --family olmo3 or
qwen3_vl, whose attention has q / k norms).

--family picks the architecture (default llama). The newer families (issue 27) at ~1B scale with the
1b presets (FAMILIES below; each patched by apply_liger_kernel_to_<family>() with its defaults, in
liger_cpp and in Liger-Kernel alike): olmo3 (dense: 2048 hidden, 16 layers, 32/8 heads, inter 8192,
vocab 100278), hunyuan_v1_moe (MoE: 1024 hidden, 16 layers, 16 experts of 1536 + a shared MLP, top 2,
vocab 128256; 1.6 B parameters, 0.4 B active; the routed experts are HF's grouped_mm in hf,
liger_cpp's fused experts op in liger_cpp, Liger-Kernel's fused MoE in liger) and qwen3_vl
(multimodal, trained on its text path: Qwen3-VL-2B's text model with 16 layers, hidden 2048, 16/8
heads of 128, inter 6144, vocab 151936, and a 2-block vision tower). With the moe-b8t2048 preset:
qwen3_moe (issue 28: Qwen3-30B-A3B's experts, 128 of 768, top 8, hidden 2048, in 12 layers;
8.1 B parameters, 16384 tokens a step).

--breakdown (CUDA only) profiles one more step per variant after the timed ones and sums its GPU
kernel time by category (GEMM, attention, the stack's own kernels, optimizer, other), plus the GPU
idle time inside the step, and its host time: CPU self time by category (CUDA runtime, liger_cpp
ops, aten ops, autograd engine, optimizer) and thread, kernel launches, the costliest ops. The
GEMMs and attention are the same cuBLAS / SDPA kernels in every stack, so a stack's best possible
step is that time: this bounds the speed-up any kernel library can give at the shape (what the
1.25-1.3 x Liger targets need is checked against it).

Usage:
    python benchmarks/bench_e2e.py --preset 1b-b8t2048 [--variants hf,liger_cpp,liger,compile]
        [--steps 10] [--warmup 3] [--quick] [--breakdown] [--batch B] [--seq T] [--timeout 600]
        [--out FILE.json]
    python benchmarks/bench_e2e.py --preset 1b-b8t2048 --family olmo3   (or hunyuan_v1_moe, qwen3_vl)
    python benchmarks/bench_e2e.py --preset moe-b8t2048 --family qwen3_moe --variants hf,liger_cpp,liger
    python benchmarks/bench_e2e.py --preset tiny --device cpu --variants hf,liger_cpp --steps 3
The subprocesses inherit the environment (PYTHONPATH), so liger_cpp / liger_kernel resolve the same
as in the driver. A variant that fails (out of memory, import error, crash, timeout) is a row with
its error; the others still run. The JSON (--out) holds every variant's per-step losses and times,
its peak, and which modules ran (norm / MLP class, whether the forward returned logits: with FLCE
it must not). Expected time per variant on an H200 (estimates): ~20-40 s for the eager variants
(interpreter start, on-device init, 13 steps; Liger adds its Triton JIT), ~1-3 min for compile.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from liger_cpp.demo import SIZES, build_llama_config

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # harness, also when this file is imported (tests)

MODELS = {
    "tiny": dict(
        hidden_size=64,
        intermediate_size=172,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        tie_word_embeddings=False,
        rope_theta=10000.0,
    ),
    "1b": SIZES["1b"],  # the demo's: Llama 3.2 1B's shape
    # The 1B's layer structure (16 layers, grouped-query attention, tied embeddings) at tiny widths: on
    # the CPU a step of it is mostly host work (Python, dispatch, autograd, 0.6 M parameters for the
    # optimizer), the proxy of the batch-1 GPU step.
    "host16": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        tie_word_embeddings=True,
        rope_theta=500000.0,
    ),
    "8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        tie_word_embeddings=False,
        rope_theta=500000.0,
    ),
}
PRESETS = {
    "1b-b8t2048": dict(model="1b", batch=8, seq=2048, dtype="bf16", grad_checkpointing=False),
    "1b-b4t8192": dict(model="1b", batch=4, seq=8192, dtype="bf16", grad_checkpointing=False),
    "8b-gc": dict(model="8b", batch=1, seq=16384, dtype="bf16", grad_checkpointing=True),
    "tiny": dict(model="tiny", batch=2, seq=64, dtype="fp32", grad_checkpointing=False),
    "host16": dict(model="host16", batch=1, seq=16, dtype="fp32", grad_checkpointing=False),
    # --family qwen3_moe only: FAMILIES["qwen3_moe"]["moe"], 16384 tokens a step
    "moe-b8t2048": dict(model="moe", batch=8, seq=2048, dtype="bf16", grad_checkpointing=False),
}
# *_tiled: the stack's patch, then every decoder layer's MLP replaced by its tiled SwiGLU MLP
# (LigerTiledSwiGLUMLP: row shards, the forward computed again in the backward; llama family only)
VARIANTS = ("hf", "liger_cpp", "liger", "compile", "liger_cpp_tiled", "liger_tiled")
DEFAULT_VARIANTS = VARIANTS[:4]


# The newer families' shapes (model size -> config fields); "tiny" for the CPU check and "host16" for
# the host16 preset (the Llama presets' widths with each family's own RoPE base; host16 with head
# dim 16: OLMo 3's q / k norms span the projection, Qwen3-VL's each head).
def _family_shape(model: str, **extra) -> dict:
    return {**{k: v for k, v in MODELS[model].items() if k != "rope_theta"}, **extra}


_TINY = _family_shape("tiny")
_HOST16 = _family_shape("host16", head_dim=16)
FAMILIES = {
    "olmo3": {
        "1b": dict(
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=100278,
            tie_word_embeddings=False,
        ),
        "tiny": _TINY,
        "host16": _HOST16,
    },
    "hunyuan_v1_moe": {
        "1b": dict(
            hidden_size=1024,
            intermediate_size=1536,
            num_hidden_layers=16,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=64,
            num_experts=16,
            moe_topk=2,
            vocab_size=128256,
            tie_word_embeddings=False,
        ),
        "tiny": dict(_TINY, head_dim=16, num_experts=4, moe_topk=2),
    },
    # Qwen3-30B-A3B's experts (128 of 768, top 8, hidden 2048) in a 12-layer model that trains on one
    # H200: 8.1 B parameters (1.3 B active); the routed experts are most of each step's GEMM time.
    "qwen3_moe": {
        "moe": dict(
            hidden_size=2048,
            intermediate_size=6144,
            moe_intermediate_size=768,
            num_experts=128,
            num_experts_per_tok=8,
            norm_topk_prob=True,
            num_hidden_layers=12,
            num_attention_heads=32,
            num_key_value_heads=4,
            head_dim=128,
            vocab_size=151936,
            tie_word_embeddings=False,
        ),
        "tiny": dict(_TINY, head_dim=16, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2),
    },
    "qwen3_vl": {
        "1b": dict(
            hidden_size=2048,
            intermediate_size=6144,
            num_hidden_layers=16,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
            tie_word_embeddings=True,
        ),
        "tiny": dict(_TINY, head_dim=16),
        "host16": _HOST16,
    },
}
FAMILY_NAMES = ("llama", *FAMILIES)


def family_config(family: str, model: str, seq: int):
    """The config of a newer family at size `model` for `seq`-token sequences (SDPA attention)."""
    from transformers import CONFIG_MAPPING

    if model not in FAMILIES[family]:
        raise ValueError(f"--family {family}: no {model!r} shape (have {sorted(FAMILIES[family])})")
    text = dict(FAMILIES[family][model], max_position_embeddings=max(seq, 8192), use_cache=False)
    text.update(pad_token_id=None, bos_token_id=None, eos_token_id=None)
    if family == "qwen3_vl":
        tie = text.pop("tie_word_embeddings")
        vision = dict(
            depth=2,
            hidden_size=256,
            intermediate_size=1024,
            num_heads=4,
            out_hidden_size=text["hidden_size"],
            deepstack_visual_indexes=[1],
        )
        cfg = CONFIG_MAPPING["qwen3_vl"](text_config=text, vision_config=vision, tie_word_embeddings=tie)
    else:
        cfg = CONFIG_MAPPING[family](**text)
    cfg._attn_implementation = "sdpa"
    for sub in ("text_config", "vision_config"):
        if getattr(cfg, sub, None) is not None:
            getattr(cfg, sub)._attn_implementation = "sdpa"
    return cfg


MODEL_SEED, DATA_SEED = 0, 1234


def llama_config(model: str, seq: int):
    cfg = build_llama_config(MODELS[model], seq, max_position_embeddings=max(seq, 8192), use_cache=False)
    cfg._attn_implementation = "sdpa"
    return cfg


# --------------------------------------------------------------------------------------------
# worker: one variant, in its own process


def _patch(variant: str, family: str = "llama") -> None:
    """Class-level patching, before the model is built."""
    variant = variant.removesuffix("_tiled")
    if family != "llama":  # the newer families: their apply function with its defaults
        if variant == "liger_cpp":
            import liger_cpp.transformers as lt

            getattr(lt, f"apply_liger_kernel_to_{family}")()
        elif variant == "liger":
            import liger_kernel.transformers as lk

            getattr(lk, f"apply_liger_kernel_to_{family}")()
        return
    if variant == "liger_cpp":
        from liger_cpp.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(rope=True, swiglu=True, rms_norm=True, fused_linear_cross_entropy=True)
    elif variant == "liger":
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(rope=True, swiglu=True, rms_norm=True, fused_linear_cross_entropy=True)


# Kernel-name patterns per category, tried in order (the first that matches wins; attention first:
# the memory-efficient kernel is named cutlass_fmha). Attention: SDPA's flash / memory-efficient /
# cuDNN kernels; GEMMs: cuBLAS's Hopper kernels (nvjet, sm90_xmma, cutlass) and its split-K
# reductions; optimizer: fused AdamW's multi-tensor kernels; own: liger_cpp's kernels (namespace
# liger_cpp::kernels) and Triton's (Liger's, torch.compile's), whose names are bare identifiers
# (_swiglu_forward_kernel, triton_red_fused_...) where CUDA C++ kernels carry a signature.
KERNEL_CATEGORIES = (
    ("attention", ("flash", "fmha", "attention", "cudnn", "sdpa")),
    ("gemm", ("nvjet", "gemm", "xmma", "cutlass", "splitkreduce", "cublas")),
    ("optimizer", ("multi_tensor", "adam")),
    ("own", ("liger_cpp", "triton")),
)


def kernel_category(name: str) -> str:
    n = name.lower()
    for cat, keys in KERNEL_CATEGORIES:
        if any(k in n for k in keys):
            return cat
    return "own" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else "other"


def experts_ranges(model) -> list:
    """Profiler ranges around each routed-experts module's forward ("experts fwd") and backward
    ("experts bwd", between its full backward pre-hook and hook), whatever implementation runs
    inside (HF's, Liger's, liger_cpp's): the breakdown's experts share. Returns the hooks' handles."""
    import torch

    handles = []
    for m in model.modules():
        if not type(m).__name__.endswith("Experts"):
            continue
        open_ranges = {}

        def enter(key, name, ranges=open_ranges):
            ranges[key] = torch.autograd.profiler.record_function(name)
            ranges[key].__enter__()

        def leave(key, ranges=open_ranges):
            r = ranges.pop(key, None)
            if r is not None:
                r.__exit__(None, None, None)

        handles += [
            m.register_forward_pre_hook(lambda mod, a, e=enter: e("f", "experts fwd")),
            m.register_forward_hook(lambda mod, a, o, lv=leave: lv("f")),
            m.register_full_backward_pre_hook(lambda mod, go, e=enter: e("b", "experts bwd")),
            m.register_full_backward_hook(lambda mod, gi, go, lv=leave: lv("b")),
        ]
    return handles


def experts_time(events) -> dict:
    """GPU ms of the kernels launched inside the "experts fwd" / "experts bwd" ranges (each kernel
    counted once: the profiler attaches it to the op that launched it)."""
    import torch

    cpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    out = {"fwd": 0.0, "bwd": 0.0, "ranges": 0}
    for r in cpu:
        if r.name not in ("experts fwd", "experts bwd"):
            continue
        out["ranges"] += 1
        a, b = r.time_range.start, r.time_range.end
        us = sum(
            k.duration
            for e in cpu
            if e is not r and e.thread == r.thread and a <= e.time_range.start and e.time_range.end <= b
            for k in e.kernels
        )
        out["fwd" if r.name == "experts fwd" else "bwd"] += us / 1e3
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


def profiled_step(step, device) -> dict:
    """GPU kernel time of one training step by category (ms), the step's wall time and the top
    kernels of the 'other' and 'own' categories (what a stack could still fuse)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize(device)
        wall = time.perf_counter() - t0
    cats, names, spans = {}, {}, []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = e.time_range.end - e.time_range.start
        c = kernel_category(e.name)
        cats[c] = cats.get(c, 0.0) + us / 1e3
        if c in ("other", "own"):
            key = (c, e.name[:90])
            names[key] = names.get(key, 0.0) + us / 1e3
        spans.append((e.time_range.start, e.time_range.end))
    busy, end = 0.0, None  # union of the kernels' intervals: concurrent streams count once
    for a, b in sorted(spans):
        if end is None or a > end:
            busy += b - a
            end = b
        elif b > end:
            busy += b - end
            end = b
    top = sorted(names.items(), key=lambda kv: -kv[1])[:12]
    return dict(
        wall_ms=wall * 1e3,
        gpu_busy_ms=busy / 1e3,
        by_category_ms={k: round(v, 3) for k, v in sorted(cats.items())},
        top_kernels=[dict(category=c, name=n, ms=round(ms, 3)) for (c, n), ms in top],
        host=host_profile(prof.events(), wall * 1e3),
        experts_ms=experts_time(prof.events()),
    )


# Where a step's host time goes, by the profiler's CPU events' self time (first match wins).
HOST_CATEGORIES = (
    ("cuda runtime", ("cuda", "cu")),  # launches, memsets, copies, synchronisation
    ("liger_cpp ops", ("liger::",)),
    ("optimizer", ("Optimizer.",)),
    ("autograd engine", ("autograd::", "torch::autograd::")),
    ("aten ops", ("aten::",)),
)


def host_category(name: str) -> str:
    for cat, prefixes in HOST_CATEGORIES:
        if name.startswith(prefixes):
            return cat
    return "other"


def host_profile(events, wall_ms: float) -> dict:
    """Host side of one profiled step: CPU self time by category and by thread (the forward and
    optimizer run on the caller's thread, the CUDA backward on the autograd engine's), the number of
    kernel launches, and the ops with the most self time. Python between the ops is not an event:
    the caller's thread's untraced time (wall - its events' self time) bounds it."""
    import torch

    cats, threads, ops, launches = {}, {}, {}, 0
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CPU:
            continue
        us = e.self_cpu_time_total
        c = host_category(e.name)
        cats[c] = cats.get(c, 0.0) + us / 1e3
        threads[e.thread] = threads.get(e.thread, 0.0) + us / 1e3
        ops[e.name[:90]] = ops.get(e.name[:90], 0.0) + us / 1e3
        launches += e.name.startswith(("cudaLaunchKernel", "cuLaunchKernel"))
    busiest = max(threads.values(), default=0.0)
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:15]
    return dict(
        by_category_ms={k: round(v, 3) for k, v in sorted(cats.items())},
        by_thread_ms=sorted((round(v, 3) for v in threads.values()), reverse=True),
        untraced_ms=round(max(wall_ms - busiest, 0.0), 3),
        kernel_launches=launches,
        top_ops=[dict(name=n, ms=round(ms, 3)) for n, ms in top],
    )


def worker(args) -> dict:
    """One variant's run; any failure becomes {"error": ...} (with the losses so far)."""
    import torch

    state = dict(losses=[])
    try:
        return _train(args, state)
    except ImportError as e:  # Liger-Kernel absent is a note; liger_cpp or transformers absent is a failure
        return dict(error=f"not importable: {e}", skipped=args.variant in ("liger", "liger_tiled"))
    except torch.cuda.OutOfMemoryError:
        sys.stderr.write("\n")
        peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
        where = f"at step {len(state['losses']) + 1}" if state.get("training") else "before training"
        return dict(error=f"out of memory {where}", losses=state["losses"], peak_bytes=peak)
    except Exception as e:  # noqa: BLE001 - reported as the variant's row
        sys.stderr.write("\n")
        return dict(
            error=f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
            losses=state["losses"],
        )


def _tile_mlps(model, variant: str) -> None:
    """Each decoder layer's MLP replaced by the stack's LigerTiledSwiGLUMLP (default shards:
    ceil(seq / hidden)), with the same weights."""
    if variant == "liger_tiled":
        from liger_kernel.transformers import LigerTiledSwiGLUMLP
    else:
        from liger_cpp.transformers import LigerTiledSwiGLUMLP
    for layer in model.model.layers:
        old = layer.mlp
        tiled = LigerTiledSwiGLUMLP(model.config).to(old.down_proj.weight.device)
        tiled.load_state_dict(old.state_dict())
        layer.mlp = tiled


def _train(args, state: dict) -> dict:
    import torch

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    family = getattr(args, "family", "llama")
    _patch(args.variant, family)
    import transformers

    cfg = (
        llama_config(args.model, args.seq)
        if family == "llama"
        else family_config(family, args.model, args.seq)
    )
    cfg_text = cfg.get_text_config()
    auto = (
        transformers.AutoModelForImageTextToText
        if family == "qwen3_vl"
        else transformers.AutoModelForCausalLM
    )
    torch.manual_seed(MODEL_SEED)
    # Initialised in fp32 directly on the device, then cast: the same seed gives the same weights in
    # every variant (the patched modules draw the same random numbers in the same order). Not on the
    # CPU then moved: CPU random init runs at ~100 M numbers/s (uniform_ is serial), and nn.Linear's
    # init plus HF's re-init draw 16 G numbers for 8B: minutes per variant.
    with torch.device(device):
        model = transformers.LlamaForCausalLM(cfg) if family == "llama" else auto.from_config(cfg)
    if args.variant.endswith("_tiled"):
        _tile_mlps(model, args.variant)
    model = model.to(dtype)
    if cuda:
        torch.cuda.empty_cache()  # return the fp32 copy's blocks before the run
    if args.grad_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=cuda)
    step_fn = torch.compile(model) if args.variant == "compile" else model
    total = args.warmup + args.steps
    gen = torch.Generator().manual_seed(DATA_SEED)
    batches = [
        torch.randint(0, cfg_text.vocab_size, (args.batch, args.seq), generator=gen).to(device)
        for _ in range(total)
    ]
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    losses, times = state["losses"], []
    state["training"] = True
    for i, ids in enumerate(batches):
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        # labels = input_ids (the model shifts them); only .loss is read: with FLCE no logits exist.
        out = step_fn(input_ids=ids, labels=ids, use_cache=False)
        loss = out.loss
        if i == 0:  # what actually ran (a check that the patch took), recorded in the JSON
            state["logits_returned"] = out.logits is not None
        del out
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        sys.stderr.write(
            f"\r  {args.variant:<10} step {i + 1}/{total}  loss {losses[-1]:.4f}  {times[-1] * 1e3:8.1f} ms"
        )
        sys.stderr.flush()
    sys.stderr.write("\n")
    breakdown = None
    if getattr(args, "breakdown", False) and cuda:
        peak_before = torch.cuda.max_memory_allocated(device)
        ids = batches[-1]

        def one_step():
            loss = step_fn(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        handles = experts_ranges(model)
        try:
            breakdown = profiled_step(one_step, device)
        finally:
            for h in handles:
                h.remove()
    timed = times[args.warmup :] or times
    if cuda:
        peak = peak_before if breakdown is not None else torch.cuda.max_memory_allocated(device)
    else:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return dict(
        device_bytes=torch.cuda.get_device_properties(device).total_memory if cuda else None,
        tokens_per_s=args.batch * args.seq / statistics.median(timed),
        step_ms=[t * 1e3 for t in times],
        peak_bytes=peak,
        losses=losses,
        params=params,
        modules=_modules(model, state["logits_returned"]),
        breakdown=breakdown,
    )


def _modules(model, logits_returned) -> dict:
    """The text model's final norm and first layer's MLP class (whether the patch took)."""
    from liger_cpp.transformers.monkey_patch.instance import _text_model

    text, layers = _text_model(model)
    mlp = getattr(layers[0], "mlp", None)
    return dict(
        norm=type(text.norm).__name__,
        mlp=type(getattr(mlp, "experts", mlp)).__name__,
        logits_returned=logits_returned,
    )


# --------------------------------------------------------------------------------------------
# driver


def _spawn(cmd, env, timeout):
    """The worker process (its progress goes to the inherited stderr); the tests replace this."""
    return subprocess.run(cmd, env=env, timeout=timeout)


def run_variant(variant: str, args, tmp: str) -> dict:
    out = os.path.join(tmp, f"{variant}.json")
    cmd = [sys.executable, os.path.abspath(__file__), f"--worker={variant}", f"--result={out}"]
    cmd += [
        f"--{k.replace('_', '-')}={getattr(args, k)}"
        for k in ("model", "family", "batch", "seq", "dtype", "device", "steps", "warmup", "lr")
    ]
    cmd += ["--grad-checkpointing"] if args.grad_checkpointing else []
    cmd += ["--breakdown"] if args.breakdown else []
    t0 = time.perf_counter()
    try:
        proc = _spawn(cmd, env=os.environ.copy(), timeout=args.timeout)  # inherits PYTHONPATH
    except subprocess.TimeoutExpired:
        return dict(error=f"timed out after {args.timeout} s")
    if proc.returncode != 0 or not os.path.exists(out):
        return dict(error=f"worker failed (exit {proc.returncode}, see its output above)")
    res = json.loads(open(out).read())
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def make_rows(results: dict) -> list:
    ref = results.get("liger", {})
    hf = results.get("hf", {})
    rows = []
    for v, r in results.items():
        row = dict(variant=v)
        if "error" in r:
            row["error"] = r["error"]
        losses = r.get("losses") or []
        if "tokens_per_s" in r:
            row["tok/s"] = f"{r['tokens_per_s']:,.0f}"
        if r.get("peak_bytes") is not None:
            row["peak GiB"] = f"{r['peak_bytes'] / 2**30:.2f}"
        if losses and "error" not in r:
            row["final loss"] = f"{losses[-1]:.4f}"
        if losses and hf.get("losses"):
            row["step-1 loss diff vs hf"] = f"{abs(losses[0] - hf['losses'][0]):.2e}"
        if "error" not in r and "tokens_per_s" in ref and "error" not in ref:
            row["tok/s vs liger"] = f"{r['tokens_per_s'] / ref['tokens_per_s']:.3f}"
            row["mem vs liger"] = f"{r['peak_bytes'] / ref['peak_bytes']:.3f}"
        rows.append(row)
    return rows


def breakdown_rows(results: dict, warmup: int) -> list:
    """One row per profiled variant: its median step, the profiled step's wall and GPU-busy time, the
    kernel time per category and 'floor' = GEMM + attention time (kernels every stack shares); 'liger
    / floor' is the most tok/s any stack could gain on Liger at this shape if it removed everything
    else (the model's GEMMs and attention at the same cuBLAS / SDPA speed)."""
    ref = results.get("liger", {})

    def median_step(r):  # the timed steps', as tokens_per_s
        return statistics.median(r["step_ms"][warmup:] or r["step_ms"])

    ref_ms = median_step(ref) if ref.get("step_ms") and "error" not in ref else None
    rows = []
    for v, r in results.items():
        b = r.get("breakdown")
        if not b or "error" in r:
            continue
        c = b["by_category_ms"]
        floor = c.get("gemm", 0.0) + c.get("attention", 0.0)
        row = dict(variant=v, step=f"{median_step(r):.1f}")
        row["profiled"] = f"{b['wall_ms']:.1f}"
        row["gpu busy"] = f"{b['gpu_busy_ms']:.1f}"
        for k in ("gemm", "attention", "own", "optimizer", "other"):
            row[k] = f"{c.get(k, 0.0):.1f}"
        row["floor"] = f"{floor:.1f}"
        row["liger / floor"] = f"{ref_ms / floor:.3f}" if ref_ms and floor else "-"
        ex = b.get("experts_ms") or {}
        if ex.get("ranges"):
            experts = ex["fwd"] + ex["bwd"]
            row["experts"] = f"{experts:.1f} ({experts / b['gpu_busy_ms'] * 100:.0f} %)"
        rows.append(row)
    return rows


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=list(PRESETS), default="1b-b8t2048")
    p.add_argument("--family", choices=FAMILY_NAMES, default="llama", help="architecture (default llama)")
    p.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help="comma-separated subset of " + ",".join(VARIANTS),
    )
    p.add_argument("--steps", type=int, default=None, help="timed steps after the warm-up (default 10)")
    p.add_argument(
        "--warmup", type=int, default=None, help="untimed steps first, compile included (default 3)"
    )
    p.add_argument("--batch", type=int, default=None, help="override the preset's batch")
    p.add_argument("--seq", type=int, default=None, help="override the preset's sequence length")
    p.add_argument("--device", default=None, help="default: cuda (cpu for the tiny and host16 presets)")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None, help="override the preset's")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--timeout", type=float, default=600, help="seconds per variant subprocess")
    p.add_argument("--out", default="", help="write rows + meta as JSON")
    p.add_argument("--quick", action="store_true", help="warm-up 2 + timed 5 steps (unless given)")
    p.add_argument(
        "--breakdown", action="store_true", help="profile one more step: GPU time by kernel category (CUDA)"
    )
    # worker mode (internal)
    p.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument(
        "--model",
        choices=sorted({*MODELS, *(m for f in FAMILIES.values() for m in f)}),
        help=argparse.SUPPRESS,
    )
    p.add_argument("--grad-checkpointing", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        args.variant = args.worker
        return args
    args.steps = args.steps if args.steps is not None else (5 if args.quick else 10)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.quick else 3)
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    preset = PRESETS[args.preset]
    args.model = preset["model"]
    args.batch = args.batch or preset["batch"]
    args.seq = args.seq or preset["seq"]
    args.dtype = args.dtype or preset["dtype"]
    args.grad_checkpointing = preset["grad_checkpointing"]
    args.device = args.device or ("cpu" if args.model in ("tiny", "host16") else "cuda")
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad:
        p.error(f"unknown variants {bad}; choose from {list(VARIANTS)}")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.worker:
        with open(args.result, "w") as f:
            json.dump(worker(args), f)
        return 0
    import harness

    meta = harness.meta(args.device)
    gc = ", grad checkpointing" if args.grad_checkpointing else ""
    title = (
        f"End-to-end training ({'Llama' if args.family == 'llama' else args.family} {args.model}, "
        f"B{args.batch} T{args.seq}, {args.dtype}{gc}) on "
        f"{meta['gpu']}, commit {meta['commit']}"
    )
    # Lower-case start: scripts/gpu_check.sh prints each log from its first "Capital ... on " line.
    print(
        f"bench_e2e: {title[0].lower()}{title[1:]}; warm-up {args.warmup} + timed {args.steps} steps per "
        f"variant; variants {args.variants}",
        flush=True,
    )
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for v in args.variants:
            results[v] = run_variant(v, args, tmp)
            r = results[v]
            state = r.get("error") or f"{r['tokens_per_s']:,.0f} tok/s, {r['peak_bytes'] / 2**30:.2f} GiB"
            print(f"  {v}: {state} ({r.get('wall_s', '-')} s)", flush=True)
    rows = make_rows(results)
    cols = [
        "variant",
        "tok/s",
        "peak GiB",
        "final loss",
        "step-1 loss diff vs hf",
        "tok/s vs liger",
        "mem vs liger",
    ]
    if any("error" in r for r in rows):
        cols.append("error")
    notes = []
    if "hf" in results and "liger_cpp" in results:
        a, b = results["hf"].get("losses"), results["liger_cpp"].get("losses")
        if a and b:
            notes.append(
                f"First-step loss: hf {a[0]:.6f}, liger_cpp {b[0]:.6f}, max abs diff {abs(a[0] - b[0]):.3e}"
            )
    if "liger" in args.variants and "tokens_per_s" not in results.get("liger", {}):
        notes.append("Liger-Kernel row missing or failed: the 'vs liger' ratios are empty.")
    if args.device == "cpu":
        notes.append("CPU: peak memory is the worker process's peak RSS.")
    if args.out:
        harness.write_json(
            args.out,
            dict(
                meta=meta,
                title=title,
                config=dict(
                    preset=args.preset,
                    model=args.model,
                    batch=args.batch,
                    seq=args.seq,
                    dtype=args.dtype,
                    grad_checkpointing=args.grad_checkpointing,
                    steps=args.steps,
                    warmup=args.warmup,
                    family=args.family,
                    **(MODELS[args.model] if args.family == "llama" else FAMILIES[args.family][args.model]),
                ),
                results=results,
                rows=rows,
            ),
        )
    print()
    for n in notes:
        print(n)
    brows = breakdown_rows(results, args.warmup)
    if brows:
        print(f"GPU time of one profiled step by kernel category, ms ({title})")
        print(harness.fmt_table(brows, list(brows[0])))
        for r in brows:
            print(f"  {r['variant']} top kernels outside GEMM/attention/optimizer:")
            for k in results[r["variant"]]["breakdown"]["top_kernels"][:8]:
                print(f"    {k['ms']:8.3f} ms  {k['category']:<5} {k['name']}")
        for r in brows:
            h = results[r["variant"]]["breakdown"].get("host")
            if not h:
                continue
            cats = ", ".join(
                f"{k} {v:.1f}" for k, v in sorted(h["by_category_ms"].items(), key=lambda kv: -kv[1])
            )
            threads = " + ".join(f"{v:.1f}" for v in h["by_thread_ms"][:3])
            print(
                f"  {r['variant']} host: {h['kernel_launches']} launches; self time ms by category: {cats};"
            )
            print(f"    by thread {threads}; caller's thread untraced (Python) {h['untraced_ms']:.1f}")
            for o in h["top_ops"][:8]:
                print(f"    {o['ms']:8.3f} ms  {o['name']}")
    print(title)
    print(harness.fmt_table(rows, cols))
    return 0 if all("error" not in r or r.get("skipped") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
