"""LigerFusedLinearPPOBase: Liger's extension point for a policy-gradient loss of one's own (GRPO-like),
fused with the lm_head.

A subclass supplies ``ppo_loss_fn(per_token_logps=, attention_mask=, advantages=,
full_attention_mask=, ref_per_token_logps=, old_per_token_logps=, epsilon_low=, epsilon_high=, beta=,
loss_type=, max_completion_length=, importance_sampling_level=, sapo_temperature_pos=,
sapo_temperature_neg=, vllm_is_ratio=, delta=, use_bias_correction_kl=, vespo_k_pos=,
vespo_lambda_pos=, vespo_k_neg=, vespo_lambda_neg=, num_items_in_batch=)`` returning ``(chunk_loss,
chunk_metrics)`` for a chunk of ``chunk_size`` sequences, and calls ``LigerFusedLinearPPOBase.forward
(cls, ctx, ...)`` / ``.backward(ctx, grad_output)`` from its own Function, as with Liger-Kernel 0.8.
``forward`` returns ``(loss, metrics)``: the chunks' losses summed, 0-dim metrics summed and the
others concatenated. ``chunk_forward(input_chunk, weight, selected_token_ids, bias, temperature)``
gives differentiable float32 per-token log-probs without the logits, and
``_compute_dapo_normalizer`` the dapo / cispo / vespo divisor, both as in Liger.

How it runs: the per-token log-probs of the whole batch come from liger_cpp's C++ op
(``fused_linear_token_logprobs``: chunked, exact, never the (tokens x V) logits) in one call, the
reference model's likewise without gradient; the user's loss runs per chunk on slices of them, and
only its gradient with respect to those [B, T] log-probs is taken (one ``autograd.grad`` a chunk on a
few KB). The op's backward then runs once for the whole batch with that gradient: dX, dW and dB in
one pass, no weight-sized gradient per chunk (Liger computes one per chunk and adds them). The
losses, metrics and gradients are Liger's, the chunking only deciding what each ``ppo_loss_fn`` call
sees. ``compiled`` is accepted and ignored. ``backward`` never compares ``grad_output`` with 1 on the
host.
"""

import warnings

import torch
from torch import Tensor

from liger_cpp.chunked_loss._chunk_loop import OutputSums
from liger_cpp.ops.fused_linear_grpo import dapo_normalizer
from liger_cpp.ops.fused_linear_logprobs import fused_linear_token_logprobs


