"""A whole training step in a CUDA graph (issue 29, item 2): eager against captured, same losses.

    python benchmarks/captured_step.py --out captured_step.json               # "1b" Llama, 16 layers
    python benchmarks/captured_step.py --layers 2 --batch 2 --seq 256 --steps 5  # quick
    python benchmarks/captured_step.py --device cpu --size tiny --steps 2      # the eager part only

Two cases, each trained twice from the same initialisation on the same batches:

* ``lm``: the patched Llama (``apply_liger_kernel_to_llama()``: RoPE, RMSNorm, SwiGLU and the fused
  linear cross entropy as the loss) - forward, FLCE loss, backward and fused AdamW
  (``capturable=True``);
* ``dpo``: a small patched Llama's hidden states for chosen-over-rejected pairs (and a frozen
  reference copy's) into ``liger_cpp.chunked_loss.LigerFusedLinearDPOLoss``, backward, fused AdamW.

Run 1 is eager, with ``torch.cuda.set_sync_debug_mode("error")`` on for every step, so a host
synchronisation anywhere in the step raises (and is reported, with the call stack, instead of
ending the script). One step runs before it (forward and backward only, no update) under "warn",
counting the synchronisations of first calls (liger_cpp's patched forward checks Hugging Face's
logit transform once, with one device-to-host read, by design). Run 2 captures the step in a
CUDA graph as PyTorch documents it (warm-up on a side stream, static input tensors, gradients set
to None before capture), restores the initial weights and optimizer state in place, and replays
the graph once per batch. The losses of the two runs and the final weights are compared; with
deterministic kernels (the default ``--attn eager``: SDPA's flash / memory-efficient backwards
accumulate with atomics) they must be bitwise equal, and the JSON says whether they were.

Every step gets a prepared 4-D causal mask (see causal_mask: without one, transformers' mask
preparation synchronises with the host each step). Nothing here is timed. Exit status 0 only
when every case captured and matched (bitwise with ``--attn eager``).
"""

import argparse
import json
import os
import sys
import traceback
import warnings

# cuBLAS's reproducible workspace configuration, before torch initialises CUDA.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

SMALL_DPO = dict(
    hidden_size=512,
    intermediate_size=1408,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=4,
    vocab_size=32000,
)


def build_llama(shape: dict, seq: int, attn: str, device, dtype, seed: int = 0):
    """A patched LlamaForCausalLM (apply_liger_kernel_to_llama at class level first) of `shape`."""
    from transformers import LlamaForCausalLM

    from liger_cpp.demo import build_llama_config
    from liger_cpp.transformers import apply_liger_kernel_to_llama

    apply_liger_kernel_to_llama()
    cfg = build_llama_config(shape, seq, use_cache=False)
    cfg._attn_implementation = attn
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    model.train()
    return model


def make_optimizer(params, device):
    cuda = torch.device(device).type == "cuda"
    # capturable: the step count and bias corrections stay on the device (graph-safe)
    return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=cuda, capturable=cuda)


def make_batches(n: int, batch: int, seq: int, vocab: int, device, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (batch, seq), generator=gen).to(device) for _ in range(n)]


# --------------------------------------------------------------------------------------------
# the two steps: each returns the loss (detached), after forward, backward and the optimizer step


def causal_mask(seq: int, device, dtype):
    """(1, 1, T, T) additive causal mask. Given a 4-D mask, transformers uses it as it is; without
    one its mask preparation reads a device value every step (masking_utils'
    find_packed_sequence_indices, skipped only while a stream is capturing), a host
    synchronisation of Hugging Face's that a static training loop avoids this way."""
    m = torch.full((seq, seq), float("-inf"), device=device).triu(1)
    return m.to(dtype).view(1, 1, seq, seq)


def lm_step(model, opt, ids, mask):
    loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss  # the patched forward: FLCE
    loss.backward()
    opt.step()
    return loss.detach()


def dpo_targets(ids, prompt: int):
    """Next-token targets of (2B, T) chosen-over-rejected ids, the first `prompt` positions and
    the last one ignored (as TRL masks the prompt)."""
    t = torch.full_like(ids, -100)
    t[:, prompt:-1] = ids[:, prompt + 1 :]
    return t


def make_dpo_step(ref, loss_fn):
    def step(model, opt, ids, target, mask):
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        with torch.no_grad():
            ref_hidden = ref.model(input_ids=ids, attention_mask=mask).last_hidden_state
        loss, _metrics = loss_fn(model.lm_head.weight, hidden, target, None, ref_hidden, ref.lm_head.weight)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


# --------------------------------------------------------------------------------------------
# eager and captured runs


def _sync_debug(mode: str) -> None:
    if torch.cuda.is_available():
        torch.cuda.set_sync_debug_mode(mode)


def _sync_site(stack) -> str:
    """Where a synchronising call came from: the innermost frame outside torch (and this hook)."""
    for fr in reversed(stack):
        f = fr.filename.replace("\\", "/")
        if "/torch/" in f or f.endswith("/warnings.py") or fr.name == "hook":
            continue
        for pkg in ("liger_cpp", "transformers"):
            if f"/{pkg}/" in f:
                return f"{pkg}: {f.split(f'/{pkg}/', 1)[1]}:{fr.lineno} ({fr.name})"
        return f"{os.path.basename(f)}:{fr.lineno} ({fr.name})"
    return "?"


