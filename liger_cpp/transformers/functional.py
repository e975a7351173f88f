"""Functional API with Liger-Kernel's names (``liger_kernel.transformers.functional``)."""

from collections.abc import Sequence
from typing import Optional, Union

import torch
from torch import Tensor

from liger_cpp.ops.ce_output import CrossEntropyOutput
from liger_cpp.ops.cross_entropy import cross_entropy as _cross_entropy
from liger_cpp.ops.fused_add_rms_norm import fused_add_rms_norm as _fused_add_rms_norm
from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy as _fused_linear_cross_entropy
from liger_cpp.ops.geglu import geglu as _geglu
from liger_cpp.ops.layer_norm import layer_norm as _layer_norm
from liger_cpp.ops.rms_norm import rms_norm as _rms_norm
from liger_cpp.ops.rope import mrope as _mrope
from liger_cpp.ops.swiglu import swiglu as _swiglu
from liger_cpp.transformers.qwen2vl_mrope import liger_multimodal_rotary_pos_emb  # noqa: F401
from liger_cpp.transformers.rope import liger_rotary_pos_emb


def liger_cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Optional[Tensor] = None,
    size_average: Optional[bool] = None,
    ignore_index: int = -100,
    reduce: Optional[bool] = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: Optional[float] = None,
    return_z_loss: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
    inplace: bool = False,
) -> Union[Tensor, CrossEntropyOutput]:
    """Cross entropy with F.cross_entropy's signature plus Liger's options (see
    ``liger_cpp.ops.cross_entropy``; the class dimension is the last one).

    The deprecated `size_average` / `reduce` are honoured as F.cross_entropy does (they override
    `reduction`, with PyTorch's deprecation warning) rather than ignored as in Liger.
    """
    if size_average is not None or reduce is not None:
        from torch.nn import _reduction

        reduction = _reduction.legacy_get_string(size_average, reduce)
    return _cross_entropy(
        input,
        target,
        weight,
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
        lse_square_scale=lse_square_scale,
        softcap=softcap,
        reduction=reduction,
        return_z_loss=return_z_loss,
        return_token_accuracy=return_token_accuracy,
        return_predicted_tokens=return_predicted_tokens,
        inplace=inplace,
    )


