"""Vocabulary-parallel cross entropy (Liger's LigerVocabParallelCrossEntropy /
LigerVocabParallelCEFunction, Megatron's layout): each tensor-parallel rank holds the logits of its
slice of the vocabulary, [S, B, V_local], rank r owning global ids [r V_local, (r + 1) V_local);
the per-token loss [S, B] needs three all-reduces of one float a token (the max, the sum of
exponentials, the target's logit) and, with label smoothing averaged over the global vocabulary,
a fourth.

Composed of PyTorch's ops and torch.distributed's collectives, float32 math. Unlike Liger's, it
keeps no float32 copy of the softmax for the backward: it saves the logits it was given (the
caller holds them anyway) and one float32 log-sum-exp a token, and computes the softmax again in
the backward, so the memory between forward and backward is 4 bytes a token instead of 4 V_local.

Label smoothing (alpha), as Liger's:
- formula "pytorch": q = (1 - alpha) onehot + alpha / K (F.cross_entropy's label_smoothing);
  "megatron": q = (1 - alpha) onehot + alpha / (K - 1) off the target, i.e. the same with
  alpha_eff = alpha K / (K - 1);
- mode "global": K = V_global, the uniform term averaged over the whole vocabulary (one more
  all-reduce, the single-rank result exactly); "partition": K = V_local on each rank (Megatron's,
  no all-reduce; the loss then differs per rank).
"""

import torch
import torch.distributed as dist
from torch import nn

FORMULAS = ("pytorch", "megatron")
MODES = ("global", "partition")


def validate_formula_and_mode(label_smoothing_formula: str, label_smoothing_mode: str) -> None:
    if label_smoothing_formula not in FORMULAS:
        raise ValueError(
            f"liger_cpp: argument 'label_smoothing_formula': expected one of {FORMULAS}, "
            f"got {label_smoothing_formula!r}"
        )
    if label_smoothing_mode not in MODES:
        raise ValueError(
            f"liger_cpp: argument 'label_smoothing_mode': expected one of {MODES}, "
            f"got {label_smoothing_mode!r}"
        )


def _check_smoothing(label_smoothing, formula, mode) -> None:
    """The label-smoothing options, as the module's constructor and the Function check them."""
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"liger_cpp: argument 'label_smoothing': expected [0, 1), got {label_smoothing}")
    validate_formula_and_mode(formula, mode)


def _group(tp_group):
    """(group or None, rank, world): None and rank 0 of 1 without a multi-rank group."""
    if (
        tp_group is not None
        and dist.is_available()
        and dist.is_initialized()
        and dist.get_world_size(tp_group) > 1
    ):
        return tp_group, dist.get_rank(tp_group), dist.get_world_size(tp_group)
    return None, 0, 1


def _all_reduce(t, op, group):
    if group is not None:
        dist.all_reduce(t, op=op, group=group)
    return t


