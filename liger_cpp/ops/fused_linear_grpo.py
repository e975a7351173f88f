"""GRPO and its variants fused with the lm_head: the fake kernel of torch.ops.liger.fused_linear_grpo_fwd
and `fused_linear_grpo` (the engine of liger_cpp.chunked_loss.LigerFusedLinearGRPOLoss).

The op is C++ end to end (csrc/aten/composite/fused_linear_grpo.cpp states the formulas): per chunk
the lm_head GEMM, the softmax statistics, the loss's derivative, dlogits and the dX / dW / dB GEMMs,
the reference model (when given as hidden states and a head) run in the same loop without gradient.
Its autograd is C++ too (csrc/aten/autograd/fused_linear_grpo_autograd.cpp): the forward computes the
gradients, the backward scales them by grad_output and hands them out. Nothing is compiled at run time.
"""

import warnings
from typing import Optional, Union

import torch
from torch import Tensor

from liger_cpp.ops._common import check_device, head_grads_fake
from liger_cpp.ops.fused_linear_preference import _autocast_cast

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
_DAPO_NORMALIZED = ("dapo", "cispo", "vespo")


def check_loss_type(loss_type: str) -> None:
    """The loss_type check of the functional and of LigerFusedLinearGRPOLoss's constructor."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"liger_cpp: argument 'loss_type': expected one of {LOSS_TYPES}, got {loss_type!r}")


def check_level(loss_type: str, importance_sampling_level: str) -> None:
    """Liger's ValueErrors for the importance sampling level (GRPO fused and on logits)."""
    if importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(
            "liger_cpp: argument 'importance_sampling_level': expected 'token' or 'sequence', got "
            f"{importance_sampling_level!r}"
        )
    if importance_sampling_level == "sequence" and loss_type in ("cispo", "sapo", "vespo"):
        raise ValueError(
            f"liger_cpp: sequence-level importance sampling is not supported for loss_type={loss_type!r} "
            "(Liger's rule); use importance_sampling_level='token'"
        )


def option_args(beta, eps_low, eps_high, delta, temperature, max_completion_length, use_bias_correction_kl,
                sapo_pos, sapo_neg, vk_pos, vl_pos, vk_neg, vl_neg) -> tuple:  # fmt: skip
    """The GRPO ops' scalar options from beta to vespo_lambda_neg, as the schema types them."""
    return (
        float(beta),
        float(eps_low),
        float(eps_high),
        None if delta is None else float(delta),
        float(temperature),
        None if max_completion_length is None else int(max_completion_length),
        bool(use_bias_correction_kl),
        float(sapo_pos),
        float(sapo_neg),
        float(vk_pos),
        float(vl_pos),
        float(vk_neg),
        float(vl_neg),
    )


@torch.library.register_fake("liger::fused_linear_grpo_fwd")
def _fwd_fake(
    input,
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
    vllm_is_ratio=None,
    loss_normalizer=None,
    loss_type="dapo",
    importance_sampling_level="token",
    beta=0.04,
    epsilon_low=0.2,
    epsilon_high=0.2,
    delta=None,
    temperature=1.0,
    max_completion_length=None,
    use_bias_correction_kl=False,
    sapo_temperature_pos=1.0,
    sapo_temperature_neg=1.05,
    vespo_k_pos=2.0,
    vespo_lambda_pos=3.0,
    vespo_k_neg=3.0,
    vespo_lambda_neg=2.0,
    chunk_rows=0,
    compute_dx=False,
    compute_dw=False,
    compute_db=False,
):
    torch._check(input.dim() == 3, lambda: "liger_cpp: argument '_input': expected shape (B, T, H)")
    torch._check(
        weight.dim() == 2 and weight.shape[1] == input.shape[2],
        lambda: "liger_cpp: argument 'weight': expected shape (V, H)",
    )
    torch._check(
        selected_token_ids.shape == input.shape[:2],
        lambda: "liger_cpp: argument 'selected_token_ids': expected shape (B, T)",
    )
    torch._check(loss_type in LOSS_TYPES, lambda: "liger_cpp: argument 'loss_type': unknown loss type")
    f32 = torch.float32
    scalar = input.new_empty((), dtype=f32)
    dx, dw, db = head_grads_fake(input, weight, bias, compute_dx, compute_dw, compute_db)
    logps = input.new_empty(input.shape[:2], dtype=f32)
    return scalar, scalar.clone(), scalar.clone(), logps, dx, dw, db


