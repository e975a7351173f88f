"""RMSNorm modules, drop-in for HF's LlamaRMSNorm / GemmaRMSNorm (same `weight` parameter
and `variance_epsilon` attribute), with Liger-Kernel's constructor arguments."""

import torch
from torch import nn

from liger_cpp.ops.rms_norm import CASTING_MODES, rms_norm


class LigerRMSNorm(nn.Module):
    """RMSNorm with Liger-Kernel's constructor.

    Unlike Liger, `in_place` defaults to False: writing dX into the incoming gradient corrupts
    the gradient wherever that tensor also flows elsewhere (any `h + norm(h)` residual, Gemma 2's
    sandwich norms), and autograd cannot detect it. Pass `in_place=True` only for pre-norm
    layouts whose norm output feeds a single op (Llama's).

    `row_mode` (Liger-Kernel's choice of its row or block kernel) is accepted and kept as an
    attribute; liger_cpp's launch plan is chosen from the shape, and the result is the same.
    """

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        offset: float = 0.0,
        casting_mode: str = "llama",
        init_fn: str = "ones",
        in_place: bool = False,
        row_mode=None,
        elementwise_affine: bool = True,
    ):
        super().__init__()
        if init_fn not in ("ones", "zeros"):
            raise ValueError(f"liger_cpp: argument 'init_fn': expected 'ones' or 'zeros', got {init_fn!r}")
        if casting_mode not in CASTING_MODES:
            raise ValueError(
                f"liger_cpp: argument 'casting_mode': expected one of {CASTING_MODES}, got {casting_mode!r}"
            )
        self.hidden_size = hidden_size
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            init = torch.ones if init_fn == "ones" else torch.zeros
            self.weight = nn.Parameter(init(hidden_size))
        else:
            self.register_parameter("weight", None)
        self.variance_epsilon = eps
        self.offset = offset
        self.casting_mode = casting_mode
        self.in_place = in_place
        self.row_mode = row_mode

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return rms_norm(
            hidden_states,
            self.weight,
            self.variance_epsilon,
            offset=self.offset,
            casting_mode=self.casting_mode,
            in_place=self.in_place,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.hidden_size}, eps={self.variance_epsilon}, offset={self.offset}, "
            f"casting_mode={self.casting_mode}, in_place={self.in_place}, "
            f"elementwise_affine={self.elementwise_affine}"
        )


class LigerRMSNormForGemma(LigerRMSNorm):
    """Gemma's RMSNorm: y = norm(x) * (1 + w) in fp32, weight initialised to zeros."""

    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=1.0,
        casting_mode="gemma",
        init_fn="zeros",
        in_place=False,
        row_mode=None,
    ):
        super().__init__(hidden_size, eps, offset, casting_mode, init_fn, in_place, row_mode)


class LigerRMSNormForGemma2(LigerRMSNormForGemma):
    """Gemma 2 sandwich norms: the incoming gradient is shared with the residual, so never in place."""

    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=1.0,
        casting_mode="gemma",
        init_fn="zeros",
        in_place=False,
        row_mode=None,
    ):
        super().__init__(hidden_size, eps, offset, casting_mode, init_fn, in_place, row_mode)


class LigerRMSNormForGemma3(LigerRMSNorm):
    """Gemma 3's RMSNorm (HF builds it as ``Gemma3RMSNorm(dim=..., eps=...)``): Gemma's offset 1.0,
    fp32 casting and zeros init, never in place (sandwich norms share their gradient)."""

    def __init__(self, dim, eps=1e-6, offset=1.0, casting_mode="gemma", init_fn="zeros", in_place=False):
        super().__init__(dim, eps, offset, casting_mode, init_fn, in_place)


class LigerRMSNormForOlmo2(LigerRMSNorm):
    """OLMo 2's RMSNorm: Llama casting, never in place (its post-norms feed the residual add, so
    the incoming gradient is shared with the residual)."""

    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=0.0,
        casting_mode="llama",
        init_fn="ones",
        in_place=False,
        row_mode=None,
    ):
        super().__init__(hidden_size, eps, offset, casting_mode, init_fn, in_place, row_mode)
