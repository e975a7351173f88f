"""RMSNorm modules, drop-in for HF's LlamaRMSNorm / GemmaRMSNorm (same `weight` parameter
and `variance_epsilon` attribute), with Liger-Kernel's constructor arguments."""

import torch
from torch import nn

from liger_cpp.ops.rms_norm import CASTING_MODES, rms_norm
from liger_cpp.ops.swiglu import swiglu


def init_rms_norm(module, hidden_size, eps, offset, casting_mode, init_fn, in_place, elementwise_affine):
    """The attributes and weight of Liger's RMSNorm constructors (LigerRMSNorm,
    LigerModulatedRMSNorm), checked: weight ones or zeros (None without elementwise_affine),
    variance_epsilon, offset, casting_mode, in_place."""
    if init_fn not in ("ones", "zeros"):
        raise ValueError(f"liger_cpp: argument 'init_fn': expected 'ones' or 'zeros', got {init_fn!r}")
    if casting_mode not in CASTING_MODES:
        raise ValueError(
            f"liger_cpp: argument 'casting_mode': expected one of {CASTING_MODES}, got {casting_mode!r}"
        )
    module.hidden_size = hidden_size
    module.elementwise_affine = elementwise_affine
    if elementwise_affine:
        init = torch.ones if init_fn == "ones" else torch.zeros
        module.weight = nn.Parameter(init(hidden_size))
    else:
        module.register_parameter("weight", None)
    module.variance_epsilon = eps
    module.offset = offset
    module.casting_mode = casting_mode
    module.in_place = in_place


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
        init_rms_norm(self, hidden_size, eps, offset, casting_mode, init_fn, in_place, elementwise_affine)
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
    """Gemma 2 sandwich norms: the incoming gradient is shared with the residual, so never in place
    (Gemma's constructor and defaults, in_place=False among them)."""


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


# ---- RMSNorm variants of the newer model families (read from their HF modeling modules) ----


class LigerRMSNormForOlmo3(LigerRMSNorm):
    """RMSNorm of the models whose HF norm returns ``(weight * x_normed).to(input_dtype)`` (OLMo 3,
    GPT-OSS, DeepSeek-V4): the weight multiplies in float32 and the result is rounded once, which is
    liger_cpp's "gemma" casting with offset 0; never in place (post-norms share their gradient with
    the residual)."""

    def __init__(
        self,
        hidden_size,
        eps=1e-6,
        offset=0.0,
        casting_mode="gemma",
        init_fn="ones",
        in_place=False,
        row_mode=None,
    ):
        super().__init__(hidden_size, eps, offset, casting_mode, init_fn, in_place, row_mode)


class LigerRMSNormForQwen3Next(LigerRMSNormForGemma):
    """Qwen3-Next / Qwen3.5's RMSNorm: ``x_normed * (1 + w)`` in float32, rounded once (HF's
    Qwen3NextRMSNorm: Gemma's formula and zeros init, Gemma's constructor), never in place."""


class LigerRMSNormForGemma4(LigerRMSNorm):
    """Gemma 4 / Gemma 3n's RMSNorm (HF ``Gemma4RMSNorm(dim, eps, with_scale)``): float32 math,
    ``* weight`` (no offset, ones init) when ``with_scale``, none otherwise (v_norm, the router and
    embedding norms), one rounding; never in place."""

    def __init__(
        self,
        dim,
        eps=1e-6,
        offset=0.0,
        casting_mode="gemma",
        init_fn="ones",
        in_place=False,
        with_scale=True,
    ):
        super().__init__(dim, eps, offset, casting_mode, init_fn, in_place, elementwise_affine=with_scale)
        self.with_scale = with_scale


class LigerRMSNormForMuseGlimmer(LigerRMSNorm):
    """MuseGlimmer's RMSNorm (HF ``MuseGlimmerRMSNorm(dim=None, eps, with_scale)``): float32 math,
    ``* weight`` (no offset, ones init) when ``with_scale`` (the text model's final norm), no weight
    otherwise (the attention's qk_norm, the embedding's embed_norm, the projected vision features'
    perception_emb_norm); one rounding; never in place. HF normalises with ``pow(ms + eps, -0.5)``,
    the kernel with rsqrt: they can differ by an ulp."""

    def __init__(
        self,
        dim=None,
        eps=1e-6,
        offset=0.0,
        casting_mode="gemma",
        init_fn="ones",
        in_place=False,
        with_scale=True,
    ):
        if with_scale and dim is None:
            raise ValueError("liger_cpp: argument 'dim': needed when with_scale=True (the weight's size)")
        super().__init__(
            dim if dim is not None else 0,
            eps,
            offset,
            casting_mode,
            init_fn,
            in_place,
            elementwise_affine=with_scale,
        )
        self.with_scale = with_scale


class LigerRMSNormForMuseGlimmerTextCentered(LigerRMSNormForGemma):
    """MuseGlimmer's decoder-layer norms (HF ``MuseGlimmerTextCenteredRMSNorm(dim, eps)``): float32
    math, ``* (1 + weight)`` with zeros init, one rounding: Gemma's norm, constructor included; never
    in place (the post norms sit between a sub-layer and its residual)."""


class LigerL2Norm(LigerRMSNorm):
    """A weightless RMSNorm, ``x * rsqrt(mean(x^2) + eps)`` in float32 rounded once (HF's
    Llama4TextL2Norm(eps), the q / k norm of Llama 4's RoPE layers). The size is taken from the
    input."""

    def __init__(self, eps=1e-6):
        super().__init__(0, eps, 0.0, "gemma", "ones", False, elementwise_affine=False)
        self.eps = eps

    def extra_repr(self) -> str:
        return f"eps={self.variance_epsilon}"


class LigerRMSNormGated(nn.Module):
    """Qwen3-Next / Qwen3.5's gated RMSNorm (HF ``Qwen3NextRMSNormGated(hidden_size, eps)``, the output
    norm of the gated delta net): ``(weight * x_normed.to(dtype)) * silu(gate.float())``, rounded to
    the input's dtype. Two liger_cpp kernels with exactly that rounding: RMSNorm in "llama" casting,
    then the fused silu(gate) * y of SwiGLU (float32 math, one rounding)."""

    # HF's module before transformers 5.17 has no activation attribute (its gate is always silu):
    # an instance patched in place (its class swapped) reads this default.
    activation = "silu"

    def __init__(self, hidden_size, eps=1e-6, **kwargs):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
        self.activation = kwargs.get("activation", "silu")

    def forward(self, hidden_states: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        if self.activation not in ("silu", "swish"):
            raise ValueError(f"liger_cpp: LigerRMSNormGated supports the silu gate, got {self.activation!r}")
        y = rms_norm(hidden_states, self.weight, self.variance_epsilon, casting_mode="llama")
        if gate.shape != y.shape:
            raise ValueError(
                f"liger_cpp: argument 'gate': expected hidden_states' shape {tuple(y.shape)}, "
                f"got {tuple(gate.shape)}"
            )
        g = gate if gate.dtype == y.dtype else gate.to(y.dtype)
        out = swiglu(g, y)
        return out if out.dtype == hidden_states.dtype else out.to(hidden_states.dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"
