"""LigerFusedLinearUnpairedPreferenceBase: Liger's extension point for an unpaired preference loss of
one's own (KTO-like: each sequence desirable or not), fused with the lm_head and chunked over
sequences.

A subclass supplies ``preference_loss_fn(log_probs, preference_labels, full_target, **loss_kwargs)``
(``ref_log_prob_chunk`` among the keyword arguments with a reference model) returning the chunk's
loss or ``(loss, *aux)``, and calls ``LigerFusedLinearUnpairedPreferenceBase.forward(cls, ctx, ...)``
/ ``.backward(ctx, grad_output)`` from its own Function, as with Liger-Kernel. ``forward`` returns
``(loss, (chosen_logps_sum, rejected_logps_sum, chosen_logits_sum, rejected_logits_sum, *aux))``,
summed over chunks (aux with dimensions are concatenated; Liger returns zeros for those);
``backward`` returns ``(d_input, d_weight, None, None, d_bias)``.

The loop is the paired base's (fused_linear_preference.py): one ``autograd.grad`` on each chunk's
logits, dX written into the chunk's rows, dW accumulated in place by one GEMM a chunk, only the
gradients that are needed. ``compiled`` is accepted and ignored.
"""

import torch
import torch.nn.functional as F

from liger_cpp.chunked_loss._chunk_loop import HeadGrads, OutputSums, log_softmax32, sequence_logps