class _VocabParallelCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, tp_group, ignore_index, label_smoothing, formula, mode):
        group, rank, world = _group(tp_group)
        s, b, v_local = logits.shape
        x = logits.reshape(s * b, v_local)
        y = target.reshape(-1).to(torch.int64)
        start = rank * v_local
        acc = torch.float64 if logits.dtype == torch.float64 else torch.float32  # float32 at least
        xf = x.to(acc)
        m = _all_reduce(xf.amax(-1), dist.ReduceOp.MAX, group)
        sum_exp = _all_reduce(torch.exp(xf - m[:, None]).sum(-1), dist.ReduceOp.SUM, group)
        local = y - start
        on_rank = (local >= 0) & (local < v_local) & (y != ignore_index)
        picked = xf.gather(1, local.clamp(0, v_local - 1)[:, None]).squeeze(1)
        target_logit = _all_reduce(torch.where(on_rank, picked, 0.0), dist.ReduceOp.SUM, group)
        lse = m + torch.log(sum_exp)
        loss = lse - target_logit
        alpha_eff = k = 0.0
        if label_smoothing > 0:
            k = v_local * world if mode == "global" else v_local
            alpha_eff = label_smoothing * k / (k - 1) if formula == "megatron" else label_smoothing
            sum_x = xf.sum(-1)
            if mode == "global":
                sum_x = _all_reduce(sum_x, dist.ReduceOp.SUM, group)
            loss = (1 - alpha_eff) * loss + alpha_eff * (lse - sum_x / k)
        ignored = y == ignore_index
        loss = torch.where(ignored, 0.0, loss)
        ctx.save_for_backward(logits, lse, y)
        ctx.start, ctx.ignore_index, ctx.alpha_eff, ctx.k = start, ignore_index, alpha_eff, k
        return loss.reshape(s, b)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dloss):
        logits, lse, y = ctx.saved_tensors
        s, b, v_local = logits.shape
        p = torch.exp(
            logits.reshape(s * b, v_local).to(lse.dtype) - lse[:, None]
        )  # the global softmax's slice
        if ctx.alpha_eff:
            p -= ctx.alpha_eff / ctx.k
        local = y - ctx.start
        on_rank = (local >= 0) & (local < v_local) & (y != ctx.ignore_index)
        # the target's -(1 - alpha) on the rank that owns it (0 added elsewhere: no host sync)
        hit = on_rank.to(p.dtype) * -(1 - ctx.alpha_eff)
        p.scatter_add_(1, local.clamp(0, v_local - 1)[:, None], hit[:, None])
        scale = torch.where(y == ctx.ignore_index, 0.0, dloss.reshape(-1).to(p.dtype))
        p *= scale[:, None]
        return p.to(logits.dtype).reshape(s, b, v_local), None, None, None, None, None, None


class LigerVocabParallelCEFunction:
    """apply(vocab_parallel_logits [S, B, V_local], target [S, B] of global ids, tp_group,
    ignore_index, label_smoothing, label_smoothing_formula, label_smoothing_mode) -> per-token
    loss [S, B] (float32). Liger-Kernel's calling convention."""

    @staticmethod
    def apply(
        vocab_parallel_logits,
        target,
        tp_group,
        ignore_index,
        label_smoothing,
        label_smoothing_formula,
        label_smoothing_mode,
    ):
        if vocab_parallel_logits.dim() != 3:
            raise ValueError(
                "liger_cpp: argument 'vocab_parallel_logits': expected 3 dimensions [seq, batch, vocab], "
                f"got shape {tuple(vocab_parallel_logits.shape)}"
            )
        if target.shape != vocab_parallel_logits.shape[:2]:
            raise ValueError(
                f"liger_cpp: argument 'target': expected shape {tuple(vocab_parallel_logits.shape[:2])}, "
                f"got {tuple(target.shape)}"
            )
        _check_smoothing(label_smoothing, label_smoothing_formula, label_smoothing_mode)
        return _VocabParallelCE.apply(
            vocab_parallel_logits,
            target,
            tp_group,
            ignore_index,
            float(label_smoothing),
            label_smoothing_formula,
            label_smoothing_mode,
        )


class LigerVocabParallelCrossEntropy(nn.Module):
    """Liger's module: per-token loss [S, B] of vocabulary-parallel logits [S, B, V_local];
    reduction must be "none"; forward(logits, target, tp_group=None)."""

    def __init__(
        self,
        ignore_index: int = -100,
        label_smoothing: float = 0.0,
        reduction: str = "none",
        label_smoothing_formula: str = "pytorch",
        label_smoothing_mode: str = "global",
    ):
        super().__init__()
        if reduction != "none":
            raise ValueError(
                f"liger_cpp: argument 'reduction': vocabulary-parallel CE returns per-token losses, "
                f"expected 'none', got {reduction!r}"
            )
        _check_smoothing(label_smoothing, label_smoothing_formula, label_smoothing_mode)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self.reduction = reduction
        self.label_smoothing_formula = label_smoothing_formula
        self.label_smoothing_mode = label_smoothing_mode

    def forward(self, vocab_parallel_logits, target, tp_group=None):
        return LigerVocabParallelCEFunction.apply(
            vocab_parallel_logits,
            target,
            tp_group,
            self.ignore_index,
            self.label_smoothing,
            self.label_smoothing_formula,
            self.label_smoothing_mode,
        )


__all__ = ["LigerVocabParallelCEFunction", "LigerVocabParallelCrossEntropy", "validate_formula_and_mode"]