def prime(model, step_inputs, forward_loss) -> dict:
    """One forward + backward (no update) under sync debug "warn": the synchronisations of first
    calls (one-time checks, caches) with the call site of each; gradients dropped afterwards."""
    sites = []

    def hook(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" in str(message).lower():
            sites.append(_sync_site(traceback.extract_stack()))

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = hook
        _sync_debug("warn")
        try:
            forward_loss(*step_inputs).backward()
        finally:
            _sync_debug("default")
    model.zero_grad(set_to_none=True)
    return dict(first_call_syncs=len(sites), first_call_sync_sites=sorted(set(sites)))


def eager_run(model, opt, step, inputs, sync_debug: str) -> dict:
    """The steps eagerly under sync debug mode `sync_debug`; with "error" a host synchronisation
    raises _SyncFound (its step and stack)."""
    losses = []
    for i, args in enumerate(inputs):
        _sync_debug(sync_debug)
        try:
            losses.append(step(model, opt, *args))
        except RuntimeError as e:
            if sync_debug == "error" and "synchroniz" in str(e).lower():
                raise _SyncFound(dict(step=i, message=str(e), stack=traceback.format_exc()[-4000:])) from e
            raise
        finally:
            _sync_debug("default")
        opt.zero_grad(set_to_none=True)
    return dict(losses=torch.stack(losses).float().cpu())


class _SyncFound(Exception):
    def __init__(self, info):
        super().__init__(info["message"])
        self.info = info


def snapshot(model) -> list:
    return [p.detach().clone() for p in model.parameters()]


def restore(model, opt, params) -> None:
    """Initial weights and a fresh optimizer state, written in place (the graph holds these tensors)."""
    with torch.no_grad():
        for p, p0 in zip(model.parameters(), params):
            p.copy_(p0)
        for state in opt.state.values():
            for v in state.values():
                if torch.is_tensor(v):
                    v.zero_()


def captured_run(model, opt, step, inputs, warmup: int = 3) -> dict:
    """Capture `step` once on static copies of the first inputs, then replay it per input."""
    static = [t.clone() for t in inputs[0]]
    params0 = snapshot(model)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            opt.zero_grad(set_to_none=True)
            step(model, opt, *static)
    torch.cuda.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=True)  # the backward in the graph allocates the gradients (static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = step(model, opt, *static)
    restore(model, opt, params0)  # the warm-up updated both
    losses = []
    for args in inputs:
        for s, a in zip(static, args):
            s.copy_(a)
        graph.replay()
        losses.append(static_loss.clone())
    torch.cuda.synchronize()
    return dict(losses=torch.stack(losses).float().cpu(), graph=graph)


def compare(eager, captured, model_e, model_c) -> dict:
    d = (eager - captured).abs()
    pmax = 0.0
    pbitwise = True
    for a, b in zip(model_e, model_c):
        pmax = max(pmax, (a.float() - b.float()).abs().max().item())
        pbitwise = pbitwise and torch.equal(a, b)
    return dict(
        loss_max_abs_diff=d.max().item(),
        losses_bitwise_equal=bool(torch.equal(eager, captured)),
        steps_bitwise_equal=int((d == 0).sum().item()),
        final_weights_max_abs_diff=pmax,
        final_weights_bitwise_equal=pbitwise,
    )


def run_case(name, model, step, inputs, forward_loss, args, device) -> dict:
    out = dict(case=name, steps=len(inputs))
    params0 = snapshot(model)
    opt = make_optimizer(model.parameters(), device)
    out.update(prime(model, inputs[0], forward_loss))
    try:
        e = eager_run(model, opt, step, inputs, args.sync_debug if device.type == "cuda" else "default")
    except _SyncFound as s:
        out["host_sync"] = s.info
        # the reference without the sync check, from the start
        opt.zero_grad(set_to_none=True)
        restore(model, opt, params0)
        e = eager_run(model, opt, step, inputs, "default")
    out["eager_losses"] = e["losses"].tolist()
    out["eager_finite"] = bool(torch.isfinite(e["losses"]).all())
    out.setdefault("host_sync", None)
    if device.type != "cuda":
        return out
    eager_final = snapshot(model)
    restore(model, opt, params0)
    model.zero_grad(set_to_none=True)
    opt = make_optimizer(model.parameters(), device)  # a fresh one: its state is created in the warm-up
    try:
        c = captured_run(model, opt, step, inputs)
    except Exception as ex:  # noqa: BLE001 - the report names what broke the capture
        out["capture_error"] = dict(message=str(ex)[:2000], stack=traceback.format_exc()[-6000:])
        return out
    out["captured_losses"] = c["losses"].tolist()
    out.update(compare(e["losses"], c["losses"], eager_final, snapshot(model)))
    del c
    return out


