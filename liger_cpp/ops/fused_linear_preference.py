"""Paired preference losses fused with the lm_head: fake kernels for
torch.ops.liger.fused_linear_preference_fwd and fused_linear_kto_fwd (autograd:
csrc/aten/autograd/fused_linear_preference_autograd.cpp), and
`fused_linear_preference` / `fused_linear_kto` (the engines of liger_cpp.chunked_loss's DPO, ORPO, CPO,
SimPO and KTO).

As Liger's chunked losses, the forward computes dX, dW, dB chunk by chunk while each chunk's logits
are at hand (only those autograd will ask for) and the backward scales them by grad_output in place
(on CUDA a unit grad_output is skipped on the device). No torch.compile at run time and no host
synchronisation: every normaliser stays on the device.
"""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device, head_grads_fake

DPO_LOSS_TYPES = (
    "sigmoid",
    "ipo",
    "hinge",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "apo_zero",
    "apo_down",
    "discopop",
)
LOSS_TYPES = DPO_LOSS_TYPES + ("orpo", "cpo", "simpo")


@torch.library.register_fake("liger::fused_linear_preference_fwd")
def _fwd_fake(
    input,
    weight,
    target,
    bias=None,
    ref_input=None,
    ref_weight=None,
    ref_bias=None,
    loss_type="sigmoid",
    ignore_index=-100,
    beta=0.1,
    alpha=1.0,
    compute_nll_loss=False,
    average_log_prob=False,
    label_smoothing=0.0,
    gamma=0.5,
    discopop_tau=0.05,
    chunk_size=1,
    compute_dx=False,
    compute_dw=False,
    compute_db=False,
):
    torch._check(
        target.dim() == 2 and target.shape[0] % 2 == 0,
        lambda: "liger_cpp: argument 'target': expected shape (2B, T)",
    )
    torch._check(
        input.dim() == 3 and input.shape[:2] == target.shape,
        lambda: "liger_cpp: argument 'input': expected shape (2B, T, H)",
    )
    torch._check(
        weight.dim() == 2 and weight.shape[1] == input.shape[2],
        lambda: "liger_cpp: argument 'weight': expected shape (V, H)",
    )
    torch._check(loss_type in LOSS_TYPES, lambda: "liger_cpp: argument 'loss_type': unknown loss type")
    B = target.shape[0] // 2
    f32 = torch.float32
    scalar = input.new_empty((), dtype=f32)
    vec = input.new_empty((B,), dtype=f32)
    extra = input.new_empty((2,) if loss_type == "orpo" else (0,), dtype=f32)
    dx, dw, db = head_grads_fake(input, weight, bias, compute_dx, compute_dw, compute_db)
    return (
        scalar,
        vec,
        vec.clone(),
        scalar.clone(),
        scalar.clone(),
        scalar.clone(),
        vec.clone(),
        vec.clone(),
        extra,
        dx,
        dw,
        db,
    )


# Autograd: csrc/aten/autograd/fused_linear_preference_autograd.cpp (C++, the Autograd dispatch key).
_fwd = torch.ops.liger.fused_linear_preference_fwd.default
_kto_fwd = torch.ops.liger.fused_linear_kto_fwd.default


def _autocast_cast(input: Tensor, *tensors):
    """Under autocast, the GEMMs' precision: input, weight, bias and the reference model's tensors cast
    to the autocast dtype (as F.linear would run; the C++ op excludes autocast itself)."""
    dev = input.device.type
    if dev in ("cpu", "cuda") and torch.is_autocast_enabled(dev):
        dt = torch.get_autocast_dtype(dev)
        return tuple(t.to(dt) if t is not None else None for t in (input, *tensors))
    return (input, *tensors)


