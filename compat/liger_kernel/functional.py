"""Liger-Kernel 0.8.5's ``liger_kernel.functional`` (its dispatching functional API) on liger_cpp.

Liger-Kernel runs each of these through its implementation dispatcher: the implementation named by
``impl=`` (or its legacy alias ``backend=``), else ``LIGER_KERNEL_IMPL_<OP>``, else
``LIGER_KERNEL_IMPL``, else ``liger_kernel.set_impl``'s pin, else the first available one
(``nvidia-triton``, ``nvidia-cutile``, ``nvidia-cutedsl``, ``ascend-triton``), and each
implementation calls its autograd Function with these arguments. Here every implementation is
liger_cpp's: the same Functions of ``liger_kernel.ops`` (liger_cpp's adapters), called in the same
order. So a name Liger-Kernel knows, or ``"liger_cpp"``, is accepted wherever it comes from, and any
other name is a ValueError saying where it came from (Liger-Kernel too rejects a name nothing
registered). ``mode`` selects a kernel variant inside one of Liger-Kernel's implementations: the
modes they take are accepted and change nothing here; any other is a ValueError.
"""

import os
import threading
from typing import Optional

import torch

from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction
from liger_kernel.ops.fused_linear_jsd import LigerFusedLinearJSDFunction
from liger_kernel.ops.geglu import LigerGELUMulFunction
from liger_kernel.ops.jsd import LigerJSDFunction
from liger_kernel.ops.kl_div import LigerKLDivLossFunction
from liger_kernel.ops.layer_norm import LigerLayerNormFunction
from liger_kernel.ops.rms_norm import LigerRMSNormFunction
from liger_kernel.ops.rope import LigerRopeFunction
from liger_kernel.ops.softmax import LigerSoftmaxFunction
from liger_kernel.ops.swiglu import LigerSiLUMulFunction

# Liger-Kernel 0.8.5's implementation names (hyphenated <backend>-<dsl>), its legacy bare aliases,
# and the modes its implementations take ("default" for all; the others are cuTile's).
IMPLS = ("nvidia-triton", "nvidia-cutile", "nvidia-cutedsl", "ascend-triton", "liger_cpp")
LEGACY_ALIASES = {"triton": "nvidia-triton", "cutile": "nvidia-cutile", "cutedsl": "nvidia-cutedsl"}
MODES = (None, "default", "standard", "static_persistent", "chunked", "multi_wave_cached")
OPS = (
    "cross_entropy",
    "fused_add_rms_norm",
    "fused_linear_cross_entropy",
    "fused_linear_jsd",
    "geglu",
    "jsd",
    "kl_div",
    "layer_norm",
    "rms_norm",
    "rope",
    "softmax",
    "swiglu",
)

_PIN: Optional[str] = None
_PIN_LOCK = threading.Lock()


def _canonical(name: Optional[str], where: str) -> Optional[str]:
    if name is None or name == "":
        return None
    name = LEGACY_ALIASES.get(name, name)
    if name not in IMPLS:
        raise ValueError(
            f"liger_kernel (liger_cpp): {where}: expected an implementation name, one of "
            f"{list(IMPLS)} (or a legacy alias {sorted(LEGACY_ALIASES)}), got {name!r}"
        )
    return name


def set_impl(name: Optional[str]) -> None:
    """Pin an implementation process-wide (None clears it), as Liger-Kernel's ``set_impl``. Every
    name runs liger_cpp; an unknown one is rejected here rather than at the next call."""
    global _PIN
    name = _canonical(name, "set_impl's 'name'")
    with _PIN_LOCK:
        _PIN = name


def get_impl() -> Optional[str]:
    """The process-wide pin (``set_impl``), else None."""
    return _PIN


def available_impls(op_name: str, device=None) -> list[str]:
    """The implementations that can run `op_name` here: liger_cpp's, for the ops of this module."""
    return ["liger_cpp"] if op_name in OPS else []


