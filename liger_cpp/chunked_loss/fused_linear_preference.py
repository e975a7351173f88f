"""LigerFusedLinearPreferenceBase: Liger's extension point for a paired preference loss of one's own
(chosen and rejected completions), fused with the lm_head and chunked over pairs.

A subclass supplies ``preference_loss_fn(chosen_logps, rejected_logps, full_target, beta=...,
**loss_kwargs)`` returning the chunk's loss (already normalised over the whole batch, as Liger's DPO
divides by the pair count) or ``(loss, *aux)``; with a reference model its log-probs arrive as
``ref_chosen_logps`` / ``ref_rejected_logps``. It calls ``LigerFusedLinearPreferenceBase.forward(cls,
ctx, ...)`` and ``LigerFusedLinearPreferenceBase.backward(ctx, grad_output)`` from its own Function,
as with Liger-Kernel (AgileRL's DPO with an NLL weight does exactly this).

The contract is Liger's: ``_input`` / ``target`` stack the chosen half over the rejected half; a
sequence's log-prob is the sum (or, with ``average_log_prob``, the mean) of its non-ignored tokens'
log-probs; the loss is ``alpha * NLL(chosen) + preference_loss``, the NLL summed over the chosen
tokens and divided by their count over the whole batch (``nll_target`` when given); forward returns
``(loss, (chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss, *aux))``,
0-dim aux summed over chunks and the others concatenated; ``backward`` returns ``(d_input, d_weight,
None, d_bias, None, None, None, None)``, None for what does not require a gradient.

The built-in DPO, ORPO, CPO, SimPO and KTO losses run in C++ (liger_cpp.chunked_loss.losses); a
user's Python loss cannot, so this loop is Python. It differentiates only the chunk's logits (one
``torch.autograd.grad``) and forms dX, dW and dB itself, dW accumulated in place by one GEMM a chunk,
so no weight-sized temporary exists per chunk (Liger's ``torch.func.grad_and_value`` makes one).
``compiled`` is accepted and ignored. The NLL divides by at least one valid token (Liger divides by
zero when every chosen token is ignored). ``backward`` never compares ``grad_output`` with 1 on the
host.
"""

import torch
import torch.nn.functional as F

from liger_cpp.chunked_loss._chunk_loop import HeadGrads, OutputSums, log_softmax32, sequence_logps


