"""Per-token log-probabilities (and entropy) of given tokens from hidden states, without the logits:
fake kernels of torch.ops.liger.fused_linear_logprobs_fwd / _bwd, `fused_linear_token_logprobs`,
and Liger's LigerFusedLinearScaledCrossEntropyFunction (per-token NLL at a temperature).

What RL frameworks compute for the old and reference log-probs (TRL's selective_log_softmax on
logits): logprobs = log_softmax((x @ W^T + b) / temperature)[y], float32, 0 where y is ignore_index;
entropy of the same distribution. Both are differentiable: the C++ autograd
(csrc/aten/autograd/fused_linear_logprobs_autograd.cpp) reruns the chunk loop in the backward with
both upstream gradients folded into the dlogits.
"""

from typing import Optional, Union

import torch
from torch import Tensor

from liger_cpp.ops._common import acc_dtype, check_device, head_grads_fake


@torch.library.register_fake("liger::fused_linear_logprobs_fwd")
def _fwd_fake(
    input, weight, target, bias=None, temperature=1.0, ignore_index=-100, return_entropy=False, chunk_rows=0
):
    torch._check(
        weight.dim() == 2 and weight.shape[1] == input.shape[-1],
        lambda: "liger_cpp: argument 'weight': expected shape (V, H)",
    )
    torch._check(
        target.numel() * input.shape[-1] == input.numel(),
        lambda: "liger_cpp: argument 'target': expected one element per row of input",
    )
    f32 = torch.float32
    logp = input.new_empty(target.shape, dtype=f32)
    entropy = input.new_empty(target.shape if return_entropy else (0,), dtype=f32)
    stats = input.new_empty((target.numel(), 2) if return_entropy else (0,), dtype=f32)
    return logp, entropy, stats


@torch.library.register_fake("liger::fused_linear_logprobs_bwd")
def _bwd_fake(
    grad_logprobs,
    grad_entropy,
    input,
    weight,
    target,
    bias,
    stats,
    entropy,
    temperature=1.0,
    ignore_index=-100,
    chunk_rows=0,
    compute_dx=True,
    compute_dw=True,
    compute_db=True,
):
    return head_grads_fake(input, weight, bias, compute_dx, compute_dw, compute_db)


def fused_linear_token_logprobs(
    input: Tensor,
    weight: Tensor,
    target: Tensor,
    bias: Optional[Tensor] = None,
    temperature: float = 1.0,
    ignore_index: int = -100,
    return_entropy: bool = False,
    chunk_rows: int = 0,
) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """log_softmax((input @ weight.T + bias) / temperature) at `target`, float32 in target's shape
    (input (..., H), target one token id per row; 0 where target is ignore_index), and with
    return_entropy the entropy of each row's distribution (float32, same shape). Differentiable
    w.r.t. input, weight and bias; the (rows x V) logits never exist at once."""
    check_device(input, "input")
    if temperature <= 0:
        raise ValueError(f"liger_cpp: argument 'temperature': expected a positive value, got {temperature}")
    logp, entropy, _ = torch.ops.liger.fused_linear_logprobs_fwd(
        input,
        weight,
        target,
        bias,
        float(temperature),
        int(ignore_index),
        bool(return_entropy),
        int(chunk_rows),
    )
    return (logp, entropy) if return_entropy else logp


def _check_selected_token_ids(ids, weight):
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64 or ids.dim() != 1:
        got = f"{ids.dtype} tensor of {ids.dim()} dimensions" if isinstance(ids, torch.Tensor) else type(ids)
        raise TypeError(f"liger_cpp: argument 'selected_token_ids': expected a 1-D int64 tensor, got {got}")
    if ids.device != weight.device:
        raise ValueError(
            f"liger_cpp: argument 'selected_token_ids': expected weight's device {weight.device}, "
            f"got {ids.device}"
        )
    # One read on the host, as Liger's check does: an id out of range would index out of bounds.
    if ids.numel() and bool(((ids < 0) | (ids >= weight.shape[0])).any()):
        raise ValueError(f"liger_cpp: argument 'selected_token_ids': expected ids in [0, {weight.shape[0]})")