def lm_case(args, device, dtype) -> dict:
    from liger_cpp.demo import SIZES

    shape = dict(SIZES[args.size])
    if args.layers:
        shape["num_hidden_layers"] = args.layers
    model = build_llama(shape, args.seq, args.attn, device, dtype)
    vocab = model.config.vocab_size
    mask = causal_mask(args.seq, device, dtype)
    batches = [(b, mask) for b in make_batches(args.steps, args.batch, args.seq, vocab, device, seed=1)]

    def forward_loss(ids, mask):
        return model(input_ids=ids, attention_mask=mask, labels=ids).loss

    out = run_case("lm", model, lm_step, batches, forward_loss, args, device)
    out["model"] = dict(shape, params=sum(p.numel() for p in model.parameters()))
    return out


def dpo_case(args, device, dtype) -> dict:
    from liger_cpp.chunked_loss import LigerFusedLinearDPOLoss

    shape = SMALL_DPO if args.size != "tiny" else dict(SIZES_TINY)
    seq = min(args.seq, 256)
    model = build_llama(shape, seq, args.attn, device, dtype, seed=0)
    ref = build_llama(shape, seq, args.attn, device, dtype, seed=0)
    ref.requires_grad_(False)
    loss_fn = LigerFusedLinearDPOLoss(beta=0.1, compute_nll_loss=True, chunk_size=1)
    vocab = model.config.vocab_size
    pairs = max(1, args.batch)
    mask = causal_mask(seq, device, dtype)
    ids_list = make_batches(args.steps, 2 * pairs, seq, vocab, device, seed=2)
    batches = [(ids, dpo_targets(ids, seq // 4), mask) for ids in ids_list]
    step = make_dpo_step(ref, loss_fn)

    def forward_loss(ids, target, mask):
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        with torch.no_grad():
            ref_hidden = ref.model(input_ids=ids, attention_mask=mask).last_hidden_state
        return loss_fn(model.lm_head.weight, hidden, target, None, ref_hidden, ref.lm_head.weight)[0]

    out = run_case("dpo", model, step, batches, forward_loss, args, device)
    out["model"] = dict(shape, pairs=pairs, seq=seq)
    return out


SIZES_TINY = dict(
    hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)


def verdict(case: dict, deterministic: bool) -> tuple[bool, str]:
    if not case.get("eager_finite", False):
        return False, "non-finite eager losses"
    if case.get("host_sync"):
        return False, f"host synchronisation in eager step {case['host_sync']['step']}"
    if "capture_error" in case:
        return False, "capture failed: " + case["capture_error"]["message"].splitlines()[0][:200]
    if "captured_losses" not in case:
        return True, "eager only (no CUDA)"
    if deterministic and not (case["losses_bitwise_equal"] and case["final_weights_bitwise_equal"]):
        return False, f"not bitwise equal (max loss diff {case['loss_max_abs_diff']:.3g})"
    return True, (
        f"bitwise equal: {case['losses_bitwise_equal']}, max loss diff {case['loss_max_abs_diff']:.3g}, "
        f"max weight diff {case['final_weights_max_abs_diff']:.3g}"
    )


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--size", default="1b", choices=["tiny", "small", "1b"])
    p.add_argument("--layers", type=int, default=0, help="decoder layers (0: the size's own)")
    p.add_argument("--batch", type=int, default=2, help="sequences per step (pairs for DPO)")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--attn", default="eager", help="eager (deterministic backward) or sdpa")
    p.add_argument("--dtype", default=None, choices=["bf16", "fp32"], help="default: bf16 CUDA, fp32 CPU")
    p.add_argument("--sync-debug", default="error", choices=["error", "warn", "default"])
    p.add_argument("--cases", default="lm,dpo")
    p.add_argument("--out", default="", help="JSON results file")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype or ("bf16" if cuda else "fp32")]
    deterministic = args.attn == "eager"
    if device.type == "cuda":
        torch.use_deterministic_algorithms(True, warn_only=True)
    results = dict(args=vars(args), device=torch.cuda.get_device_name(device) if cuda else "CPU")
    ok = True
    with warnings.catch_warnings(record=True) as nondet:
        warnings.simplefilter("always")
        for name in args.cases.split(","):
            case = {"lm": lm_case, "dpo": dpo_case}[name](args, device, dtype)
            passed, why = verdict(case, deterministic)
            case["passed"], case["verdict"] = passed, why
            ok = ok and passed
            results[name] = case
            print(f"{name:>4}: {'PASS' if passed else 'FAIL'}  {why}")
            if case.get("first_call_syncs"):
                sites = "; ".join(case["first_call_sync_sites"])
                n = case["first_call_syncs"]
                print(f"      first-call synchronisations (priming step): {n} at {sites}")
            if case.get("host_sync"):
                print("      " + case["host_sync"]["stack"][-1500:].replace("\n", "\n      "))
            if case.get("capture_error"):
                print("      " + case["capture_error"]["stack"][-3000:].replace("\n", "\n      "))
            if device.type == "cuda":
                torch.cuda.empty_cache()
    results["nondeterministic_op_warnings"] = sorted(
        {str(w.message)[:300] for w in nondet if "deterministic" in str(w.message).lower()}
    )
    for m in results["nondeterministic_op_warnings"]:
        print("  nondeterministic:", m)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