def liger_rms_norm(
    X: Tensor,
    W: Optional[Tensor],
    eps: float,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> Tensor:
    """RMSNorm over the last dimension (see ``liger_cpp.ops.rms_norm``)."""
    return _rms_norm(X, W, eps, offset=offset, casting_mode=casting_mode, in_place=in_place)


def liger_swiglu(a: Tensor, b: Tensor, in_place: bool = False) -> Tensor:
    """silu(a) * b (Liger's LigerSiLUMulFunction; see ``liger_cpp.ops.swiglu``)."""
    return _swiglu(a, b, in_place=in_place)


def liger_geglu(a: Tensor, b: Tensor, approximate: str = "tanh", in_place: bool = False) -> Tensor:
    """gelu(a, approximate) * b (Liger's LigerGELUMulFunction; see ``liger_cpp.ops.geglu``)."""
    return _geglu(a, b, approximate=approximate, in_place=in_place)


def liger_fused_add_rms_norm(
    X: Tensor,
    R: Tensor,
    W: Optional[Tensor],
    eps: float,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> tuple[Tensor, Tensor]:
    """(RMSNorm(X + R), X + R) (see ``liger_cpp.ops.fused_add_rms_norm``)."""
    return _fused_add_rms_norm(X, R, W, eps, offset=offset, casting_mode=casting_mode, in_place=in_place)


def liger_layer_norm(X: Tensor, W: Optional[Tensor], B: Optional[Tensor], eps: float) -> Tensor:
    """LayerNorm over the last dimension (see ``liger_cpp.ops.layer_norm``)."""
    return _layer_norm(X, W, B, eps)


def liger_rope(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    position_ids: Optional[Tensor] = None,
    unsqueeze_dim: int = 1,
    rotary_dim: Optional[int] = None,
) -> tuple[Tensor, Tensor]:
    """HF rotate-half RoPE on q and k, out of place (see ``liger_cpp.ops.rope.rope``); with a
    partial `rotary_dim` as ``liger_cpp.transformers.rope.liger_rotary_pos_emb``."""
    return liger_rotary_pos_emb(q, k, cos, sin, position_ids, unsqueeze_dim, rotary_dim)


def liger_qwen2vl_mrope(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    mrope_section: Sequence[int],
    unsqueeze_dim: int = 1,
) -> tuple[Tensor, Tensor]:
    """Qwen2-VL multimodal RoPE, out of place (see ``liger_cpp.ops.rope.mrope``)."""
    return _mrope(q, k, cos, sin, mrope_section, unsqueeze_dim=unsqueeze_dim)


def liger_fused_linear_cross_entropy(
    input: Tensor,
    weight: Tensor,
    target: Tensor,
    bias: Optional[Tensor] = None,
    ce_weight: Optional[Tensor] = None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: Optional[float] = None,
    return_z_loss: bool = False,
    accum_dtype: Optional[torch.dtype] = None,
    use_token_scaling: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
    logit_scale: float = 1.0,
    chunk_budget_mib: Optional[float] = None,
) -> Union[Tensor, CrossEntropyOutput]:
    """CE(logit_scale * (input @ weight.T + bias), target) without the full logits, with Liger's
    parameters in Liger's order (see ``liger_cpp.ops.fused_linear_cross_entropy``). `use_token_scaling`
    scales each token's loss by the detached probability of its target (TRL's DFT loss);
    `chunk_budget_mib` sets the logits held per chunk in MiB (None: LIGER_CPP_FLCE_CHUNK_MB, else
    automatic). Returns the float32 loss, or, when any return_* flag is set, a CrossEntropyOutput
    (as Liger)."""
    loss, z_loss, accuracy, predicted = _fused_linear_cross_entropy(
        input,
        weight,
        target,
        bias,
        ce_weight=ce_weight,
        ignore_index=ignore_index,
        lse_square_scale=lse_square_scale,
        label_smoothing=label_smoothing,
        reduction=reduction,
        softcap=softcap,
        return_z_loss=return_z_loss,
        accum_dtype=accum_dtype,
        use_token_scaling=use_token_scaling,
        return_token_accuracy=return_token_accuracy,
        return_predicted_tokens=return_predicted_tokens,
        logit_scale=logit_scale,
        chunk_budget_mib=chunk_budget_mib,
    )
    if not (return_z_loss or return_token_accuracy or return_predicted_tokens):
        return loss
    return CrossEntropyOutput(loss=loss, z_loss=z_loss, token_accuracy=accuracy, predicted_tokens=predicted)


def liger_relu_squared(x: Tensor) -> Tensor:
    """relu(x)^2 (Nemotron's relu2; Liger's liger_relu_squared), float32 math, one rounding."""
    from liger_cpp.ops.relu_squared import relu_squared

    return relu_squared(x)


__all__ = [
    "CrossEntropyOutput",
    "liger_cross_entropy",
    "liger_fused_add_rms_norm",
    "liger_fused_linear_cross_entropy",
    "liger_geglu",
    "liger_layer_norm",
    "liger_qwen2vl_mrope",
    "liger_relu_squared",
    "liger_rms_norm",
    "liger_rope",
    "liger_swiglu",
]


# ---- Divergences and distillation (appended with the RL / distillation losses) ----
from liger_cpp.ops.divergence import jsd as _jsd  # noqa: E402
from liger_cpp.ops.divergence import kl_div as _kl_div  # noqa: E402
from liger_cpp.ops.divergence import tvd as _tvd  # noqa: E402
from liger_cpp.transformers.fused_linear_jsd import liger_fused_linear_jsd  # noqa: E402,F401


def liger_jsd(
    input: Tensor,
    target: Tensor,
    shift_labels: Optional[Tensor] = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> Tensor:
    """Liger's liger_jsd: generalized JSD of log-probabilities (see liger_cpp.ops.divergence.jsd)."""
    return _jsd(input, target, shift_labels, beta, ignore_index)


def liger_kl_div(
    input: Tensor,
    target: Tensor,
    size_average: bool = True,
    reduce: bool = True,
    reduction: str = "mean",
    log_target: bool = False,
    eps: float = 1e-10,
) -> Tensor:
    """Liger's liger_kl_div (size_average / reduce are accepted and ignored, as Liger's)."""
    return _kl_div(input, target, reduction, log_target, eps)


def liger_tvd(
    input: Tensor,
    target: Tensor,
    shift_labels: Optional[Tensor] = None,
    reduction: str = "mean",
    ignore_index: int = -100,
) -> Tensor:
    """Liger's liger_tvd (reduction default "mean", the module's "batchmean")."""
    return _tvd(input, target, shift_labels, reduction, ignore_index)


def liger_fused_linear_kl_div(
    student_input: Tensor,
    student_weight: Tensor,
    target: Tensor,
    shift_labels: Optional[Tensor] = None,
    reduction: str = "batchmean",
    ignore_index: int = -100,
    temperature: float = 1.0,
    eps: float = 1e-10,
    accum_dtype: Optional[torch.dtype] = None,
) -> Tensor:
    """Liger's liger_fused_linear_kl_div: KL(target || softmax(student_input @ student_weight^T /
    temperature)) (liger_cpp.ops.fused_linear_kl_div; LigerFusedLinearKLDivLoss's functional)."""
    from liger_cpp.ops.fused_linear_kl_div import fused_linear_kl_div

    return fused_linear_kl_div(
        student_input,
        student_weight,
        target,
        shift_labels,
        reduction=reduction,
        ignore_index=ignore_index,
        temperature=temperature,
        eps=eps,
        accum_dtype=accum_dtype,
    )