class LigerFusedLinearScaledCrossEntropyFunction:
    """Liger's per-token operator: ``apply(_input, weight, target, temperature=1.0, ignore_index=-100,
    m_tiles_per_cluster=1, return_entropy=False, selected_token_ids=None)``: the float32 NLL [M] of
    the logits divided by the temperature (0 for ignored rows); with return_entropy also the entropy
    [M] in the input's dtype; with int64 ``selected_token_ids`` [K] also the float32 log-probabilities
    [M, K] of those vocabulary ids (0 in ignored rows, order and repeats kept). One tensor when only
    the NLL is asked for, else the tuple in that order (Liger 0.8.5's contract); all differentiable.
    m_tiles_per_cluster (a CuTe tiling knob) is checked as Liger checks it and otherwise unused.

    The selected ids' log-probabilities are z_k / T - lse, with each row's lse recovered from the
    fused op's own outputs (lse = z_target / T - logp_target), so no (M x V) logits exist and the
    gradient of lse reaches the full vocabulary through the fused backward."""

    @staticmethod
    def apply(
        _input,
        weight,
        target,
        temperature=1.0,
        ignore_index=-100,
        m_tiles_per_cluster=1,
        return_entropy=False,
        selected_token_ids=None,
    ):
        if not isinstance(m_tiles_per_cluster, int) or isinstance(m_tiles_per_cluster, bool):
            raise TypeError(
                f"liger_cpp: argument 'm_tiles_per_cluster': expected an int, got {type(m_tiles_per_cluster)}"
            )
        if m_tiles_per_cluster < 1:
            raise ValueError(
                f"liger_cpp: argument 'm_tiles_per_cluster': expected >= 1, got {m_tiles_per_cluster}"
            )
        if not isinstance(return_entropy, bool):
            raise TypeError(
                f"liger_cpp: argument 'return_entropy': expected a bool, got {type(return_entropy)}"
            )
        if selected_token_ids is not None:
            _check_selected_token_ids(selected_token_ids, weight)
        out = fused_linear_token_logprobs(
            _input, weight, target, None, temperature, ignore_index, return_entropy=return_entropy
        )
        logp, entropy = out if return_entropy else (out, None)
        outputs = (-logp,) if entropy is None else (-logp, entropy.to(_input.dtype))
        if selected_token_ids is not None:
            outputs += (
                _selected_logprobs(
                    _input, weight, target, logp, temperature, ignore_index, selected_token_ids
                ),
            )
        return outputs[0] if len(outputs) == 1 else outputs


def _selected_logprobs(x, weight, target, logp, temperature, ignore_index, ids):
    """log_softmax(x @ weight.T / T)[:, ids] from the target's log-prob: z_k / T - (z_t / T - logp_t),
    float32 (float64 for float64 inputs), 0 in ignored rows. z_t and z_k are GEMMs in the input's
    dtype, as the lm_head GEMM gives the fused op its logits (float32 accumulation, rounded to that
    dtype), so lse agrees with the one the op used. Kept for the backward: the target rows of the
    weight, [M, H] in its dtype (64 MiB at 8192 x 4096 bf16)."""
    acc = acc_dtype(x)
    x2 = x.reshape(-1, x.shape[-1])
    t = target.reshape(-1)
    valid = t != ignore_index
    safe_t = torch.where(valid, t, torch.zeros_like(t))
    z_t = torch.bmm(x2.unsqueeze(1), weight.index_select(0, safe_t).unsqueeze(2)).reshape(-1).to(acc)
    lse = z_t / temperature - logp.reshape(-1).to(acc)
    z_ids = (x2 @ weight.index_select(0, ids).T).to(acc)
    selected = (z_ids / temperature - lse[:, None]).masked_fill(~valid[:, None], 0.0)
    return selected.reshape(*target.shape, ids.numel())


@torch.library.register_fake("liger::fused_linear_logprobs_shard_fwd")
def _shard_fwd_fake(input, weight, target, vocab_start, temperature=1.0, ignore_index=-100, chunk_rows=0):
    logp, _, _ = _fwd_fake(input, weight, target, None, temperature, ignore_index, False, chunk_rows)
    return logp, torch.empty_like(logp), torch.empty_like(logp)


@torch.library.register_fake("liger::fused_linear_logprobs_shard_bwd")
def _shard_bwd_fake(
    grad_logprobs,
    grad_entropy,
    input,
    weight,
    target,
    lse,
    entropy,
    vocab_start,
    temperature=1.0,
    ignore_index=-100,
    chunk_rows=0,
    compute_dx=True,
    compute_dw=True,
):
    dx, dw, _ = head_grads_fake(input, weight, None, compute_dx, compute_dw, False)
    return dx, dw