class LigerFusedLinearPPOBase(torch.autograd.Function):
    @staticmethod
    def ppo_loss_fn(*args, **kwargs):
        """A chunk's (loss, metrics) from its per-token log-probs; subclasses implement it."""
        raise NotImplementedError("PPO loss function must be implemented.")

    @staticmethod
    def chunk_forward(input_chunk, weight, selected_token_ids, bias=None, temperature=1.0):
        """log_softmax((input @ weight.T + bias) / temperature) at the selected tokens, float32
        [B, T], differentiable w.r.t. input, weight and bias (liger_cpp's C++ op)."""
        return fused_linear_token_logprobs(input_chunk, weight, selected_token_ids, bias, temperature)

    @staticmethod
    def _compute_dapo_normalizer(attention_mask, num_items_in_batch=None):
        """num_items_in_batch / world size when given, else the mask's token count summed over the
        process group / world size; at least 1 (float32 scalar)."""
        n = dapo_normalizer(attention_mask, num_items_in_batch)
        return n if n is not None else attention_mask.to(torch.float32).sum().clamp(min=1.0)

    @staticmethod
    def _compute_loss_from_logps(
        per_token_logps,
        attention_mask_chunk,
        advantages_chunk,
        ref_per_token_logps_chunk=None,
        old_per_token_logps_chunk=None,
        vllm_is_ratio_chunk=None,
        full_attention_mask=None,
        epsilon_low=0.2,
        epsilon_high=0.2,
        beta=0.04,
        loss_type="dapo",
        max_completion_length=None,
        importance_sampling_level="token",
        ppo_loss_fn=None,
        sapo_temperature_pos=1.0,
        sapo_temperature_neg=1.05,
        delta=None,
        use_bias_correction_kl=False,
        vespo_k_pos=2.0,
        vespo_lambda_pos=3.0,
        vespo_k_neg=3.0,
        vespo_lambda_neg=2.0,
        num_items_in_batch=None,
    ):
        """``ppo_loss_fn`` on a chunk's log-probs, the reference and old log-probs as float32."""
        return ppo_loss_fn(
            per_token_logps=per_token_logps,
            attention_mask=attention_mask_chunk,
            advantages=advantages_chunk,
            full_attention_mask=full_attention_mask,
            ref_per_token_logps=ref_per_token_logps_chunk.float()
            if ref_per_token_logps_chunk is not None
            else None,
            old_per_token_logps=old_per_token_logps_chunk.float()
            if old_per_token_logps_chunk is not None
            else None,
            epsilon_low=epsilon_low,
            epsilon_high=epsilon_high,
            beta=beta,
            loss_type=loss_type,
            max_completion_length=max_completion_length,
            importance_sampling_level=importance_sampling_level,
            sapo_temperature_pos=sapo_temperature_pos,
            sapo_temperature_neg=sapo_temperature_neg,
            vllm_is_ratio=vllm_is_ratio_chunk,
            delta=delta,
            use_bias_correction_kl=use_bias_correction_kl,
            vespo_k_pos=vespo_k_pos,
            vespo_lambda_pos=vespo_lambda_pos,
            vespo_k_neg=vespo_k_neg,
            vespo_lambda_neg=vespo_lambda_neg,
            num_items_in_batch=num_items_in_batch,
        )

    @staticmethod
    def forward(
        cls,
        ctx,
        _input,
        weight,
        selected_token_ids,
        attention_mask,
        advantages,
        bias=None,
        ref_per_token_logps=None,
        old_per_token_logps=None,
        ref_input=None,
        ref_weight=None,
        ref_bias=None,
        epsilon_low=0.2,
        epsilon_high=0.2,
        beta=0.04,
        loss_type="dapo",
        max_completion_length=None,
        importance_sampling_level="token",
        temperature=1.0,
        compiled=True,
        use_ref_model=False,
        chunk_size=1,
        sapo_temperature_pos=1.0,
        sapo_temperature_neg=1.05,
        vllm_is_ratio=None,
        delta=None,
        use_bias_correction_kl=False,
        vespo_k_pos=2.0,
        vespo_lambda_pos=3.0,
        vespo_k_neg=3.0,
        vespo_lambda_neg=2.0,
        num_items_in_batch=None,
    ):
        """The summed chunk losses of ``cls.ppo_loss_fn`` and its metrics; the input's, weight's and
        bias's gradients are computed here and kept on ``ctx``."""
        vllm_is_ratio = _check(
            _input,
            weight,
            selected_token_ids,
            attention_mask,
            advantages,
            bias,
            chunk_size,
            use_ref_model,
            ref_per_token_logps,
            ref_input,
            ref_weight,
            loss_type,
            max_completion_length,
            vllm_is_ratio,
        )
        want_w = weight.requires_grad
        want_b = bias is not None and bias.requires_grad
        kw = dict(
            full_attention_mask=attention_mask,
            epsilon_low=epsilon_low,
            epsilon_high=epsilon_high,
            beta=beta,
            loss_type=loss_type,
            max_completion_length=max_completion_length,
            importance_sampling_level=importance_sampling_level,
            ppo_loss_fn=cls.ppo_loss_fn,
            sapo_temperature_pos=sapo_temperature_pos,
            sapo_temperature_neg=sapo_temperature_neg,
            delta=delta,
            use_bias_correction_kl=use_bias_correction_kl,
            vespo_k_pos=vespo_k_pos,
            vespo_lambda_pos=vespo_lambda_pos,
            vespo_k_neg=vespo_k_neg,
            vespo_lambda_neg=vespo_lambda_neg,
            num_items_in_batch=num_items_in_batch,
        )
        if use_ref_model and ref_per_token_logps is None:
            with torch.no_grad():
                ref_per_token_logps = LigerFusedLinearPPOBase.chunk_forward(
                    ref_input, ref_weight, selected_token_ids, ref_bias, temperature
                )
        elif not use_ref_model:
            ref_per_token_logps = None  # Liger passes none to the loss without a reference model

        with torch.enable_grad():
            x = _input.detach().requires_grad_(True)  # Liger always returns the input's gradient
            w = weight.detach().requires_grad_(want_w)
            b = bias.detach().requires_grad_(want_b) if bias is not None else None
            logps = LigerFusedLinearPPOBase.chunk_forward(x, w, selected_token_ids, b, temperature)
            lp = logps.detach().requires_grad_(True)

            n = max(1, _input.shape[0] // chunk_size)  # Liger's chunking: sequences a chunk
            rows = [c.shape[0] for c in torch.chunk(lp, n)]
            sums = OutputSums(lp)  # float32 loss and metrics, as Liger's
            total, start = None, 0
            for r in rows:
                s = slice(start, start + r)
                start += r
                chunk_loss, chunk_metrics = LigerFusedLinearPPOBase._compute_loss_from_logps(
                    lp[s],
                    attention_mask[s],
                    advantages[s],
                    ref_per_token_logps_chunk=ref_per_token_logps[s]
                    if ref_per_token_logps is not None
                    else None,
                    old_per_token_logps_chunk=old_per_token_logps[s]
                    if old_per_token_logps is not None
                    else None,
                    vllm_is_ratio_chunk=vllm_is_ratio[s] if vllm_is_ratio is not None else None,
                    **kw,
                )
                total = chunk_loss if total is None else total + chunk_loss
                sums.add(chunk_loss, chunk_metrics)
            dlp = torch.autograd.grad(total, lp) if total.requires_grad else (torch.zeros_like(lp),)
            targets = [x] + ([w] if want_w else []) + ([b] if want_b else [])
            grads = list(torch.autograd.grad(logps, targets, grad_outputs=dlp))
        grad_input = grads.pop(0)
        grad_weight = grads.pop(0) if want_w else None
        grad_bias = grads.pop(0) if want_b else None
        ctx.save_for_backward(grad_input, grad_weight, grad_bias)
        return sums.result()

    @staticmethod
    def backward(ctx, grad_output, *grad_metrics):
        """Liger's 27 gradients: the input's, the weight's, three None, the bias's, 21 None."""
        grad_input, grad_weight, grad_bias = ctx.saved_tensors
        grad_input = grad_input * grad_output
        grad_weight = grad_weight * grad_output if grad_weight is not None else None
        grad_bias = grad_bias * grad_output if grad_bias is not None else None
        return (grad_input, grad_weight, None, None, None, grad_bias) + (None,) * 21


def _check(
    _input: Tensor,
    weight,
    ids,
    mask,
    advantages,
    bias,
    chunk_size,
    use_ref_model,
    ref_per_token_logps,
    ref_input,
    ref_weight,
    loss_type,
    max_completion_length,
    vllm_is_ratio,
):
    def fail(msg):
        raise ValueError(f"LigerFusedLinearPPOBase: {msg}")

    if _input.dim() != 3 or ids.shape != _input.shape[:2] or mask.shape != ids.shape:
        fail(
            f"_input must be [B, T, H], selected_token_ids and attention_mask [B, T], got "
            f"{tuple(_input.shape)}, {tuple(ids.shape)} and {tuple(mask.shape)}"
        )
    B, T = ids.shape
    if advantages.shape[0] != B:
        fail(f"advantages must have one row per sequence ({B}), got {tuple(advantages.shape)}")
    if weight.dim() != 2 or weight.shape[1] != _input.shape[-1]:
        fail(f"weight must be [V, {_input.shape[-1]}], got {tuple(weight.shape)}")
    if bias is not None and bias.shape != (weight.shape[0],):
        fail(f"bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        fail(f"chunk_size must be a positive int, got {chunk_size!r}")
    if use_ref_model:
        if ref_per_token_logps is None and (ref_input is None or ref_weight is None):
            fail("use_ref_model=True needs ref_per_token_logps, or ref_input and ref_weight")
        if ref_per_token_logps is not None and ref_input is not None:
            warnings.warn(
                "Both ref_per_token_logps and ref_input are provided. Using ref_per_token_logps.",
                stacklevel=3,
            )
    if loss_type == "dr_grpo" and max_completion_length is None:
        fail("loss_type 'dr_grpo' needs max_completion_length")
    if vllm_is_ratio is not None:
        if vllm_is_ratio.dim() == 1 and vllm_is_ratio.shape[0] == B:
            return vllm_is_ratio.unsqueeze(-1)
        if vllm_is_ratio.dim() != 2 or vllm_is_ratio.shape[0] != B or vllm_is_ratio.shape[1] not in (1, T):
            fail(f"vllm_is_ratio must be ({B},), ({B}, 1) or ({B}, {T}), got {tuple(vllm_is_ratio.shape)}")
    return vllm_is_ratio