class LigerFusedLinearPreferenceBase(torch.autograd.Function):
    @staticmethod
    def preference_loss_fn(*args, **kwargs):
        """The chunk's preference loss from its sequences' log-probs; subclasses implement it."""
        raise NotImplementedError("Preference loss function must be implemented.")

    @staticmethod
    def chunk_forward(
        input_chunk,
        weight,
        target_chunk,
        bias=None,
        ignore_index=-100,
        compute_nll_loss=True,
        chosen_nll_target_chunk=None,
        average_log_prob=True,
    ):
        """(chosen_logps, rejected_logps, chosen_logits, rejected_logits, the chosen half's summed NLL
        or 0.0) of a chunk stacking its chosen sequences over its rejected ones."""
        logits = F.linear(input_chunk, weight, bias)
        return _from_logits(
            logits, target_chunk, ignore_index, compute_nll_loss, chosen_nll_target_chunk, average_log_prob
        )

    @staticmethod
    def _compute_loss(
        input_chunk,
        weight,
        target_chunk,
        bias=None,
        preference_loss_fn=None,
        full_target=None,
        ignore_index=-100,
        alpha=1.0,
        beta=0.1,
        compute_nll_loss=True,
        use_ref_model=False,
        ref_input_chunk=None,
        ref_weight=None,
        ref_bias=None,
        full_nll_target=None,
        chosen_nll_target_chunk=None,
        average_log_prob=True,
        **loss_kwargs,
    ):
        """A chunk's loss and (chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean,
        nll_loss, *aux) from its inputs."""
        logits = F.linear(input_chunk, weight, bias)
        ref = None
        if use_ref_model:
            ref = _ref_logps(
                ref_input_chunk, ref_weight, ref_bias, target_chunk, ignore_index, average_log_prob
            )
        return _chunk_loss(
            logits,
            target_chunk,
            ref,
            preference_loss_fn,
            full_target,
            _nll_count(full_target, full_nll_target, ignore_index),
            chosen_nll_target_chunk,
            ignore_index,
            alpha,
            beta,
            compute_nll_loss,
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
        bias=None,
        chunk_size=1,
        ignore_index=-100,
        alpha=1.0,
        beta=0.1,
        compute_nll_loss=True,
        nll_target=None,
        compiled=True,
        use_ref_model=False,
        ref_input=None,
        ref_weight=None,
        ref_bias=None,
        average_log_prob=True,
        **loss_kwargs,
    ):
        """The loss of ``cls.preference_loss_fn`` and its outputs; the gradients of ``_input``,
        ``weight`` and ``bias`` (those that require one) are computed here, chunk by chunk."""
        _check(_input, weight, target, bias, chunk_size, use_ref_model, ref_input, ref_weight, nll_target)
        grads = HeadGrads(_input, weight, bias)
        sums = OutputSums(_input)
        w = weight.detach()
        b = bias.detach() if bias is not None else None
        half = target.shape[0] // 2
        chunks = max(1, _input.shape[0] // (2 * chunk_size))  # Liger's chunking: pairs a chunk

        def split(t):
            return torch.chunk(t[:half], chunks), torch.chunk(t[half:], chunks)

        (xc, xr), (tc, tr) = split(_input.detach()), split(target)
        nc = torch.chunk(nll_target[:half], chunks) if nll_target is not None else [None] * len(xc)
        rc, rr = split(ref_input.detach()) if use_ref_model else ([None] * len(xc), [None] * len(xc))
        n_nll = _nll_count(target, nll_target, ignore_index)  # the whole batch's, once
        row = 0
        for x_c, x_r, t_c, t_r, n_c, r_c, r_r in zip(xc, xr, tc, tr, nc, rc, rr):
            c = x_c.shape[0]
            x = torch.cat([x_c, x_r])
            t = torch.cat([t_c, t_r])
            ref = None
            if use_ref_model:
                ref = _ref_logps(
                    torch.cat([r_c, r_r]), ref_weight, ref_bias, t, ignore_index, average_log_prob
                )
            with torch.no_grad():
                logits = F.linear(x, w, b)
            with torch.enable_grad():
                leaf = logits.requires_grad_(True)
                chunk_loss, outs = _chunk_loss(
                    leaf,
                    t,
                    ref,
                    cls.preference_loss_fn,
                    target,
                    n_nll,
                    n_c,
                    ignore_index,
                    alpha,
                    beta,
                    compute_nll_loss,
                    average_log_prob,
                    dict(loss_kwargs),
                )
                # the chunk's chosen rows go to the chosen half, its rejected rows to the rejected half
                grads.add(chunk_loss, leaf, x, w, [slice(row, row + c), slice(half + row, half + row + c)])
            row += c
            sums.add(chunk_loss, outs)
        ctx.save_for_backward(*grads.result())
        return sums.result()

    @staticmethod
    def backward(ctx, *grad_output):
        """Called as Liger's subclasses do, ``backward(ctx, grad_output)`` with the subclass's tuple
        of output gradients: (d_input, d_weight, None, d_bias, None, None, None, None)."""
        g = grad_output[0][0]
        grad_input, grad_weight, grad_bias = (t * g if t is not None else None for t in ctx.saved_tensors)
        return grad_input, grad_weight, None, grad_bias, None, None, None, None


def _from_logits(logits, target, ignore_index, compute_nll_loss, chosen_nll_target, average_log_prob):
    c = target.shape[0] // 2
    logp = log_softmax32(logits)
    nll = 0.0
    if compute_nll_loss:
        labels = chosen_nll_target if chosen_nll_target is not None else target[:c]
        nll = F.nll_loss(
            logp[:c].reshape(-1, logp.shape[-1]),
            labels.reshape(-1),
            reduction="sum",
            ignore_index=ignore_index,
        )
    seq = sequence_logps(logp, target, ignore_index, average_log_prob)
    return seq[:c], seq[c:], logits[:c], logits[c:], nll


def _ref_logps(ref_input, ref_weight, ref_bias, target, ignore_index, average_log_prob):
    with torch.no_grad():
        out = _from_logits(
            F.linear(ref_input, ref_weight, ref_bias), target, ignore_index, False, None, average_log_prob
        )
    return out[0], out[1]


def _nll_count(full_target, full_nll_target, ignore_index):
    """The chosen half's non-ignored NLL targets over the whole batch (at least 1)."""
    t = full_nll_target if full_nll_target is not None else full_target
    return (t[: t.shape[0] // 2] != ignore_index).sum().clamp_min(1)


def _chunk_loss(
    logits,
    target,
    ref,
    preference_loss_fn,
    full_target,
    n_nll,
    chosen_nll_target,
    ignore_index,
    alpha,
    beta,
    compute_nll_loss,
    average_log_prob,
    loss_kwargs,
):
    chosen, rejected, chosen_logits, rejected_logits, nll = _from_logits(
        logits, target, ignore_index, compute_nll_loss, chosen_nll_target, average_log_prob
    )
    nll = nll / n_nll
    denom = full_target.shape[0] // 2 * logits.shape[1] * logits.shape[-1]
    chosen_mean, rejected_mean = chosen_logits.sum() / denom, rejected_logits.sum() / denom
    if ref is not None:
        loss_kwargs["ref_chosen_logps"], loss_kwargs["ref_rejected_logps"] = ref
    out = preference_loss_fn(chosen, rejected, full_target, beta=beta, **loss_kwargs)
    pref, aux = (out[0], list(out[1:])) if isinstance(out, tuple) else (out, [])
    return alpha * nll + pref, (chosen, rejected, chosen_mean, rejected_mean, nll, *aux)


def _check(_input, weight, target, bias, chunk_size, use_ref_model, ref_input, ref_weight, nll_target):
    def fail(msg):
        raise ValueError(f"LigerFusedLinearPreferenceBase: {msg}")

    if _input.dim() != 3 or target.dim() != 2 or _input.shape[:2] != target.shape:
        fail(
            f"_input must be [2B, T, H] and target [2B, T], got {tuple(_input.shape)} and "
            f"{tuple(target.shape)}"
        )
    if target.shape[0] % 2:
        fail(f"the batch stacks chosen over rejected sequences, so it must be even, got {target.shape[0]}")
    if weight.dim() != 2 or weight.shape[1] != _input.shape[-1]:
        fail(f"weight must be [V, {_input.shape[-1]}], got {tuple(weight.shape)}")
    if bias is not None and bias.shape != (weight.shape[0],):
        fail(f"bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        fail(f"chunk_size must be a positive int, got {chunk_size!r}")
    if nll_target is not None and nll_target.shape != target.shape:
        fail(f"nll_target must have target's shape {tuple(target.shape)}, got {tuple(nll_target.shape)}")
    if use_ref_model and (ref_input is None or ref_weight is None):
        fail("use_ref_model=True needs ref_input and ref_weight")
    if use_ref_model and ref_input.shape[:2] != target.shape:
        fail(f"ref_input must be [2B, T, H_ref] with target's [2B, T], got {tuple(ref_input.shape)}")
