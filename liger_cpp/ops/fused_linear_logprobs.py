"""Per-token log-probabilities (and entropy) of given tokens from hidden states, without the logits:
fake kernels of torch.ops.liger.fused_linear_logprobs_fwd / _bwd, `fused_linear_token_logprobs`,
and Liger's LigerFusedLinearScaledCrossEntropyFunction (per-token NLL at a temperature).

What RL frameworks compute for the old and reference log-probs (TRL's selective_log_softmax on
logits): logprobs = log_softmax((x @ W^T + b) / temperature)[y], float32, 0 where y is ignore_index;
entropy of the same distribution. Both are differentiable: the C++ autograd
(csrc/aten/autograd/fused_linear_logprobs_autograd.cpp) reruns the chunk loop in the backward with
both upstream gradients folded into the dlogits.
"""

from typing import Optional, Union

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device, head_grads_fake


@torch.library.register_fake("liger::fused_linear_logprobs_fwd")
def _fwd_fake(
    input, weight, target, bias=None, temperature=1.0, ignore_index=-100, return_entropy=False, chunk_rows=0
):
    torch._check(
        weight.dim() == 2 and weight.shape[1] == input.shape[-1],
        lambda: "liger_cpp: argument 'weight': expected shape (V, H)",
    )
    torch._check(
        target.numel() * input.shape[-1] == input.numel(),
        lambda: "liger_cpp: argument 'target': expected one element per row of input",
    )
    f32 = torch.float32
    logp = input.new_empty(target.shape, dtype=f32)
    entropy = input.new_empty(target.shape if return_entropy else (0,), dtype=f32)
    stats = input.new_empty((target.numel(), 2) if return_entropy else (0,), dtype=f32)
    return logp, entropy, stats


@torch.library.register_fake("liger::fused_linear_logprobs_bwd")
def _bwd_fake(
    grad_logprobs,
    grad_entropy,
    input,
    weight,
    target,
    bias,
    stats,
    entropy,
    temperature=1.0,
    ignore_index=-100,
    chunk_rows=0,
    compute_dx=True,
    compute_dw=True,
    compute_db=True,
):
    return head_grads_fake(input, weight, bias, compute_dx, compute_dw, compute_db)


def fused_linear_token_logprobs(
    input: Tensor,
    weight: Tensor,
    target: Tensor,
    bias: Optional[Tensor] = None,
    temperature: float = 1.0,
    ignore_index: int = -100,
    return_entropy: bool = False,
    chunk_rows: int = 0,
) -> Union[Tensor, tuple[Tensor, Tensor]]:
    """log_softmax((input @ weight.T + bias) / temperature) at `target`, float32 in target's shape
    (input (..., H), target one token id per row; 0 where target is ignore_index), and with
    return_entropy the entropy of each row's distribution (float32, same shape). Differentiable
    w.r.t. input, weight and bias; the (rows x V) logits never exist at once."""
    check_device(input, "input")
    if temperature <= 0:
        raise ValueError(f"liger_cpp: argument 'temperature': expected a positive value, got {temperature}")
    logp, entropy, _ = torch.ops.liger.fused_linear_logprobs_fwd(
        input,
        weight,
        target,
        bias,
        float(temperature),
        int(ignore_index),
        bool(return_entropy),
        int(chunk_rows),
    )
    return (logp, entropy) if return_entropy else logp


class LigerFusedLinearScaledCrossEntropyFunction:
    """Liger's per-token operator: ``apply(_input, weight, target, temperature=1.0, ignore_index=-100,
    m_tiles_per_cluster=1, return_entropy=False)`` -> (nll, entropy): float32 NLL [M] of the logits
    divided by the temperature (0 for ignored rows) and, with return_entropy, the entropy [M] in the
    input's dtype (else None); both differentiable. m_tiles_per_cluster (a CuTe tiling knob) is
    accepted and ignored."""

    @staticmethod
    def apply(
        _input,
        weight,
        target,
        temperature=1.0,
        ignore_index=-100,
        m_tiles_per_cluster=1,
        return_entropy=False,
    ):
        out = fused_linear_token_logprobs(
            _input, weight, target, None, temperature, ignore_index, return_entropy=return_entropy
        )
        if return_entropy:
            logp, entropy = out
            return -logp, entropy.to(_input.dtype)
        return -out, None
