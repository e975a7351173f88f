"""Fused linear cross entropy: fake kernels for torch.ops.liger.fused_linear_cross_entropy_* (autograd:
csrc/aten/autograd/fused_linear_cross_entropy_autograd.cpp), and `fused_linear_cross_entropy` (Liger's
LigerFusedLinearCrossEntropyFunction).

How the gradients flow (as Liger, without its host synchronisations):
- reduction "mean" / "sum": the forward computes dX, dW, dB chunk by chunk while the logits chunk is
  at hand (only for the inputs that need a gradient) and saves them; the backward multiplies them by
  the scalar grad_output in place (a declared mutation; on CUDA a unit grad_output is skipped on the
  device). A second backward through the same graph (retain_graph=True) raises instead of scaling
  twice.
- reduction "none": the forward computes only the losses; the backward reruns the chunk loop with the
  per-token grad_output folded into each row's dlogits before the GEMMs sum over rows (Liger issues
  #488/#968: scaling after the dW reduction cannot be right).
"""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device, head_grads_fake

REDUCTIONS = ("none", "mean", "sum")


def _check_fake(input, weight, target, bias, reduction):
    torch._check(
        input.dim() >= 1 and input.shape[-1] > 0,
        lambda: "liger_cpp: argument 'input': expected shape (..., H) with H > 0",
    )
    torch._check(
        weight.dim() == 2 and weight.shape[1] == input.shape[-1],
        lambda: "liger_cpp: argument 'weight': expected shape (V, H)",
    )
    torch._check(weight.dtype == input.dtype, lambda: "liger_cpp: argument 'weight': expected input's dtype")
    torch._check(
        target.numel() * input.shape[-1] == input.numel(),
        lambda: "liger_cpp: argument 'target': expected one element per row of input",
    )
    if bias is not None:
        torch._check(
            bias.shape == (weight.shape[0],), lambda: "liger_cpp: argument 'bias': expected shape (V,)"
        )
    torch._check(
        reduction in REDUCTIONS, lambda: "liger_cpp: argument 'reduction': expected 'none', 'mean' or 'sum'"
    )


@torch.library.register_fake("liger::fused_linear_cross_entropy_fwd")
def _fwd_fake(
    input,
    weight,
    target,
    bias=None,
    ce_weight=None,
    ignore_index=-100,
    lse_square_scale=0.0,
    label_smoothing=0.0,
    reduction="mean",
    softcap=0.0,
    logit_scale=1.0,
    return_z_loss=False,
    return_token_accuracy=False,
    return_predicted_tokens=False,
    compute_dx=False,
    compute_dw=False,
    compute_db=False,
    accum_dtype=None,
    chunk_rows=0,
    use_token_scaling=False,
    chunk_budget_mib=None,
):
    _check_fake(input, weight, target, bias, reduction)
    f32 = torch.float32
    shape = target.shape if reduction == "none" else ()
    loss = input.new_empty(shape, dtype=f32)
    z_loss = input.new_empty(shape if return_z_loss else (0,), dtype=f32)
    accuracy = input.new_empty(shape if return_token_accuracy else (0,), dtype=f32)
    n_pred = target.shape if return_predicted_tokens else (0,)
    predicted = input.new_empty(n_pred, dtype=torch.int64)
    return (
        loss,
        z_loss,
        accuracy,
        predicted,
        *head_grads_fake(input, weight, bias, compute_dx, compute_dw, compute_db),
    )


@torch.library.register_fake("liger::fused_linear_cross_entropy_bwd")
def _bwd_fake(
    grad_loss,
    input,
    weight,
    target,
    bias=None,
    ce_weight=None,
    ignore_index=-100,
    lse_square_scale=0.0,
    label_smoothing=0.0,
    reduction="mean",
    softcap=0.0,
    logit_scale=1.0,
    compute_dx=True,
    compute_dw=True,
    compute_db=True,
    accum_dtype=None,
    chunk_rows=0,
    use_token_scaling=False,
    chunk_budget_mib=None,
):
    _check_fake(input, weight, target, bias, reduction)
    return head_grads_fake(input, weight, bias, compute_dx, compute_dw, compute_db)


@torch.library.register_fake("liger::fused_linear_cross_entropy_scale_")
def _scale_fake(dX, dW, dB, grad_output):
    torch._check(grad_output.numel() == 1, lambda: "liger_cpp: argument 'grad_output': expected one element")
    return None


# Autograd: csrc/aten/autograd/fused_linear_cross_entropy_autograd.cpp (C++, the Autograd dispatch key).
_fwd = torch.ops.liger.fused_linear_cross_entropy_fwd.default