def fused_linear_preference(
    input: Tensor,
    weight: Tensor,
    target: Tensor,
    bias: Optional[Tensor] = None,
    ref_input: Optional[Tensor] = None,
    ref_weight: Optional[Tensor] = None,
    ref_bias: Optional[Tensor] = None,
    loss_type: str = "sigmoid",
    ignore_index: int = -100,
    beta: float = 0.1,
    alpha: float = 1.0,
    compute_nll_loss: bool = False,
    average_log_prob: bool = False,
    label_smoothing: float = 0.0,
    gamma: float = 0.5,
    discopop_tau: float = 0.05,
    chunk_size: int = 1,
) -> tuple[Tensor, ...]:
    """A paired preference loss of `input @ weight.T + bias` against `target`, chunked over pairs.

    input (2B, T, H) holds the chosen sequences stacked over the rejected ones, target (2B, T).
    Returns (loss, chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss,
    chosen_rewards, rejected_rewards, extra) as float32; extra is ORPO's (log_odds_ratio,
    log_odds_chosen), else empty. Only `loss` has a gradient (to input, weight and bias).
    """
    check_device(input, "input")
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"liger_cpp: argument 'loss_type': expected one of {LOSS_TYPES}, got {loss_type!r}")
    if ref_weight is not None and ref_input is None:
        raise ValueError("liger_cpp: argument 'ref_input': required with ref_weight (the reference model)")
    input, weight, bias, ref_input, ref_weight, ref_bias = _autocast_cast(
        input, weight, bias, ref_input, ref_weight, ref_bias
    )
    grad = torch.is_grad_enabled()
    compute_dx = grad and input.requires_grad
    compute_dw = grad and weight.requires_grad
    compute_db = grad and bias is not None and bias.requires_grad
    if ref_input is not None:
        ref_input = ref_input.detach()
    if ref_weight is not None:
        ref_weight = ref_weight.detach()
    if ref_bias is not None:
        ref_bias = ref_bias.detach()
    out = _fwd(
        input,
        weight,
        target,
        bias,
        ref_input,
        ref_weight,
        ref_bias,
        loss_type,
        int(ignore_index),
        float(beta),
        float(alpha),
        bool(compute_nll_loss),
        bool(average_log_prob),
        float(label_smoothing),
        float(gamma),
        float(discopop_tau),
        int(chunk_size),
        compute_dx,
        compute_dw,
        compute_db,
    )
    return out[:9]


@torch.library.register_fake("liger::fused_linear_kto_fwd")
def _kto_fake(
    input,
    weight,
    target,
    preference_labels,
    bias=None,
    ref_input=None,
    ref_weight=None,
    ref_bias=None,
    kl=None,
    ignore_index=-100,
    beta=0.1,
    average_log_prob=False,
    chunk_size=1,
    compute_dx=False,
    compute_dw=False,
    compute_db=False,
):
    torch._check(target.dim() == 2, lambda: "liger_cpp: argument 'target': expected shape (B, T)")
    torch._check(
        input.dim() == 3 and input.shape[:2] == target.shape,
        lambda: "liger_cpp: argument 'input': expected shape (B, T, H)",
    )
    torch._check(
        weight.dim() == 2 and weight.shape[1] == input.shape[2],
        lambda: "liger_cpp: argument 'weight': expected shape (V, H)",
    )
    scalars = tuple(input.new_empty((), dtype=torch.float32) for _ in range(7))
    dx, dw, db = head_grads_fake(input, weight, bias, compute_dx, compute_dw, compute_db)
    return (*scalars, dx, dw, db)


def fused_linear_kto(
    input: Tensor,
    weight: Tensor,
    target: Tensor,
    preference_labels: Tensor,
    bias: Optional[Tensor] = None,
    ref_input: Optional[Tensor] = None,
    ref_weight: Optional[Tensor] = None,
    ref_bias: Optional[Tensor] = None,
    kl: Optional[Tensor] = None,
    ignore_index: int = -100,
    beta: float = 0.1,
    average_log_prob: bool = False,
    chunk_size: int = 1,
) -> tuple[Tensor, ...]:
    """KTO of `input @ weight.T + bias` (input (B, T, H), target (B, T), preference_labels (B,) bool),
    chunked over sequences. Returns (loss, chosen_logps_sum, rejected_logps_sum, chosen_logits_sum,
    rejected_logits_sum, chosen_rewards_sum, rejected_rewards_sum), float32 scalars; only `loss` has
    a gradient (to input, weight and bias)."""
    check_device(input, "input")
    if ref_weight is not None and ref_input is None:
        raise ValueError("liger_cpp: argument 'ref_input': required with ref_weight (the reference model)")
    input, weight, bias, ref_input, ref_weight, ref_bias = _autocast_cast(
        input, weight, bias, ref_input, ref_weight, ref_bias
    )
    grad = torch.is_grad_enabled()
    detach = [None if t is None else t.detach() for t in (ref_input, ref_weight, ref_bias, kl)]
    out = _kto_fwd(
        input,
        weight,
        target,
        preference_labels,
        bias,
        *detach,
        int(ignore_index),
        float(beta),
        bool(average_log_prob),
        int(chunk_size),
        grad and input.requires_grad,
        grad and weight.requires_grad,
        grad and bias is not None and bias.requires_grad,
    )
    return out[:7]
