"""Fused MoE experts: fake kernels for torch.ops.liger.moe_experts_{fwd,bwd} (the autograd is in C++,
csrc/aten/autograd/moe_experts_autograd.cpp) and `moe_experts`, the functional entry point
(transformers 5.x's stacked experts: every routed token through gate_up, the gated activation and
down, weighted by its router weight and summed over its k experts; csrc/schema.cpp states the math)."""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device

_ACTIVATIONS = ("silu", "gelu_tanh", "gpt_oss")
_fwd = torch.ops.liger.moe_experts_fwd.default


def _check(hidden, top_k_index, top_k_weights, gate_up_proj, down_proj, transposed):
    torch._check(hidden.dim() == 2, lambda: "liger_cpp: argument 'hidden': expected [T, H]")
    torch._check(
        top_k_index.dtype in (torch.int32, torch.int64),
        lambda: "liger_cpp: argument 'top_k_index': expected int64 or int32",
    )
    torch._check(
        top_k_weights.shape == top_k_index.shape,
        lambda: "liger_cpp: argument 'top_k_weights': expected top_k_index's shape",
    )
    torch._check(gate_up_proj.dim() == 3, lambda: "liger_cpp: argument 'gate_up_proj': expected 3-D")
    torch._check(down_proj.dim() == 3, lambda: "liger_cpp: argument 'down_proj': expected 3-D")
    return gate_up_proj.shape[2 if transposed else 1] // 2


@torch.library.register_fake("liger::moe_experts_fwd")
def _moe_experts_fwd_fake(
    hidden,
    top_k_index,
    top_k_weights,
    gate_up_proj,
    down_proj,
    gate_up_bias=None,
    down_bias=None,
    activation="silu",
    transposed=False,
    interleaved=False,
    alpha=1.702,
    limit=7.0,
):
    inter = _check(hidden, top_k_index, top_k_weights, gate_up_proj, down_proj, transposed)
    s = top_k_index.shape[0] * top_k_index.shape[1]
    i32 = dict(dtype=torch.int32, device=hidden.device)
    return (
        hidden.new_empty(hidden.shape),
        hidden.new_empty((s, 2 * inter)),
        torch.empty((gate_up_proj.shape[0],), **i32),
        torch.empty((s,), **i32),
        torch.empty((s,), **i32),
        torch.empty((s,), **i32),
    )


@torch.library.register_fake("liger::moe_experts_bwd")
def _moe_experts_bwd_fake(
    grad_out,
    hidden,
    top_k_weights,
    gate_up_proj,
    down_proj,
    gate_up_bias,
    down_bias,
    gate_up,
    offsets,
    sorted_slot,
    slot_row,
    sorted_expert,
    activation="silu",
    transposed=False,
    interleaved=False,
    alpha=1.702,
    limit=7.0,
    compute_d_hidden=True,
    compute_d_experts=True,
):
    torch._check(
        grad_out.shape == hidden.shape, lambda: "liger_cpp: argument 'grad_out': expected hidden's shape"
    )

    def grad(t, wanted):
        return hidden.new_empty(t.shape if t is not None and wanted else (0,))

    return (
        grad(hidden, compute_d_hidden),
        top_k_weights.new_empty(top_k_weights.shape),
        grad(gate_up_proj, compute_d_experts),
        grad(down_proj, compute_d_experts),
        grad(gate_up_bias, compute_d_experts),
        grad(down_bias, compute_d_experts),
    )


def moe_experts(
    hidden: Tensor,
    top_k_index: Tensor,
    top_k_weights: Tensor,
    gate_up_proj: Tensor,
    down_proj: Tensor,
    gate_up_bias: Optional[Tensor] = None,
    down_bias: Optional[Tensor] = None,
    activation: str = "silu",
    transposed: bool = False,
    interleaved: bool = False,
    alpha: float = 1.702,
    limit: float = 7.0,
) -> Tensor:
    """sum_j top_k_weights[t, j] * down_e(act(gate_up_e(hidden[t]))) for every token t (e its j-th
    expert), with gradients for hidden, top_k_weights, the projections and the biases.

    hidden: [..., H]; top_k_index, top_k_weights: [..., k] (same leading shape); gate_up_proj
    [E, 2I, H] and down_proj [E, H, I] (HF's Qwen3MoeExperts / MixtralExperts layout), or
    [E, H, 2I] / [E, I, H] with transposed=True (GPT-OSS); optional biases [E, 2I] / [E, H].
    activation: "silu" (SwiGLU), "gelu_tanh" (GeGLU) or "gpt_oss" (clamped by `limit`,
    sigmoid(alpha g), (up + 1)); interleaved: gate / up alternate along 2I (GPT-OSS)."""
    check_device(hidden, "hidden")
    if activation not in _ACTIVATIONS:
        raise ValueError(
            f"liger_cpp: argument 'activation': expected one of {_ACTIVATIONS}, got {activation!r}"
        )
    if hidden.dim() == 2:  # no view nodes around the op's own
        return _fwd(
            hidden,
            top_k_index,
            top_k_weights,
            gate_up_proj,
            down_proj,
            gate_up_bias,
            down_bias,
            activation,
            transposed,
            interleaved,
            alpha,
            limit,
        )[0]
    shape = hidden.shape
    h = hidden.reshape(-1, shape[-1])
    idx = top_k_index.reshape(h.shape[0], top_k_index.shape[-1])
    w = top_k_weights.reshape(h.shape[0], top_k_weights.shape[-1])
    out = _fwd(
        h,
        idx,
        w,
        gate_up_proj,
        down_proj,
        gate_up_bias,
        down_bias,
        activation,
        transposed,
        interleaved,
        alpha,
        limit,
    )[0]
    return out.view(shape)
