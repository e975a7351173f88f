"""Distillation losses fused with the student's and the teacher's lm_heads: the fake kernel of
torch.ops.liger.fused_linear_distillation_fwd and `fused_linear_distillation` (the engine of
liger_cpp.chunked_loss's LigerFusedLinearJSDLoss / LigerFusedLinearCosineSimilarityLoss and of
liger_cpp.transformers.LigerFusedLinearJSD).

C++ end to end (csrc/aten/composite/fused_linear_distillation.cpp; formulas in csrc/schema.cpp): per
chunk both heads' GEMMs, one row kernel for the losses and the student's dlogits, the student's dX /
dW / dB GEMMs; the teacher runs without gradient. Its autograd is C++ (the forward computes the
gradients, the backward scales and hands them out). Nothing is compiled at run time.
"""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device, head_grads_fake
from liger_cpp.ops.fused_linear_preference import _autocast_cast

LOSSES = ("jsd", "cosine")


@torch.library.register_fake("liger::fused_linear_distillation_fwd")
def _fwd_fake(
    student_input,
    student_weight,
    teacher_input,
    teacher_weight,
    target,
    student_bias=None,
    teacher_bias=None,
    loss="jsd",
    weight_hard_loss=0.5,
    weight_soft_loss=0.5,
    beta=0.5,
    ignore_index=-100,
    temperature=1.0,
    mask_soft=True,
    chunk_rows=0,
    compute_dx=False,
    compute_dw=False,
    compute_db=False,
    compute_hard=True,
):
    torch._check(
        student_weight.dim() == 2 and student_weight.shape[1] == student_input.shape[-1],
        lambda: "liger_cpp: argument 'student_weight': expected shape (V, H)",
    )
    torch._check(
        teacher_weight.dim() == 2 and teacher_weight.shape[1] == teacher_input.shape[-1],
        lambda: "liger_cpp: argument 'teacher_weight': expected shape (V, H)",
    )
    torch._check(loss in LOSSES, lambda: "liger_cpp: argument 'loss': expected 'jsd' or 'cosine'")
    f32 = torch.float32
    scalar = student_input.new_empty((), dtype=f32)
    dx, dw, db = head_grads_fake(
        student_input, student_weight, student_bias, compute_dx, compute_dw, compute_db
    )
    return scalar, scalar.clone(), scalar.clone(), dx, dw, db


def fused_linear_distillation(
    student_input: Tensor,
    student_weight: Tensor,
    teacher_input: Tensor,
    teacher_weight: Tensor,
    target: Optional[Tensor] = None,
    student_bias: Optional[Tensor] = None,
    teacher_bias: Optional[Tensor] = None,
    *,
    loss: str = "jsd",
    weight_hard_loss: float = 0.5,
    weight_soft_loss: float = 0.5,
    beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
    mask_soft: bool = True,
    chunk_rows: int = 0,
    compute_hard: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """(loss, soft_loss, hard_loss) of distilling the teacher head into the student head (float32
    scalars; only `loss` has a gradient, to the student's input, weight and bias). Rows: every
    leading position of student_input (..., Hs) and teacher_input (..., Ht); `target` one class index
    per row (or None: every row counts, no hard loss). compute_hard=False with weight_hard_loss 0
    skips the hard loss (hard_loss is then 0): for callers that do not read it."""
    check_device(student_input, "student_input")
    if loss not in LOSSES:
        raise ValueError(f"liger_cpp: argument 'loss': expected one of {LOSSES}, got {loss!r}")
    if temperature == 0:
        raise ValueError("liger_cpp: argument 'temperature': cannot be 0")
    student_input, student_weight, student_bias, teacher_input, teacher_weight, teacher_bias = _autocast_cast(
        student_input, student_weight, student_bias, teacher_input, teacher_weight, teacher_bias
    )
    grad = torch.is_grad_enabled()
    out = torch.ops.liger.fused_linear_distillation_fwd(
        student_input,
        student_weight,
        # The teacher gets no gradient (no edge of the op's autograd node); not detached, so that a
        # second backward (retain_graph) can rerun the op from these same tensors.
        teacher_input,
        teacher_weight,
        target,
        student_bias,
        teacher_bias,
        loss,
        float(weight_hard_loss),
        float(weight_soft_loss),
        float(beta),
        int(ignore_index),
        float(temperature),
        bool(mask_soft),
        int(chunk_rows),
        grad and student_input.requires_grad,
        grad and student_weight.requires_grad,
        grad and student_bias is not None and student_bias.requires_grad,
        bool(compute_hard),
    )
    return out[0], out[1], out[2]
