"""Cross entropy on given logits: fake kernels for torch.ops.liger.cross_entropy_* (their autograd,
the in-place option's too, is in C++: csrc/aten/autograd/cross_entropy_autograd.cpp), and
`cross_entropy` (Liger's LigerCrossEntropyFunction, with its options and outputs).

One pass over the logits: the forward computes the loss and, when a gradient is needed, the
gradient for grad_output = 1 (scaled for the reduction); the backward only scales it by the incoming
grad_output (a free no-op on CUDA when that is 1). Memory:

- default (`inplace=False`): one logits-sized gradient buffer, allocated by the forward and handed
  to autograd as the logits' gradient by the backward (which scales it in place: no second
  buffer). That is the gradient PyTorch would allocate anyway, so nothing beyond it; the logits
  are left untouched and no fp32 copy or softmax is kept.
- `inplace=True` (opt-in): the gradient is written into the logits' own storage (Liger's
  behaviour, which saves that buffer). Unlike Liger's silent overwrite (its issue #272), the write
  goes through a mutating op that bumps the logits' version counter, so another user of the logits
  saved for backward raises "modified by an inplace operation" instead of receiving wrong
  gradients; reading the logits after the call gives the gradient, not the logits. Under
  torch.compile the out-of-place path is used.

Why not in place by default: the version counter protects tensors autograd saved, not plain
readers. Code that looks at the logits after the loss during training (metrics, logging, a second
loss on the same logits; Hugging Face returns the logits in its output) would silently read the
gradient. Out of place is the best memory that cannot corrupt anything silently.

No host synchronisation: valid-target counts stay on the device and target values are checked with
an asynchronous device assertion on CUDA, so the op can be captured in a CUDA graph and compiled
with torch.compile(fullgraph=True).
"""

from typing import Optional, Union

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device
from liger_cpp.ops.ce_output import CrossEntropyOutput

REDUCTIONS = ("none", "mean", "sum")


def _check_fake(logits, target, weight, reduction):
    torch._check(
        logits.dim() >= 1 and logits.shape[-1] > 0,
        lambda: "liger_cpp: argument 'logits': expected shape (..., V) with V > 0",
    )
    torch._check(
        target.shape == logits.shape[:-1],
        lambda: "liger_cpp: argument 'target': expected the logits' shape without the class dimension",
    )
    if weight is not None:
        torch._check(weight.shape == (logits.shape[-1],), lambda: "liger_cpp: argument 'weight': shape")
    torch._check(reduction in REDUCTIONS, lambda: "liger_cpp: argument 'reduction': expected none/mean/sum")


def _fake_outputs(logits, target, reduction, return_argmax):
    shape = target.shape if reduction == "none" else ()
    loss = logits.new_empty(shape, dtype=torch.float32)
    z_loss = logits.new_empty(shape, dtype=torch.float32)
    argmax = logits.new_empty(target.shape if return_argmax else (0,), dtype=torch.int64)
    return loss, z_loss, argmax


@torch.library.register_fake("liger::cross_entropy_fwd")
def _cross_entropy_fwd_fake(
    logits,
    target,
    weight=None,
    ignore_index=-100,
    label_smoothing=0.0,
    lse_square_scale=0.0,
    softcap=0.0,
    reduction="mean",
    compute_grad=True,
    return_argmax=False,
):
    _check_fake(logits, target, weight, reduction)
    loss, z_loss, argmax = _fake_outputs(logits, target, reduction, return_argmax)
    dlogits = logits.new_empty(logits.shape if compute_grad else (0,))
    return loss, z_loss, dlogits, argmax


@torch.library.register_fake("liger::cross_entropy_fwd_")
def _cross_entropy_fwd_inplace_fake(
    logits,
    target,
    weight=None,
    ignore_index=-100,
    label_smoothing=0.0,
    lse_square_scale=0.0,
    softcap=0.0,
    reduction="mean",
    return_argmax=False,
):
    _check_fake(logits, target, weight, reduction)
    return _fake_outputs(logits, target, reduction, return_argmax)


@torch.library.register_fake("liger::cross_entropy_scale_grad_")
def _cross_entropy_scale_grad_fake(grad, grad_output):
    return None


