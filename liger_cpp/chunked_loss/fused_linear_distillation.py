"""LigerFusedLinearDistillationBase: Liger's extension point for distillation losses of one's own,
fused with the student's lm_head and chunked over rows.

A subclass supplies ``distillation_loss_fn(student_logits, teacher_logits, target=None,
ignore_index=-100, beta=..., **loss_kwargs)`` returning the soft loss *summed* over a chunk's rows
(both logits already divided by the temperature), and calls ``LigerFusedLinearDistillationBase.forward
(cls, ctx, ...)`` / ``.backward(ctx, grad_output)`` from its own ``torch.autograd.Function``, as with
Liger-Kernel. Some users (Axolotl's top-k KD) only subclass it and write their own forward and
backward; that works too, since the class is a real ``torch.autograd.Function``.

The loss is Liger's: ``weight_hard_loss * CE(student) + weight_soft_loss * soft``, each summed over
the chunks and divided by the count of targets that are not ``ignore_index`` (at least one); the
student's logits are zero-padded to a larger teacher vocabulary.

The built-in losses (JSD, cosine similarity, GRPO, the preference losses) run their chunk loops in
C++; a user's Python loss function cannot, so this loop is Python. What it does differently from
Liger's: it differentiates only the chunk's logits (one ``torch.autograd.grad``), then forms dX, dW
and dB itself, dW accumulated in place by one GEMM a chunk (``addmm_``), so no weight-sized
temporary exists per chunk and dW is rounded once a chunk rather than twice. ``compiled`` is
accepted and ignored: nothing is compiled at run time. ``backward`` scales by ``grad_output``
without comparing it with 1 on the host, so it never synchronises.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from liger_cpp.chunked_loss._chunk_loop import HeadGrads, OutputSums, log_softmax32


class LigerFusedLinearDistillationBase(torch.autograd.Function):
    @staticmethod
    def distillation_loss_fn(student_logits, teacher_logits, target=None, ignore_index=None, **loss_kwargs):
        """The soft loss of a chunk, summed over its rows (logits already divided by the temperature).
        Subclasses implement it; the base divides by the count of valid targets."""
        raise NotImplementedError("Distillation loss function must be implemented.")

    @staticmethod
    def chunk_forward(
        student_input_chunk,
        student_weight,
        teacher_input_chunk,
        teacher_weight,
        target_chunk,
        student_bias=None,
        teacher_bias=None,
        ignore_index=-100,
        compute_ce_loss=True,
    ):
        """(student logits, teacher logits without gradient, the chunk's summed CE or 0.0)."""
        student_logits = F.linear(student_input_chunk, student_weight, student_bias)
        with torch.no_grad():
            teacher_logits = F.linear(teacher_input_chunk, teacher_weight, teacher_bias)
        ce = 0.0
        if compute_ce_loss:
            ce = F.nll_loss(
                log_softmax32(student_logits),
                target_chunk.reshape(-1),
                reduction="sum",
                ignore_index=ignore_index,
            )
        return student_logits, teacher_logits, ce

    @staticmethod
    def _compute_loss(
        student_input_chunk,
        student_weight,
        teacher_input_chunk,
        teacher_weight,
        target_chunk,
        student_bias=None,
        teacher_bias=None,
        distillation_loss_fn=None,
        full_target=None,
        ignore_index=-100,
        weight_hard_loss=0.5,
        weight_soft_loss=0.5,
        compute_ce_loss=True,
        temperature=1,
        **loss_kwargs,
    ):
        """A chunk's weighted loss from its inputs, and (soft, hard, student logits, teacher logits)."""
        student_logits, teacher_logits, hard = LigerFusedLinearDistillationBase.chunk_forward(
            student_input_chunk,
            student_weight,
            teacher_input_chunk,
            teacher_weight,
            target_chunk,
            student_bias=student_bias,
            teacher_bias=teacher_bias,
            ignore_index=ignore_index,
            compute_ce_loss=compute_ce_loss,
        )
        return _weighted_loss(
            student_logits,
            teacher_logits,
            hard,
            target_chunk,
            _valid_count(full_target, ignore_index),
            distillation_loss_fn,
            ignore_index,
            weight_hard_loss,
            weight_soft_loss,
            temperature,
            loss_kwargs,
        )

    @staticmethod
    def forward(
        cls,
        ctx,
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        target,
        student_bias=None,
        teacher_bias=None,
        chunk_size=1024,
        ignore_index=-100,
        weight_hard_loss=0.5,
        weight_soft_loss=0.5,
        beta=0.5,
        compute_ce_loss=True,
        temperature=1.0,
        compiled=True,
        return_soft_hard_loss=False,
        **loss_kwargs,
    ):
        """Loss (or loss, soft, hard) of ``cls.distillation_loss_fn``; the student's input, weight and
        bias gradients are computed here, chunk by chunk, and kept on ``ctx`` for ``backward``."""
        _check(student_input, student_weight, teacher_input, teacher_weight, target, student_bias, chunk_size)
        # The CE term (and its float32 log-softmax) only matters when weighted in or returned.
        compute_ce_loss = compute_ce_loss and (weight_hard_loss != 0 or return_soft_hard_loss)
        grads = HeadGrads(student_input, student_weight, student_bias)
        sums = OutputSums(student_input)
        n_valid = _valid_count(target, ignore_index)
        kwargs = dict(loss_kwargs, beta=beta)
        weight = student_weight.detach()
        bias = student_bias.detach() if student_bias is not None else None
        num_chunks = max(1, student_input.shape[0] // chunk_size)  # Liger's chunking
        row = 0
        for x, xt, t in zip(
            torch.chunk(student_input.detach(), num_chunks),
            torch.chunk(teacher_input.detach(), num_chunks),
            torch.chunk(target, num_chunks),
        ):
            with torch.no_grad():
                logits = F.linear(x, weight, bias)
                teacher_logits = F.linear(xt, teacher_weight, teacher_bias)
            with torch.enable_grad():
                leaf = logits.requires_grad_(True)
                hard = 0.0
                if compute_ce_loss:
                    hard = F.nll_loss(
                        log_softmax32(leaf),
                        t.reshape(-1),
                        reduction="sum",
                        ignore_index=ignore_index,
                    )
                chunk_loss, (soft, hard, _, _) = _weighted_loss(
                    leaf,
                    teacher_logits,
                    hard,
                    t,
                    n_valid,
                    cls.distillation_loss_fn,
                    ignore_index,
                    weight_hard_loss,
                    weight_soft_loss,
                    temperature,
                    kwargs,
                )
                grads.add(chunk_loss, leaf, x, weight, [slice(row, row + x.shape[0])])
            row += x.shape[0]
            sums.add(chunk_loss, (soft, hard))
        grad_input, grad_weight, grad_bias = grads.result()
        ctx.save_for_backward(grad_input, grad_weight, grad_bias)
        loss, (soft_sum, hard_sum) = sums.result()
        return (loss, soft_sum, hard_sum) if return_soft_hard_loss else loss

    @staticmethod
    def backward(ctx, grad_output, *args):
        """(d student_input, d student_weight, None, None, None, d student_bias): Liger's order."""
        grad_input, grad_weight, grad_bias = (
            t * grad_output if t is not None else None for t in ctx.saved_tensors
        )
        return grad_input, grad_weight, None, None, None, grad_bias


def _valid_count(target: Tensor, ignore_index: int) -> Tensor:
    return (target != ignore_index).sum().clamp_min(1)


def _weighted_loss(
    student_logits,
    teacher_logits,
    hard,
    target_chunk,
    n_valid,
    distillation_loss_fn,
    ignore_index,
    weight_hard_loss,
    weight_soft_loss,
    temperature,
    loss_kwargs,
):
    student_logits = student_logits / temperature
    teacher_logits = teacher_logits / temperature
    pad = teacher_logits.shape[-1] - student_logits.shape[-1]
    if pad > 0:  # the same tokenizer, the teacher's vocabulary padded (Liger's rule)
        student_logits = F.pad(student_logits, (0, pad))
    hard = hard / n_valid
    soft = distillation_loss_fn(
        student_logits, teacher_logits, target=target_chunk, ignore_index=ignore_index, **loss_kwargs
    )
    soft = soft / n_valid
    return weight_hard_loss * hard + weight_soft_loss * soft, (soft, hard, student_logits, teacher_logits)


def _check(
    student_input: Tensor,
    student_weight: Tensor,
    teacher_input: Tensor,
    teacher_weight: Tensor,
    target: Tensor,
    student_bias: Optional[Tensor],
    chunk_size: int,
) -> None:
    def fail(msg):
        raise ValueError(f"LigerFusedLinearDistillationBase: {msg}")

    if student_input.dim() != 2 or teacher_input.dim() != 2:
        fail(
            f"student_input and teacher_input must be 2-D [rows, hidden], got {tuple(student_input.shape)} "
            f"and {tuple(teacher_input.shape)}"
        )
    n = student_input.shape[0]
    if teacher_input.shape[0] != n or target.reshape(-1).shape[0] != n:
        fail(
            f"student_input, teacher_input and target must have the same rows, got {n}, "
            f"{teacher_input.shape[0]} and {target.reshape(-1).shape[0]}"
        )
    if student_weight.dim() != 2 or student_weight.shape[1] != student_input.shape[1]:
        fail(f"student_weight must be [V, {student_input.shape[1]}], got {tuple(student_weight.shape)}")
    if teacher_weight.dim() != 2 or teacher_weight.shape[1] != teacher_input.shape[1]:
        fail(f"teacher_weight must be [Vt, {teacher_input.shape[1]}], got {tuple(teacher_weight.shape)}")
    if student_bias is not None and student_bias.shape != (student_weight.shape[0],):
        fail(f"student_bias must be [{student_weight.shape[0]}], got {tuple(student_bias.shape)}")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        fail(f"chunk_size must be a positive int, got {chunk_size!r}")