class LigerFusedLinearUnpairedPreferenceBase(torch.autograd.Function):
    @staticmethod
    def preference_loss_fn(*args, **kwargs):
        """The chunk's loss from its sequences' log-probs and labels; subclasses implement it."""
        raise NotImplementedError("Preference loss function must be implemented.")

    @staticmethod
    def chunk_forward(
        input_chunk,
        weight,
        target_chunk,
        preference_labels_chunk,
        bias=None,
        ignore_index=-100,
        average_log_prob=False,
    ):
        """(per-sequence log-probs, chosen and rejected log-prob sums, chosen and rejected logit sums)."""
        logits = F.linear(input_chunk, weight, bias)
        return _from_logits(logits, target_chunk, preference_labels_chunk, ignore_index, average_log_prob)

    @staticmethod
    def _compute_loss(
        input_chunk,
        weight,
        target_chunk,
        preference_labels_chunk,
        bias=None,
        preference_loss_fn=None,
        full_target=None,
        ignore_index=-100,
        use_ref_model=False,
        ref_input_chunk=None,
        ref_weight=None,
        ref_bias=None,
        average_log_prob=False,
        **loss_kwargs,
    ):
        """A chunk's loss and (chosen_logps_sum, rejected_logps_sum, chosen_logits_sum,
        rejected_logits_sum, *aux) from its inputs."""
        logits = F.linear(input_chunk, weight, bias)
        if use_ref_model:
            loss_kwargs["ref_log_prob_chunk"] = _ref(
                ref_input_chunk,
                ref_weight,
                ref_bias,
                target_chunk,
                preference_labels_chunk,
                ignore_index,
                average_log_prob,
            )
        return _chunk_loss(
            logits,
            target_chunk,
            preference_labels_chunk,
            preference_loss_fn,
            full_target,
            ignore_index,
            average_log_prob,
            loss_kwargs,
        )

    @staticmethod
    def forward(
        cls,
        ctx,
        _input,
        weight,
        target,
        preference_labels,
        bias=None,
        chunk_size=1,
        ignore_index=-100,
        compiled=True,
        use_ref_model=False,
        ref_input=None,
        ref_weight=None,
        ref_bias=None,
        average_log_prob=False,
        **loss_kwargs,
    ):
        """The loss of ``cls.preference_loss_fn`` and its sums; the gradients of ``_input``, ``weight``
        and ``bias`` (those that require one) are computed here, chunk by chunk."""
        _check(
            _input, weight, target, preference_labels, bias, chunk_size, use_ref_model, ref_input, ref_weight
        )
        grads = HeadGrads(_input, weight, bias)
        sums = OutputSums(_input)
        w = weight.detach()
        b = bias.detach() if bias is not None else None
        n = max(1, _input.shape[0] // chunk_size)  # Liger's chunking: sequences a chunk
        xs = torch.chunk(_input.detach(), n)
        refs = torch.chunk(ref_input.detach(), n) if use_ref_model else [None] * len(xs)
        row = 0
        for x, t, p, r in zip(xs, torch.chunk(target, n), torch.chunk(preference_labels, n), refs):
            kwargs = dict(loss_kwargs)
            if use_ref_model:
                kwargs["ref_log_prob_chunk"] = _ref(
                    r, ref_weight, ref_bias, t, p, ignore_index, average_log_prob
                )
            with torch.no_grad():
                logits = F.linear(x, w, b)
            with torch.enable_grad():
                leaf = logits.requires_grad_(True)
                chunk_loss, outs = _chunk_loss(
                    leaf, t, p, cls.preference_loss_fn, target, ignore_index, average_log_prob, kwargs
                )
                grads.add(chunk_loss, leaf, x, w, [slice(row, row + x.shape[0])])
            row += x.shape[0]
            sums.add(chunk_loss, outs)
        ctx.save_for_backward(*grads.result())
        loss, outs = sums.result()
        return loss, outs

    @staticmethod
    def backward(ctx, *grad_output):
        """Called as Liger's subclasses do, ``backward(ctx, grad_output)`` with the subclass's tuple
        of output gradients: (d_input, d_weight, None, None, d_bias)."""
        g = grad_output[0][0]
        grad_input, grad_weight, grad_bias = (t * g if t is not None else None for t in ctx.saved_tensors)
        return grad_input, grad_weight, None, None, grad_bias


def _from_logits(logits, target, labels, ignore_index, average_log_prob):
    seq = sequence_logps(log_softmax32(logits), target, ignore_index, average_log_prob)
    chosen = labels.reshape(-1, 1, 1)
    return (
        seq,
        (seq * labels).sum(),
        (seq * ~labels).sum(),
        (logits * chosen).sum(),
        (logits * ~chosen).sum(),
    )


def _ref(ref_input, ref_weight, ref_bias, target, labels, ignore_index, average_log_prob):
    with torch.no_grad():
        return _from_logits(
            F.linear(ref_input, ref_weight, ref_bias), target, labels, ignore_index, average_log_prob
        )[0]


def _chunk_loss(
    logits, target, labels, preference_loss_fn, full_target, ignore_index, average_log_prob, kwargs
):
    seq, *stats = _from_logits(logits, target, labels, ignore_index, average_log_prob)
    out = preference_loss_fn(seq, labels, full_target, **kwargs)
    loss, aux = (out[0], list(out[1:])) if isinstance(out, tuple) else (out, [])
    return loss, (*stats, *aux)


def _check(_input, weight, target, labels, bias, chunk_size, use_ref_model, ref_input, ref_weight):
    def fail(msg):
        raise ValueError(f"LigerFusedLinearUnpairedPreferenceBase: {msg}")

    if _input.dim() != 3 or target.dim() != 2 or _input.shape[:2] != target.shape:
        fail(
            f"_input must be [B, T, H] and target [B, T], got {tuple(_input.shape)} and {tuple(target.shape)}"
        )
    if labels is None or labels.shape != (target.shape[0],) or labels.dtype != torch.bool:
        got = None if labels is None else (tuple(labels.shape), labels.dtype)
        fail(f"preference_labels must be a bool tensor [{target.shape[0]}], got {got}")
    if weight.dim() != 2 or weight.shape[1] != _input.shape[-1]:
        fail(f"weight must be [V, {_input.shape[-1]}], got {tuple(weight.shape)}")
    if bias is not None and bias.shape != (weight.shape[0],):
        fail(f"bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        fail(f"chunk_size must be a positive int, got {chunk_size!r}")
    if use_ref_model and (ref_input is None or ref_weight is None):
        fail("use_ref_model=True needs ref_input and ref_weight")
