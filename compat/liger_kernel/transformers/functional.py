"""Liger-Kernel's ``liger_kernel.transformers.functional`` with its exact signatures, on liger_cpp's
functional API (liger_cpp.transformers.functional, called by keyword). One deliberate difference:
``in_place`` defaults to False. Names liger_cpp does not implement are NotImplementedError stubs.

Replacing ``liger_fused_linear_cross_entropy`` in this module (as Axolotl does to force
``use_token_scaling``) also routes the fused loss of liger_cpp's patched causal-LM forward through
the replacement, as it would route Liger-Kernel's."""

import sys
import types
import warnings
from typing import Optional

from liger_cpp.transformers import dyt as _dyt
from liger_cpp.transformers import functional as _cpp
from liger_cpp.transformers import poly_norm as _poly_norm
from liger_cpp.transformers import torch_composed_ops as _composed
from liger_kernel._surface import complete


def liger_cross_entropy(
    input,
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: Optional[float] = None,
    return_z_loss: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
):
    return _cpp.liger_cross_entropy(
        input,
        target,
        weight=weight,
        size_average=size_average,
        ignore_index=ignore_index,
        reduce=reduce,
        reduction=reduction,
        label_smoothing=label_smoothing,
        lse_square_scale=lse_square_scale,
        softcap=softcap,
        return_z_loss=return_z_loss,
        return_token_accuracy=return_token_accuracy,
        return_predicted_tokens=return_predicted_tokens,
    )


def liger_fused_linear_cross_entropy(
    input,
    weight,
    target,
    bias=None,
    ce_weight=None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: Optional[float] = None,
    return_z_loss: bool = False,
    accum_dtype=None,
    use_token_scaling: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
    chunk_mem_const: int = 1,
):
    """`chunk_mem_const` (Liger-Kernel's chunk sizing constant) is accepted; liger_cpp sizes its
    chunks itself (the result does not depend on them)."""
    extra = {"use_token_scaling": True} if use_token_scaling else {}
    return _cpp.liger_fused_linear_cross_entropy(
        input,
        weight,
        target,
        bias=bias,
        ce_weight=ce_weight,
        ignore_index=ignore_index,
        lse_square_scale=lse_square_scale,
        label_smoothing=label_smoothing,
        reduction=reduction,
        softcap=softcap,
        return_z_loss=return_z_loss,
        accum_dtype=accum_dtype,
        return_token_accuracy=return_token_accuracy,
        return_predicted_tokens=return_predicted_tokens,
        **extra,
    )


def liger_rms_norm(X, W, eps, offset: float = 0.0, casting_mode: str = "llama", in_place: bool = False):
    return _cpp.liger_rms_norm(X, W, eps, offset=offset, casting_mode=casting_mode, in_place=in_place)


def liger_fused_add_rms_norm(
    X, R, W, eps, offset: float = 0.0, casting_mode: str = "llama", in_place: bool = False
):
    return _cpp.liger_fused_add_rms_norm(
        X, R, W, eps, offset=offset, casting_mode=casting_mode, in_place=in_place
    )


def liger_layer_norm(X, W, B, eps):
    return _cpp.liger_layer_norm(X, W, B, eps)


def liger_rope(q, k, cos, sin, position_ids=None, unsqueeze_dim: int = 1, rotary_dim=None):
    return _cpp.liger_rope(
        q, k, cos, sin, position_ids=position_ids, unsqueeze_dim=unsqueeze_dim, rotary_dim=rotary_dim
    )


def liger_qwen2vl_mrope(q, k, cos, sin, mrope_section, unsqueeze_dim: int = 1):
    return _cpp.liger_qwen2vl_mrope(q, k, cos, sin, mrope_section, unsqueeze_dim=unsqueeze_dim)


def liger_dyt(x, alpha, gamma, beta):
    return _dyt.liger_dyt(x, alpha, gamma, beta)


def liger_poly_norm(X, W, B, eps=1e-06, in_place=False):
    return _poly_norm.liger_poly_norm(X, W, B, eps, in_place)


def liger_softmax(x):
    return _composed.liger_softmax(x)


def liger_sparsemax(input, dim=-1):  # noqa: A002 - Liger's argument name
    return _composed.liger_sparsemax(input, dim)


def liger_group_norm(X, affine_scaling_weight, affine_shifting_bias, num_channels, num_groups, eps):
    return _composed.liger_group_norm(
        X, affine_scaling_weight, affine_shifting_bias, num_channels, num_groups, eps
    )


def liger_modulated_rms_norm(
    X, W, scale, shift=None, eps=1e-06, offset=0.0, casting_mode="llama", in_place=False
):
    return _composed.liger_modulated_rms_norm(X, W, scale, shift, eps, offset, casting_mode, in_place)


