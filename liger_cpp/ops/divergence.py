"""Divergences of given distributions: fake kernels of torch.ops.liger.jsd_fwd / kl_div_fwd / tvd_fwd
and their functional entry points (Liger's LigerJSDFunction, LigerKLDivLossFunction,
LigerTVDLossFunction). One C++ pass writes the loss and the input's gradient for grad_output 1; the
C++ autograd (csrc/aten/autograd/divergence_autograd.cpp) scales it in the backward and hands it out.
Losses are float32. Only the first argument gets a gradient (Liger's); the second is passed as is (not
detached) so that a second backward can rerun the op from it.
"""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device

REDUCTIONS = ("none", "sum", "mean", "batchmean")


def _check(x, y):
    torch._check(x.shape == y.shape, lambda: "liger_cpp: the two distributions must have the same shape")


def _grad_fake(x, compute_grad):
    return x.new_empty(x.shape if compute_grad else (0,))


@torch.library.register_fake("liger::jsd_fwd")
def _jsd_fake(input, target, shift_labels=None, beta=0.5, ignore_index=-100, compute_grad=True):
    _check(input, target)
    return input.new_empty((), dtype=torch.float32), _grad_fake(input, compute_grad)


@torch.library.register_fake("liger::kl_div_fwd")
def _kl_fake(input, target, reduction="batchmean", log_target=False, eps=1e-10, compute_grad=True):
    _check(input, target)
    torch._check(reduction in REDUCTIONS, lambda: "liger_cpp: argument 'reduction': unknown reduction")
    shape = input.shape if reduction == "none" else ()
    return input.new_empty(shape, dtype=torch.float32), _grad_fake(input, compute_grad)


@torch.library.register_fake("liger::tvd_fwd")
def _tvd_fake(p, q, shift_labels=None, reduction="batchmean", ignore_index=-100, compute_grad=True):
    _check(p, q)
    torch._check(reduction in REDUCTIONS, lambda: "liger_cpp: argument 'reduction': unknown reduction")
    shape = p.shape if reduction == "none" else ()
    return p.new_empty(shape, dtype=torch.float32), _grad_fake(p, compute_grad)


def _needs_grad(x: Tensor) -> bool:
    return torch.is_grad_enabled() and x.requires_grad


def _reduction(reduction: str) -> str:
    if reduction not in REDUCTIONS:
        raise ValueError(f"liger_cpp: argument 'reduction': expected one of {REDUCTIONS}, got {reduction!r}")
    return reduction


def jsd(
    input: Tensor,
    target: Tensor,
    shift_labels: Optional[Tensor] = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> Tensor:
    """Generalized JSD of log-probabilities: input = log Q (student), target = log P (teacher), rows
    along the last dimension; beta 0: KL(P || Q), beta 1: KL(Q || P); summed and divided by the rows
    whose shift_labels is not ignore_index (all rows without labels)."""
    check_device(input, "input")
    return torch.ops.liger.jsd_fwd(
        input, target, shift_labels, float(beta), int(ignore_index), _needs_grad(input)
    )[0]


def kl_div(
    input: Tensor, target: Tensor, reduction: str = "batchmean", log_target: bool = False, eps: float = 1e-10
) -> Tensor:
    """nn.KLDivLoss's KL(target || input) with input in log space (target too with log_target); eps
    clamps the target before its log (Liger's). No gradient to the target."""
    check_device(input, "input")
    return torch.ops.liger.kl_div_fwd(
        input, target, _reduction(reduction), bool(log_target), float(eps), _needs_grad(input)
    )[0]


def tvd(
    p: Tensor,
    q: Tensor,
    shift_labels: Optional[Tensor] = None,
    reduction: str = "batchmean",
    ignore_index: int = -100,
) -> Tensor:
    """Total variation distance 0.5 |p - q| (gradient w.r.t. p; 0 where p == q), rows whose
    shift_labels is ignore_index excluded; batchmean / mean divide by the rows counted (times V)."""
    check_device(p, "p")
    return torch.ops.liger.tvd_fwd(
        p, q, shift_labels, _reduction(reduction), int(ignore_index), _needs_grad(p)
    )[0]