# Liger-Kernel's legacy names for the three above.
set_backend, get_backend, available_backends = set_impl, get_impl, available_impls


def _resolve(op: str, impl: Optional[str], backend: Optional[str], mode: Optional[str]) -> None:
    """Check the implementation request the way Liger-Kernel resolves it (first source that is set)
    and the mode; liger_cpp runs either way."""
    if impl is None and backend is not None:
        impl = backend
    for value, where in (
        (impl, "argument 'impl'"),
        (os.environ.get(f"LIGER_KERNEL_IMPL_{op.upper()}"), f"LIGER_KERNEL_IMPL_{op.upper()}"),
        (os.environ.get(f"LIGER_KERNEL_BACKEND_{op.upper()}"), f"LIGER_KERNEL_BACKEND_{op.upper()}"),
        (os.environ.get("LIGER_KERNEL_IMPL"), "LIGER_KERNEL_IMPL"),
        (os.environ.get("LIGER_KERNEL_BACKEND"), "LIGER_KERNEL_BACKEND"),
    ):
        if value:
            _canonical(value, where)
            break
    if mode not in MODES:
        raise ValueError(
            f"liger_kernel (liger_cpp): {op}: argument 'mode': expected one of {list(MODES)}, got {mode!r}"
        )


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
    row_mode: Optional[bool] = None,
    impl: Optional[str] = None,
    mode: Optional[str] = None,
    backend: Optional[str] = None,
) -> torch.Tensor:
    """RMSNorm: ``x / sqrt(mean(x^2) + eps) * (offset + weight)`` (``row_mode`` is Liger's Triton
    kernel choice, accepted and not used)."""
    _resolve("rms_norm", impl, backend, mode)
    return LigerRMSNormFunction.apply(x, weight, eps, offset, casting_mode, in_place, row_mode)


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    *,
    impl: Optional[str] = None,
    mode: Optional[str] = None,
    backend: Optional[str] = None,
) -> torch.Tensor:
    """LayerNorm over the last dimension; no bias when ``bias`` is None (Liger passes a zero bias,
    whose gradient nobody sees)."""
    _resolve("layer_norm", impl, backend, mode)
    return LigerLayerNormFunction.apply(x, weight, bias, eps)


def jsd(
    _input: torch.Tensor,
    target: torch.Tensor,
    shift_labels: Optional[torch.Tensor] = None,
    beta: float = 0.5,
    ignore_index: int = -100,
    *,
    impl: Optional[str] = None,
    mode: Optional[str] = None,
    backend: Optional[str] = None,
) -> torch.Tensor:
    """Generalised Jensen-Shannon divergence of log-probabilities (Liger's ``LigerJSDFunction``)."""
    _resolve("jsd", impl, backend, mode)
    return LigerJSDFunction.apply(_input, target, shift_labels, beta, ignore_index)


def softmax(
    x: torch.Tensor,
    *,
    impl: Optional[str] = None,
    mode: Optional[str] = None,
    backend: Optional[str] = None,
) -> torch.Tensor:
    """Softmax over the last dimension."""
    _resolve("softmax", impl, backend, mode)
    return LigerSoftmaxFunction.apply(x)


def swiglu(
    a: torch.Tensor,
    b: torch.Tensor,
    gate_multiplier: float = 1.0,
    down_multiplier: float = 1.0,
    *,
    impl: Optional[str] = None,
    mode: Optional[str] = None,
    backend: Optional[str] = None,
) -> torch.Tensor:
    """``silu(a * gate_multiplier) * b * down_multiplier`` (the multipliers are Falcon-H1's)."""
    _resolve("swiglu", impl, backend, mode)
    return LigerSiLUMulFunction.apply(a, b, float(gate_multiplier), float(down_multiplier))


def rope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: Optional[torch.Tensor] = None,
    unsqueeze_dim: int = 1,
    *,
    impl: Optional[str] = None,
    mode: Optional[str] = None,
    backend: Optional[str] = None,
):
    """Rotary embedding of q and k (Hugging Face's rotate-half form); returns (q, k)."""
    _resolve("rope", impl, backend, mode)
    return LigerRopeFunction.apply(q, k, cos, sin, position_ids, unsqueeze_dim)


