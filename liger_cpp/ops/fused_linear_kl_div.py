"""KL divergence of a given target distribution fused with the student's lm_head: the fake kernel of
torch.ops.liger.fused_linear_kl_div_fwd and `fused_linear_kl_div` (the engine of
liger_cpp.transformers.LigerFusedLinearKLDivLoss, Liger's offline-distillation loss on cached
teacher probabilities).

C++ end to end (csrc/aten/composite/fused_linear_kl_div.cpp; formulas in csrc/schema.cpp): per chunk
the head's GEMM, the rows' KL terms and dlogits in float32, the dX / dW / dB GEMMs. Its autograd is
C++ (the forward computes the gradients, the backward scales and hands them out).
"""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device, head_grads_fake
from liger_cpp.ops.fused_linear_preference import _autocast_cast

REDUCTIONS = ("batchmean", "mean", "sum")


@torch.library.register_fake("liger::fused_linear_kl_div_fwd")
def _fwd_fake(
    student_input,
    student_weight,
    target,
    shift_labels=None,
    student_bias=None,
    reduction="batchmean",
    ignore_index=-100,
    temperature=1.0,
    eps=1e-10,
    accum_dtype=None,
    chunk_rows=0,
    compute_dx=False,
    compute_dw=False,
    compute_db=False,
):
    torch._check(
        student_weight.dim() == 2 and student_weight.shape[1] == student_input.shape[-1],
        lambda: "liger_cpp: argument 'student_weight': expected shape (V, H)",
    )
    torch._check(
        target.shape[-1] == student_weight.shape[0],
        lambda: "liger_cpp: argument 'target': expected V probabilities per row",
    )
    torch._check(
        reduction in REDUCTIONS, lambda: f"liger_cpp: argument 'reduction': expected one of {REDUCTIONS}"
    )
    acc = torch.float64 if student_input.dtype == torch.float64 else torch.float32
    loss = student_input.new_empty((), dtype=acc)
    dx, dw, db = head_grads_fake(
        student_input, student_weight, student_bias, compute_dx, compute_dw, compute_db
    )
    return loss, dx, dw, db


def fused_linear_kl_div(
    student_input: Tensor,
    student_weight: Tensor,
    target: Tensor,
    shift_labels: Optional[Tensor] = None,
    student_bias: Optional[Tensor] = None,
    *,
    reduction: str = "batchmean",
    ignore_index: int = -100,
    temperature: float = 1.0,
    eps: float = 1e-10,
    accum_dtype: Optional[torch.dtype] = None,
    chunk_rows: int = 0,
) -> Tensor:
    """KL(target || softmax((student_input @ student_weight^T + student_bias) / temperature)) over
    the rows whose shift_label is not ignore_index, reduced by `reduction` (batchmean, mean, sum);
    a float32 scalar (float64 for float64) with gradients to the student's input, weight and bias.
    `target`: (..., V) probabilities, one row per row of student_input (..., H)."""
    check_device(student_input, "student_input")
    if reduction not in REDUCTIONS:
        raise ValueError(
            f"liger_cpp: argument 'reduction': expected one of {REDUCTIONS}, got {reduction!r} (the "
            "gradients are computed in the forward; LigerKLDIVLoss on logits has reduction='none')"
        )
    if temperature == 0:
        raise ValueError("liger_cpp: argument 'temperature': cannot be 0")
    student_input, student_weight, student_bias = _autocast_cast(student_input, student_weight, student_bias)
    grad = torch.is_grad_enabled()
    out = torch.ops.liger.fused_linear_kl_div_fwd(
        student_input,
        student_weight,
        target,
        shift_labels,
        student_bias,
        reduction,
        int(ignore_index),
        float(temperature),
        float(eps),
        accum_dtype,
        int(chunk_rows),
        grad and student_input.requires_grad,
        grad and student_weight.requires_grad,
        grad and student_bias is not None and student_bias.requires_grad,
    )
    return out[0]
