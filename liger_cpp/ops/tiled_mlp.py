"""Tiled (row-sharded) MLP: the MLP runs over shards of the rows and its forward is computed again,
shard by shard, in the backward, so no more than one shard's intermediate activations (gate, up,
the gated product: 3 x intermediate values a row) is ever alive, against the whole sequence's for
a plain MLP. What long-context training (DeepSpeed's ALST, Liger-Kernel's `LigerTiledMLPFunction`)
uses for the MLPs: at 128K tokens and Llama-3-8B's intermediate size 14336 a plain MLP keeps
about 10 GiB of them a layer. The price is a second forward of the MLP (its three GEMMs) in the
backward.

This is the general path, in Python because it calls the user's function on the user's module
(PEFT / LoRA layers, quantised linears, DeepSpeed ZeRO-3's parameter gathering), not a fixed set of
weights. LigerTiledSwiGLUMLP / LigerTiledGEGLUMLP with plain projections take the C++ op
`liger::glu_mlp_tiled` instead (liger_cpp.ops.glu_mlp.glu_mlp_tiled: 8-9 % faster than Liger's
tiled MLP on the H100, where this path is 7-10 % slower; docs/kernels/glu.md).

Gradients, and how they differ from Liger-Kernel's and DeepSpeed's (which call
`torch.autograd.backward` on each shard, so each shard's parameter gradient is rounded to the
parameter's dtype and added to .grad there, out of the caller's graph):
- the parameters are inputs of the autograd node and their gradients its outputs, as for a plain
  MLP: `torch.autograd.grad` reaches them, hooks and DDP / FSDP's reductions run once, and the
  output needs a gradient when only a parameter does (Liger-Kernel's then has no gradient at all:
  a LoRA-adapted MLP after frozen layers trains nothing);
- each shard's parameter gradients are summed in float32 (parameters of lower precision) and
  rounded once.
Parameters of DeepSpeed ZeRO-3 (partitioned between forward and backward) take DeepSpeed's own
recipe instead: each shard's backward accumulates into them, DeepSpeed's reduction held back
(`ds_grad_is_ready`) until the last shard.
"""

import math

import torch
from torch import Tensor, nn


def _grad_params(module: nn.Module, compute_params) -> tuple:
    """(every tensor the recomputation must deliver a gradient to, their names in the module or
    None): the module's parameters that require one, and any others named in compute_params
    (Liger's and DeepSpeed's argument), once each."""
    seen, out, names = set(), [], []
    for name, p in [*module.named_parameters(), *((None, p) for p in compute_params or ())]:
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            out.append(p)
            names.append(name)
    return out, names


def _current(module: nn.Module, name, forward_tensor: Tensor, forward_id: int, was_leaf: bool) -> Tensor:
    """The tensor the module holds under `name` now (what its forward, run again, will use). FSDP
    puts other objects there between forward and backward: FSDP1 (use_orig_params) new views of
    its flat parameter, set as plain attributes; the gradients with respect to those are the
    gradients of the forward's."""
    prefix, _, leaf = name.rpartition(".")
    now = getattr(module.get_submodule(prefix), leaf, None)
    if not isinstance(now, Tensor) or now.shape != forward_tensor.shape:
        raise RuntimeError(
            f"liger_cpp: tiled MLP: the module's parameter {name!r} is no longer a tensor of shape "
            f"{tuple(forward_tensor.shape)} in the backward, which computes the forward again with it"
        )
    if id(now) != forward_id and was_leaf:
        # a leaf swapped for another object: not FSDP's views of one flat parameter, but
        # torch.func.functional_call (its tensors are gone by the backward) or a replaced parameter
        raise RuntimeError(
            f"liger_cpp: tiled MLP: the module's parameter {name!r} changed between the forward and "
            "the backward (torch.func.functional_call or another stateless swap): the backward computes "
            "the forward again with the module's parameters, so the gradients of the forward's cannot be "
            "computed"
        )
    return now