def liger_attn_res(V, w_query, w_norm, eps=1e-06):
    return _composed.liger_attn_res(V, w_query, w_norm, eps)


def liger_multi_token_attention(
    scores,
    weight,
    bias=None,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
    sparse: bool = False,
):
    return _composed.liger_multi_token_attention(
        scores, weight, bias, stride, padding, dilation, groups, sparse
    )


def liger_fused_neighborhood_attention(
    query, key, value, kernel_size: int = 7, dilation: int = 1, scale=None
):
    from liger_cpp.transformers.neighborhood_attention import liger_fused_neighborhood_attention as f

    return f(query, key, value, kernel_size, dilation, scale)


from liger_cpp.transformers.mhc import (  # noqa: E402, F401  (mHC: Liger's exact signatures)
    liger_mhc_apply,
    liger_mhc_coeffs,
    liger_mhc_forward,
    liger_mhc_post_res,
    liger_mhc_pre,
)


def liger_swiglu(a, b):
    return _cpp.liger_swiglu(a, b)


def liger_relu_squared(x):
    return _cpp.liger_relu_squared(x)


def liger_geglu(a, b):
    return _cpp.liger_geglu(a, b)


# --------------------------------------------------------------------------------------------
# a replaced liger_fused_linear_cross_entropy reaches liger_cpp's patched forward

_OURS = liger_fused_linear_cross_entropy
_WARNED = []
_SAVED = []  # the patched forward's own fused loss, while a replacement is routed in


def liger_jsd(input, target, shift_labels=None, beta: float = 0.5, ignore_index: int = -100):
    return _cpp.liger_jsd(input, target, shift_labels, beta=beta, ignore_index=ignore_index)


def liger_kl_div(
    input,
    target,
    size_average: bool = True,
    reduce: bool = True,
    reduction: str = "mean",
    log_target: bool = False,
    eps: float = 1e-10,
):
    return _cpp.liger_kl_div(input, target, reduction=reduction, log_target=log_target, eps=eps)


def liger_tvd(input, target, shift_labels=None, reduction: str = "mean", ignore_index: int = -100):
    return _cpp.liger_tvd(input, target, shift_labels, reduction=reduction, ignore_index=ignore_index)


def liger_fused_linear_jsd(
    student_input,
    student_weight,
    teacher_input,
    teacher_weight,
    shift_labels=None,
    jsd_beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
    accum_dtype=None,
):
    return _cpp.liger_fused_linear_jsd(
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        shift_labels,
        jsd_beta=jsd_beta,
        ignore_index=ignore_index,
        temperature=temperature,
        accum_dtype=accum_dtype,
    )


# liger_cpp's functional has Liger-Kernel's exact signature
liger_fused_linear_kl_div = _cpp.liger_fused_linear_kl_div


def liger_fused_linear_scaled_cross_entropy_tp(
    input,
    weight,
    target,
    tp_group,
    temperature: float = 1.0,
    ignore_index: int = -100,
    tiles_per_reduce: int = 1,
    return_entropy: bool = False,
):
    from liger_cpp.ops import LigerFusedLinearScaledCrossEntropyTPFunction

    return LigerFusedLinearScaledCrossEntropyTPFunction.apply(
        input, weight, target, tp_group, temperature, ignore_index, tiles_per_reduce, return_entropy
    )


def _route_patched_forward(fn) -> None:
    from liger_cpp.transformers import causal_lm

    if fn is _OURS:
        if _SAVED:
            causal_lm.liger_fused_linear_cross_entropy = _SAVED.pop()
        return
    if not _SAVED:
        _SAVED.append(causal_lm.liger_fused_linear_cross_entropy)

    def routed(input, weight, target, bias=None, *, logit_scale=1.0, **kwargs):
        if logit_scale != 1.0:  # Granite: not expressible through Liger-Kernel's signature
            if not _WARNED:
                _WARNED.append(True)
                warnings.warn(
                    "liger_kernel: the replaced liger_fused_linear_cross_entropy cannot take a logit "
                    "scale (Granite's logits_scaling); liger_cpp's fused loss is used for this model.",
                    UserWarning,
                    stacklevel=2,
                )
            return _cpp.liger_fused_linear_cross_entropy(
                input, weight, target, bias, logit_scale=logit_scale, **kwargs
            )
        return fn(input, weight, target, bias, **kwargs)

    causal_lm.liger_fused_linear_cross_entropy = routed


class _Functional(types.ModuleType):
    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name == "liger_fused_linear_cross_entropy":
            _route_patched_forward(value)


complete(globals())
__all__ = sorted(set(__all__) | {"CrossEntropyOutput"})  # noqa: F821 (set by complete)
sys.modules[__name__].__class__ = _Functional