class _ShardedTokenLogprobs(torch.autograd.Function):
    """NLL and entropy of the tokens from a vocabulary-sharded lm_head (tensor parallel). Each rank's
    C++ op gives the three float32 values a row that the ranks exchange in one all_gather (the
    shard's lse, its softmax mean of z, the target's logit on its owner); they combine into the lse
    over the whole vocabulary, the NLL and the entropy. The backward reruns the rank's chunk loop with
    the combined lse and entropy and sums dX over the group (dW stays the rank's shard)."""

    @staticmethod
    def forward(ctx, x, weight, target, group, temperature, ignore_index, return_entropy):
        import torch.distributed as dist

        world = dist.get_world_size(group)
        start = dist.get_rank(group) * weight.shape[0]
        z_y, lse_r, mean_r = torch.ops.liger.fused_linear_logprobs_shard_fwd(
            x, weight, target, start, float(temperature), int(ignore_index)
        )
        ctx.set_materialize_grads(False)
        mine = torch.stack([lse_r, mean_r, z_y])
        if world > 1:
            parts = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(parts, mine.contiguous(), group=group)
            every = torch.stack(parts)  # [world, 3, M]
        else:
            every = mine.unsqueeze(0)
        lse = torch.logsumexp(every[:, 0], dim=0)
        share = torch.exp(every[:, 0] - lse)  # each shard's part of the probability mass
        entropy = lse - (share * every[:, 1]).sum(0)
        valid = target != ignore_index
        zero = torch.zeros_like(lse)
        nll = torch.where(valid, lse - every[:, 2].sum(0), zero)
        entropy = torch.where(valid, entropy, zero)
        ctx.save_for_backward(x, weight, target, lse, entropy)
        ctx.group, ctx.start, ctx.world = group, start, world
        ctx.temperature, ctx.ignore_index = float(temperature), int(ignore_index)
        return nll, entropy

    @staticmethod
    def backward(ctx, grad_nll, grad_entropy):
        import torch.distributed as dist

        x, weight, target, lse, entropy = ctx.saved_tensors
        dx, dw = torch.ops.liger.fused_linear_logprobs_shard_bwd(
            None if grad_nll is None else -grad_nll,
            grad_entropy,
            x,
            weight,
            target,
            lse,
            entropy,
            ctx.start,
            ctx.temperature,
            ctx.ignore_index,
            0,
            ctx.needs_input_grad[0],
            ctx.needs_input_grad[1],
        )
        if ctx.needs_input_grad[0] and ctx.world > 1:
            dist.all_reduce(dx, group=ctx.group)
        return (
            dx if ctx.needs_input_grad[0] else None,
            dw if ctx.needs_input_grad[1] else None,
            None,
            None,
            None,
            None,
            None,
        )


class LigerFusedLinearScaledCrossEntropyTPFunction:
    """Liger's tensor-parallel per-token operator: ``apply(_input, weight, target, tp_group,
    temperature=1.0, ignore_index=-100, tiles_per_reduce=1, return_entropy=False)`` -> nll, or
    (nll, entropy) with return_entropy: float32 [M] over the whole vocabulary, 0 for ignored rows.
    ``weight`` is this rank's equal, contiguous vocabulary shard (rank r holds ids r * V_shard ..),
    ``target`` global ids; input [M, H] is the same on every rank of ``tp_group`` (None: the default
    group). Differentiable: dX summed over the group, dW this rank's shard. tiles_per_reduce (a
    tiling knob of Liger's Hopper kernel) is checked as Liger does and otherwise ignored. Any
    torch.distributed backend (NCCL on CUDA, Gloo on the CPU)."""

    @staticmethod
    def apply(
        _input,
        weight,
        target,
        tp_group,
        temperature=1.0,
        ignore_index=-100,
        tiles_per_reduce=1,
        return_entropy=False,
    ):
        import torch.distributed as dist

        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise TypeError("liger_cpp: argument 'temperature': expected a real number")
        if not temperature > 0 or temperature == float("inf"):
            raise ValueError(
                f"liger_cpp: argument 'temperature': expected a finite value > 0, got {temperature}"
            )
        if isinstance(tiles_per_reduce, bool) or tiles_per_reduce not in (1, 2, 4):
            raise ValueError(
                f"liger_cpp: argument 'tiles_per_reduce': expected 1, 2 or 4, got {tiles_per_reduce!r}"
            )
        if not isinstance(return_entropy, bool):
            raise TypeError("liger_cpp: argument 'return_entropy': expected a bool")
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("liger_cpp: argument 'tp_group': torch.distributed must be initialized")
        if _input.dim() != 2 or weight.dim() != 2 or target.dim() != 1:
            raise ValueError(
                "liger_cpp: expected input [M, H], weight [V_shard, H] and target [M], got "
                f"{tuple(_input.shape)}, {tuple(weight.shape)} and {tuple(target.shape)}"
            )
        if target.dtype != torch.int64:
            raise TypeError(f"liger_cpp: argument 'target': expected int64 token ids, got {target.dtype}")
        check_device(_input, "_input")
        group = tp_group if tp_group is not None else dist.group.WORLD
        nll, entropy = _ShardedTokenLogprobs.apply(
            _input, weight, target, group, temperature, ignore_index, return_entropy
        )
        return (nll, entropy) if return_entropy else nll