def dapo_normalizer(attention_mask: Tensor, num_items_in_batch=None) -> Optional[Tensor]:
    """The dapo / cispo / vespo loss divisor as Liger computes it: num_items_in_batch / world size when
    given, else the token count all-reduced over the process group / world size (both at least 1).
    None in a single process without num_items_in_batch (the op then uses max(sum(mask), 1) itself)."""
    dist = torch.distributed
    distributed = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size() if distributed else 1
    if num_items_in_batch is not None:
        if isinstance(num_items_in_batch, Tensor):
            n = num_items_in_batch.to(device=attention_mask.device, dtype=torch.float32)
        else:
            n = torch.tensor(float(num_items_in_batch), device=attention_mask.device, dtype=torch.float32)
        return (n / world).clamp(min=1.0).reshape(())
    if not distributed:
        return None
    n = attention_mask.to(torch.float32).sum()
    dist.all_reduce(n, op=dist.ReduceOp.SUM)
    return (n / world).clamp(min=1.0)


def fused_linear_grpo(
    input: Tensor,
    weight: Tensor,
    selected_token_ids: Tensor,
    attention_mask: Tensor,
    advantages: Tensor,
    bias: Optional[Tensor] = None,
    ref_per_token_logps: Optional[Tensor] = None,
    old_per_token_logps: Optional[Tensor] = None,
    ref_input: Optional[Tensor] = None,
    ref_weight: Optional[Tensor] = None,
    ref_bias: Optional[Tensor] = None,
    vllm_is_ratio: Optional[Tensor] = None,
    num_items_in_batch: Optional[Union[int, float, Tensor]] = None,
    *,
    beta: float = 0.04,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    loss_type: str = "dapo",
    max_completion_length: Optional[int] = None,
    importance_sampling_level: str = "token",
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    temperature: float = 1.0,
    delta: Optional[float] = None,
    use_bias_correction_kl: bool = False,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
    use_ref_model: bool = True,
    chunk_rows: int = 0,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """GRPO-family loss of the policy `input @ weight.T + bias` (input (B, T, H)) on the completions
    `selected_token_ids` (B, T), with Liger's LigerFusedLinearGRPOLoss semantics.

    Returns (loss, kl, clip_ratio, per_token_logps): float32 scalars (kl is 0 when beta is 0) and the
    policy's (B, T) log-probabilities at `temperature` (without history). Only `loss` has a gradient
    (to input, weight and bias). The reference log-probs come from ref_per_token_logps, or from the
    reference head (ref_input, ref_weight, ref_bias) run chunk by chunk without gradient, when
    use_ref_model; otherwise the KL term is 0.
    """
    check_device(input, "_input")
    check_loss_type(loss_type)
    check_level(loss_type, importance_sampling_level)
    if loss_type == "dr_grpo" and max_completion_length is None:
        raise ValueError("liger_cpp: argument 'max_completion_length': required for loss_type 'dr_grpo'")
    if use_ref_model:
        if ref_per_token_logps is None and ref_input is None:
            raise ValueError(
                "liger_cpp: use_ref_model=True needs ref_per_token_logps or the reference model's "
                "(ref_input, ref_weight, ref_bias)"
            )
        if ref_per_token_logps is not None and ref_input is not None:
            warnings.warn(
                "liger_cpp: both ref_per_token_logps and ref_input are given; using ref_per_token_logps",
                stacklevel=2,
            )
            ref_input = ref_weight = ref_bias = None
        if ref_input is not None and ref_weight is None:
            raise ValueError(
                "liger_cpp: argument 'ref_weight': required with ref_input (the reference model)"
            )
    else:
        ref_per_token_logps = ref_input = ref_weight = ref_bias = None
    normalizer = (
        dapo_normalizer(attention_mask, num_items_in_batch) if loss_type in _DAPO_NORMALIZED else None
    )
    input, weight, bias, ref_input, ref_weight, ref_bias = _autocast_cast(
        input, weight, bias, ref_input, ref_weight, ref_bias
    )
    detach = [None if t is None else t.detach() for t in (ref_per_token_logps, old_per_token_logps)]
    # The reference model gets no gradient (no edge of the op's autograd node); not detached, so that
    # a second backward (retain_graph) can rerun the op from these same tensors.
    refs = (ref_input, ref_weight, ref_bias)
    grad = torch.is_grad_enabled()
    out = torch.ops.liger.fused_linear_grpo_fwd(
        input,
        weight,
        selected_token_ids,
        attention_mask,
        advantages.detach(),
        bias,
        *detach,
        *refs,
        None if vllm_is_ratio is None else vllm_is_ratio.detach(),
        normalizer,
        loss_type,
        importance_sampling_level,
        *option_args(
            beta,
            epsilon_low,
            epsilon_high,
            delta,
            temperature,
            max_completion_length,
            use_bias_correction_kl,
            sapo_temperature_pos,
            sapo_temperature_neg,
            vespo_k_pos,
            vespo_lambda_pos,
            vespo_k_neg,
            vespo_lambda_neg,
        ),
        int(chunk_rows),
        grad and input.requires_grad,
        grad and weight.requires_grad,
        grad and bias is not None and bias.requires_grad,
    )
    return out[0], out[1], out[2], out[3]