# Autograd of cross_entropy_fwd and of the in-place cross_entropy_fwd_ is registered in C++
# (csrc/aten/autograd/cross_entropy_autograd.cpp, the Autograd dispatch key): no materialised zero
# gradients, the forward's buffer scaled in place and handed out, a second backward (retain_graph)
# recomputing from weakly referenced logits or raising a clear error, and a functional backward under
# tracing (torch.compile).
_fwd = torch.ops.liger.cross_entropy_fwd.default
_fwd_inplace = torch.ops.liger.cross_entropy_fwd_.default


def _rows_without_copy(t: Tensor) -> bool:
    """Whether t's leading dimensions flatten into rows of unit column stride without a copy."""
    if t.shape[-1] != 1 and t.stride(-1) != 1:
        return False
    if t.dim() <= 2:
        return t.dim() == 1 or t.shape[0] <= 1 or t.stride(0) != 0
    try:
        t.view(-1, t.shape[-1])
    except RuntimeError:
        return False
    return True


def cross_entropy(
    logits: Tensor,
    target: Tensor,
    weight: Optional[Tensor] = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: Optional[float] = None,
    reduction: str = "mean",
    return_z_loss: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
    inplace: bool = False,
) -> Union[Tensor, CrossEntropyOutput]:
    """Cross entropy of logits (..., V) against class indices target (...), with Liger's options.

    The class dimension is the LAST one (Liger's and HF's layout; F.cross_entropy uses dim 1 for
    inputs of more than 2 dimensions). target: int64 (int32 accepted); targets equal to
    `ignore_index` (any value, also one in [0, V)) are skipped; any other target outside [0, V) is an
    error (raised at once on CPU; on CUDA a device-side assertion that surfaces at the next
    synchronisation, as in PyTorch). `weight`: class weights (V,), as F.cross_entropy (the mean
    divides by the sum of the valid targets' weights; weights get no gradient). `label_smoothing` in
    [0, 1] with PyTorch's formula; `lse_square_scale` adds the z-loss lse_square_scale * lse^2 per
    valid row (its mean divides by the number of valid targets, unweighted); `softcap` (None or 0:
    off) replaces x by softcap * tanh(x / softcap) first (Gemma 2).

    reduction "mean" / "sum" / "none" (per element of target). An all-ignored batch gives loss 0 and
    a zero gradient, not NaN. The loss is float32 whatever the logits' dtype (HF upcasts logits to
    float32 for its loss); the gradient has the logits' dtype. `inplace=True` writes the gradient into
    the logits (see the module docstring).

    Returns the loss, or a CrossEntropyOutput when any return_* flag is set: z_loss (reduced like the
    loss, which already includes it; no gradient flows through it), token_accuracy (fraction of
    valid rows whose argmax is the target, 0 when there are none; per element, 0 for ignored ones,
    with reduction "none"), predicted_tokens (argmax per element of target, -1 for ignored ones).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"liger_cpp: argument 'reduction': expected one of {REDUCTIONS}, got {reduction!r}")
    check_device(logits, "logits")
    want_argmax = bool(return_token_accuracy or return_predicted_tokens)
    compute_grad = torch.is_grad_enabled() and logits.requires_grad
    if (
        compute_grad
        and not (inplace or want_argmax or softcap or label_smoothing or lse_square_scale or return_z_loss)
        and weight is None
        and ignore_index == -100
        and reduction == "mean"
    ):
        # Every other argument at its schema default: not passed, since the dispatcher fills defaults
        # in C++ for less than converting each argument from Python costs (the common call's host time).
        return _fwd(logits, target)[0]
    softcap = 0.0 if softcap is None else float(softcap)
    args = (int(ignore_index), float(label_smoothing), float(lse_square_scale), softcap, reduction)
    if compute_grad and inplace and not torch.compiler.is_compiling() and _rows_without_copy(logits):
        loss, z_loss, argmax = _fwd_inplace(logits, target, weight, *args, want_argmax)
    else:
        loss, z_loss, _, argmax = _fwd(logits, target, weight, *args, compute_grad, want_argmax)
    if not (return_z_loss or want_argmax):
        return loss
    out = CrossEntropyOutput(loss=loss)
    if return_z_loss:
        out.z_loss = z_loss
    if return_token_accuracy:
        valid = target != ignore_index
        hit = ((argmax == target) & valid).to(torch.float32)
        out.token_accuracy = hit if reduction == "none" else hit.sum() / valid.sum().clamp_min(1)
    if return_predicted_tokens:
        out.predicted_tokens = argmax
    return out
