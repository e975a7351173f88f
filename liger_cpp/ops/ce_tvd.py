"""Cross entropy and total variation distance of student logits against teacher logits, per row and
unreduced (Liger's LigerFusedCETVDFunction): the fake kernels of torch.ops.liger.ce_tvd_fwd / _bwd and
`fused_ce_tvd`. The backward (C++ autograd, csrc/aten/autograd/ce_tvd_autograd.cpp) rebuilds both
softmaxes from the logits and O(rows) statistics: no (rows x V) temporary is kept."""

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device


def _out_dtype(student):
    return torch.float64 if student.dtype == torch.float64 else torch.float32


@torch.library.register_fake("liger::ce_tvd_fwd")
def _fwd_fake(student_logits, teacher_logits, target, ignore_index=-100):
    torch._check(student_logits.dim() == 2, lambda: "liger_cpp: argument 'student_logits': expected (BT, V)")
    torch._check(
        teacher_logits.shape == student_logits.shape,
        lambda: "liger_cpp: argument 'teacher_logits': expected student_logits' shape",
    )
    rows, dt = student_logits.shape[0], _out_dtype(student_logits)
    return (
        student_logits.new_empty((rows,), dtype=dt),
        student_logits.new_empty((rows,), dtype=dt),
        student_logits.new_empty((rows, 3), dtype=dt),
    )


@torch.library.register_fake("liger::ce_tvd_bwd")
def _bwd_fake(grad_ce, grad_tvd, student_logits, teacher_logits, target, stats, ignore_index=-100):
    return torch.empty_like(student_logits, memory_format=torch.contiguous_format)


def fused_ce_tvd(
    student_logits: Tensor, teacher_logits: Tensor, target: Tensor, ignore_index: int = -100
) -> tuple[Tensor, Tensor]:
    """(ce, tvd), each float32 (rows,) and unreduced: ce = logsumexp(student) - student[target] and
    tvd = 0.5 * sum |softmax(student) - softmax(teacher)| per row, both 0 where target is
    ignore_index. Differentiable w.r.t. student_logits only (the teacher is a constant)."""
    check_device(student_logits, "student_logits")
    ce, tvd, _ = torch.ops.liger.ce_tvd_fwd(student_logits, teacher_logits, target, ignore_index)
    return ce, tvd