def _foreign_leaves(out: Tensor, known: list) -> list:
    """The leaves that need a gradient, reached by out's graph without passing through a tensor of
    `known`: tensors whose gradients a recomputation inside the backward cannot hand back to the
    caller's graph (e.g. FSDP1's flat parameter with use_orig_params=False, behind views that FSDP
    makes again for the backward)."""
    leaf_ids = {id(t) for t in known if t.grad_fn is None}
    stops = {t.grad_fn for t in known if t.grad_fn is not None}
    seen, todo, found = set(), [out.grad_fn], []
    while todo:
        node = todo.pop()
        if node is None or node in seen or node in stops:
            continue
        seen.add(node)
        var = getattr(node, "variable", None)
        if var is not None and id(var) not in leaf_ids:
            found.append(var)
        todo.extend(nxt for nxt, _ in node.next_functions)
    return found


def _zero3(params) -> bool:
    return any(hasattr(p, "ds_id") for p in params)


class _TiledMLP(torch.autograd.Function):
    """forward(fn, module, x, shards, zero3_params, names, *params): the parameters are inputs, so the
    output needs a gradient whenever one of them does (x may not: a frozen layer before a
    LoRA-adapted MLP), and their gradients are this node's outputs. ZeRO-3's parameters come as the
    list zero3_params instead (DeepSpeed's recipe accumulates them shard by shard)."""

    @staticmethod
    def forward(ctx, fn, module, x, shards, zero3_params, names, *params):
        ctx.fn, ctx.module, ctx.shards, ctx.names = fn, module, shards, names
        # the backward computes the forward again under the forward's autocast (as checkpointing
        # does): the same dtypes, so the gradients are those of the output returned
        dev = x.device.type
        ctx.autocast = (dev, torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        ctx.zero3 = zero3_params is not None
        if ctx.zero3:  # partitioned between forward and backward: held, not saved, not inputs
            ctx.zero3_params = zero3_params
            ctx.save_for_backward(x)
        else:
            ctx.save_for_backward(x, *params)
            # the objects themselves (saved tensors may come back as other Python objects)
            ctx.param_meta = [(id(p), p.grad_fn is None) for p in params]
            # compute_params outside the module: fn reaches them by reference, so the same objects
            ctx.extras = {i: p for i, (n, p) in enumerate(zip(names, params)) if n is None}
        rows = x.reshape(-1, x.shape[-1])
        with torch.no_grad():
            outs = [fn(module, s) for s in rows.chunk(shards, dim=0)] if rows.shape[0] else []
            if not outs:  # no rows: the output's width from one empty call
                outs = [fn(module, rows)]
        y = torch.cat(outs, dim=0)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, *params = ctx.saved_tensors
        fn, module = ctx.fn, ctx.module
        if ctx.zero3:
            params = list(ctx.zero3_params)
        else:  # what the recomputation uses: gradients with respect to these
            params = [
                ctx.extras[i] if n is None else _current(module, n, p, *m)
                for i, (n, p, m) in enumerate(zip(ctx.names, params, ctx.param_meta))
            ]
        need_x = ctx.needs_input_grad[2]
        want = (
            list(range(len(params)))
            if ctx.zero3
            else [i for i in range(len(params)) if ctx.needs_input_grad[6 + i]]
        )
        rows = x.detach().reshape(-1, x.shape[-1])
        dy = dy.reshape(rows.shape[0], dy.shape[-1])
        dx = torch.zeros_like(rows) if need_x else None
        sums = [None] * len(params)
        n = rows.shape[0]
        step = math.ceil(n / ctx.shards) if n else 1
        starts = list(range(0, n, step))
        dev, on, dt = ctx.autocast
        for k, r0 in enumerate(starts):
            xs = rows[r0 : r0 + step].detach().requires_grad_(need_x)
            g = dy[r0 : r0 + step]
            if ctx.zero3:  # DeepSpeed's TiledMLP recipe: its reduction once, after the last shard
                for i in want:
                    params[i].ds_grad_is_ready = k == len(starts) - 1
                with torch.enable_grad(), torch.autocast(dev, dt, enabled=on):
                    out = fn(module, xs)
                torch.autograd.backward(out, g)
                if need_x and xs.grad is not None:
                    dx[r0 : r0 + step] = xs.grad
                continue
            inputs = ([xs] if need_x else []) + [params[i] for i in want]
            with torch.enable_grad(), torch.autocast(dev, dt, enabled=on):
                out = fn(module, xs)
            if k == 0:
                foreign = _foreign_leaves(out, [xs, *params])
                if foreign:
                    raise RuntimeError(
                        "liger_cpp: tiled MLP: the function uses tensors that need gradients besides x and "
                        f"the module's parameters ({len(foreign)}, shapes "
                        f"{[tuple(t.shape) for t in foreign[:3]]}): name them in compute_params. (FSDP1 "
                        "with use_orig_params=False, whose flat parameter the module reaches through views "
                        "made again for the backward, is not supported: use use_orig_params=True or FSDP2.)"
                    )
            grads = torch.autograd.grad(out, inputs, g, allow_unused=True)
            if need_x:
                if grads[0] is not None:
                    dx[r0 : r0 + step] = grads[0]
                grads = grads[1:]
            for i, gp in zip(want, grads):
                if gp is None:
                    continue
                if sums[i] is None:  # low precision summed in float32 over several shards
                    low = gp.dtype in (torch.float16, torch.bfloat16) and len(starts) > 1
                    sums[i] = gp.float() if low else gp
                else:
                    sums[i].add_(gp)
        dx = dx.reshape(x.shape) if need_x else None
        if ctx.zero3:
            return None, None, dx, None, None, None
        return (
            None,
            None,
            dx,
            None,
            None,
            None,
            *[None if s is None else s.to(p.dtype) for p, s in zip(params, sums)],
        )


class TiledMLPFunction:
    """apply(fn, mlp_module, x, shards, compute_params=None): fn(mlp_module, rows) over `shards`
    shards of x's rows (x of shape (..., hidden); every leading dimension is rows), concatenated;
    see this module's docstring. Liger-Kernel's `LigerTiledMLPFunction.apply` signature."""

    @staticmethod
    def apply(fn, mlp_module, x, shards, compute_params=None):
        if not callable(fn):
            raise TypeError(
                f"liger_cpp: argument 'fn': expected a callable fn(module, x), got {type(fn).__name__}"
            )
        if not isinstance(mlp_module, nn.Module):
            raise TypeError(
                f"liger_cpp: argument 'mlp_module': expected an nn.Module, got {type(mlp_module).__name__}"
            )
        if not isinstance(x, Tensor) or x.dim() < 1:
            raise ValueError("liger_cpp: argument 'x': expected a tensor of shape (..., hidden)")
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise ValueError(f"liger_cpp: argument 'shards': expected a positive int, got {shards!r}")
        params, names = _grad_params(mlp_module, compute_params)
        if _zero3(params):
            # not inputs: the engine would run their accumulation (and DeepSpeed's reduction hook)
            # once more after the node, with no gradient; DeepSpeed's own TiledMLP passes none either
            return _TiledMLP.apply(fn, mlp_module, x, shards, params, names)
        return _TiledMLP.apply(fn, mlp_module, x, shards, None, names, *params)


def apply_tiled_mlp(fn, mlp_module, x, num_shards=None, compute_params=None) -> Tensor:
    """fn(mlp_module, x) computed over num_shards shards of x's rows, its forward computed again in
    the backward (see this module's docstring). num_shards None: ceil(seq / hidden), x's
    second-to-last dimension over its last (Liger-Kernel's rule), at least 1. Liger-Kernel's
    `apply_tiled_mlp` signature."""
    if num_shards is None:
        num_shards = default_shards(x)
    return TiledMLPFunction.apply(fn, mlp_module, x, max(1, int(num_shards)), compute_params)


def default_shards(x: Tensor) -> int:
    """Liger-Kernel's shard count: ceil(seq / hidden), x's second-to-last dimension (its only
    leading one for a 1-D x) over its last; at least 1."""
    seq = x.shape[-2] if x.dim() >= 2 else x.shape[0]
    return max(1, math.ceil(seq / x.shape[-1])) if x.shape[-1] else 1


__all__ = ["TiledMLPFunction", "apply_tiled_mlp", "default_shards"]