def _grad_flags(
    input: Tensor, weight: Tensor, bias: Optional[Tensor], reduction: str
) -> tuple[bool, bool, bool]:
    """Which gradients the forward computes: those autograd will ask for, only for mean/sum (reduction
    'none' defers them to the backward) and never under no_grad."""
    if reduction == "none" or not torch.is_grad_enabled():
        return False, False, False
    return input.requires_grad, weight.requires_grad, bias is not None and bias.requires_grad


def fused_linear_cross_entropy(
    input: Tensor,
    weight: Tensor,
    target: Tensor,
    bias: Optional[Tensor] = None,
    ce_weight: Optional[Tensor] = None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: Optional[float] = None,
    return_z_loss: bool = False,
    accum_dtype: Optional[torch.dtype] = None,
    use_token_scaling: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
    logit_scale: float = 1.0,
    chunk_rows: int = 0,
    chunk_budget_mib: Optional[float] = None,
) -> tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """Cross entropy of `logit_scale * (input @ weight.T + bias)` against `target`, without holding
    the (tokens x V) logits. Returns (loss, z_loss, token_accuracy, predicted_tokens), the last three
    None unless requested.

    input (..., H) is flattened to rows; target has one class index per row (its shape is the shape
    of per-row outputs). The options are Liger's (in Liger's order up to return_predicted_tokens):
    class weights `ce_weight`, `ignore_index`, `label_smoothing`, z-loss `lse_square_scale * lse^2`
    (added to the loss; returned separately for logging with `return_z_loss`), `softcap`
    (logits -> softcap * tanh(logits / softcap)), `reduction` none/mean/sum; `use_token_scaling`
    (TRL's DFT loss): each token's loss (CE and z-loss) multiplied by the detached probability of its
    target, softmax(logits)[target] of the scaled and softcapped logits (label smoothing and class
    weights do not enter it), the mean's normaliser unchanged; `logit_scale` multiplies the logits
    before the softcap (Granite's 1 / logits_scaling). The loss is float32. dW accumulates over
    chunks in weight's dtype (one rounding per chunk, as Liger's default) or, with
    accum_dtype=torch.float32, in float32. Targets outside [0, V) that are not `ignore_index` raise
    ValueError on the CPU; on CUDA they are a device-side assertion unless
    `liger_cpp.set_check_targets(True)` asks for a checked, catchable ValueError.

    Chunking: `chunk_rows` rows are processed at a time; 0 (default) picks them from a budget of
    logits per chunk: `chunk_budget_mib` MiB when given, else the environment variable
    LIGER_CPP_FLCE_CHUNK_MB (read once per process), else automatic (the larger of Liger's chunk
    rows and H / 4 rows, a chunk's logits within 64..251 MiB). Under autocast, input, weight and bias
    are cast to the autocast dtype (the GEMMs' precision, as F.linear would run) and a float32
    weight's gradient accumulates in float32.
    """
    check_device(input, "input")
    if reduction not in REDUCTIONS:
        raise ValueError(f"liger_cpp: argument 'reduction': expected one of {REDUCTIONS}, got {reduction!r}")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"liger_cpp: argument 'softcap': expected None or a positive value, got {softcap!r}")
    if chunk_budget_mib is not None and not chunk_budget_mib > 0:
        raise ValueError(
            f"liger_cpp: argument 'chunk_budget_mib': expected None or a positive number of MiB, "
            f"got {chunk_budget_mib!r}"
        )
    dev = input.device.type
    if dev in ("cpu", "cuda") and torch.is_autocast_enabled(dev):
        dt = torch.get_autocast_dtype(dev)
        if accum_dtype is None and weight.dtype == torch.float32 and dt != torch.float32:
            # fp32 master weights: accumulate dW in fp32 across chunks (Liger's grad_weight
            # inherits the parameter's dtype under AMP) rather than rounding per chunk.
            accum_dtype = torch.float32
        input, weight = input.to(dt), weight.to(dt)
        bias = bias.to(dt) if bias is not None else None
    compute_dx, compute_dw, compute_db = _grad_flags(input, weight, bias, reduction)
    loss, z_loss, accuracy, predicted, _, _, _ = _fwd(
        input,
        weight,
        target,
        bias,
        ce_weight,
        int(ignore_index),
        float(lse_square_scale),
        float(label_smoothing),
        reduction,
        float(softcap) if softcap is not None else 0.0,
        float(logit_scale),
        bool(return_z_loss),
        bool(return_token_accuracy),
        bool(return_predicted_tokens),
        compute_dx,
        compute_dw,
        compute_db,
        accum_dtype,
        int(chunk_rows),
        bool(use_token_scaling),
        float(chunk_budget_mib) if chunk_budget_mib is not None else None,
    )
    return (
        loss,
        z_loss if return_z_loss else None,
        accuracy if return_token_accuracy else None,
        predicted if return_predicted_tokens else None,
    )
