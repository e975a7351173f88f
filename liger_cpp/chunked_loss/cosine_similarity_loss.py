"""Liger's LigerFusedLinearCosineSimilarityLoss / liger_fused_linear_cosine, on liger_cpp's C++
distillation op.

loss = weight_hard_loss * CE(student logits, true_labels) + weight_soft_loss * soft, with
soft = sum over the rows whose label is not ignore_index of beta * (1 - cos(student logits / T,
teacher logits / T)) / n, n the count of those rows (Liger 0.8.5's loss function masks the ignored
rows; earlier Liger summed over every row while dividing by n, so padding changed the loss).
`compiled` and `chunk_size` are accepted and ignored.
"""

from liger_cpp.chunked_loss.jsd_loss import _distill, _FusedLinearDistillationLoss


def liger_fused_linear_cosine(
    student_input,
    student_weight,
    teacher_input,
    teacher_weight,
    true_labels,
    student_bias,
    teacher_bias,
    weight_hard_loss=0.5,
    weight_soft_loss=0.5,
    beta=0.5,
    ignore_index=-100,
    temperature=1.0,
    compiled=True,
    chunk_size=1024,
    return_soft_hard_loss=False,
):
    """Liger's LigerFusedLinearCosineSimilarityFunction.apply, argument for argument."""
    return _distill(
        "cosine",
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        true_labels,
        student_bias,
        teacher_bias,
        weight_hard_loss,
        weight_soft_loss,
        beta,
        ignore_index,
        temperature,
        return_soft_hard_loss,
    )


class LigerFusedLinearCosineSimilarityLoss(_FusedLinearDistillationLoss):
    """Fused lm_heads + cosine-similarity distillation loss (with a weighted hard CE term)."""

    _loss = "cosine"