def cross_entropy(
    input: torch.Tensor,
    target: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: Optional[float] = None,
    return_z_loss: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
    *,
    impl: Optional[str] = None,
    mode: Optional[str] = None,
    backend: Optional[str] = None,
):
    """Cross entropy on logits: ``(loss, z_loss, token_accuracy, predicted_tokens)``, the entries
    not asked for None."""
    _resolve("cross_entropy", impl, backend, mode)
    return LigerCrossEntropyFunction.apply(
        input,
        target,
        weight,
        ignore_index,
        lse_square_scale,
        label_smoothing,
        reduction,
        softcap,
        return_z_loss,
        return_token_accuracy,
        return_predicted_tokens,
    )


def fused_add_rms_norm(
    X: torch.Tensor,
    R: torch.Tensor,
    W: torch.Tensor,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
    *,
    impl: Optional[str] = None,
    mode: Optional[str] = None,
    backend: Optional[str] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(RMSNorm(X + R), X + R)``."""
    _resolve("fused_add_rms_norm", impl, backend, mode)
    return LigerFusedAddRMSNormFunction.apply(X, R, W, eps, offset, casting_mode, in_place)


def geglu(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    impl: Optional[str] = None,
    mode: Optional[str] = None,
    backend: Optional[str] = None,
) -> torch.Tensor:
    """``gelu_tanh(a) * b``."""
    _resolve("geglu", impl, backend, mode)
    return LigerGELUMulFunction.apply(a, b)


def kl_div(
    y_pred: torch.Tensor,
    y_true: torch.Tensor,
    reduction: str = "batchmean",
    log_target: bool = False,
    eps: float = 1e-10,
    *,
    impl: Optional[str] = None,
    mode: Optional[str] = None,
    backend: Optional[str] = None,
) -> torch.Tensor:
    """KL divergence of log-probabilities ``y_pred`` from ``y_true`` (torch's kl_div)."""
    _resolve("kl_div", impl, backend, mode)
    return LigerKLDivLossFunction.apply(y_pred, y_true, reduction, log_target, eps)


def fused_linear_jsd(
    student_input: torch.Tensor,
    student_weight: torch.Tensor,
    teacher_input: torch.Tensor,
    teacher_weight: torch.Tensor,
    shift_labels: Optional[torch.Tensor] = None,
    jsd_beta: float = 0.5,
    ignore_index: int = -100,
    temperature: float = 1.0,
    *,
    impl: Optional[str] = None,
    mode: Optional[str] = None,
    backend: Optional[str] = None,
) -> torch.Tensor:
    """JSD of the student's and the teacher's softmax(hidden @ weight^T / temperature), without
    their logits in memory."""
    _resolve("fused_linear_jsd", impl, backend, mode)
    return LigerFusedLinearJSDFunction.apply(
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        shift_labels,
        jsd_beta,
        ignore_index,
        temperature,
    )


def fused_linear_cross_entropy(
    _input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    ce_weight: Optional[torch.Tensor] = None,
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
    *,
    impl: Optional[str] = None,
    mode: Optional[str] = None,
    backend: Optional[str] = None,
):
    """Cross entropy of ``_input @ weight^T (+ bias)`` without the logits in memory:
    ``(loss, z_loss, token_accuracy, predicted_tokens)``, the entries not asked for None."""
    _resolve("fused_linear_cross_entropy", impl, backend, mode)
    return LigerFusedLinearCrossEntropyFunction.apply(
        _input,
        weight,
        target,
        bias,
        ce_weight,
        ignore_index,
        lse_square_scale,
        label_smoothing,
        reduction,
        softcap,
        return_z_loss,
        accum_dtype,
        use_token_scaling,
        return_token_accuracy,
        return_predicted_tokens,
    )


__all__ = list(OPS)
