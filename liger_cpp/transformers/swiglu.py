"""SwiGLU MLP modules, drop-in for HF's LlamaMLP, Phi3MLP and MixtralBlockSparseTop2MLP (same
parameter names, so state dicts load unchanged), with liger_cpp's fused silu(a) * b."""

import torch
from torch import nn
from torch.nn import functional as F

from liger_cpp.ops.glu_mlp import glu_mlp
from liger_cpp.ops.swiglu import swiglu

SILU_NAMES = ("silu", "swish")


def outputs_private(*projections: nn.Module) -> bool:
    """Whether the outputs of these projections, computed inside an MLP's forward, can be reached
    only through that forward and autograd: no forward hook (global, or on a projection or any of
    its submodules, e.g. a PEFT layer's base_layer) that could keep a reference. Then the GLU
    backward may write its gradients into them (`in_place=None`, the modules' default): autograd's
    version counters guard every other user, and nothing else can see the overwritten values. This
    saves two (tokens x intermediate) buffers at each MLP's backward, as Liger's always-in-place
    backward does, without Liger's silent corruption of a tensor someone else holds."""
    if getattr(nn.modules.module, "_global_forward_hooks", None):
        return False
    return not any(sub._forward_hooks for m in projections for sub in m.modules())


def resolve_in_place(in_place, *projections: nn.Module) -> bool:
    """True / False as given; None (the default): in place when the projections' outputs are
    private (see outputs_private)."""
    return outputs_private(*projections) if in_place is None else bool(in_place)


def projection_dtype(x, *projections: nn.Module, bias: bool = False):
    """The dtype in which a module may compute these projections from their weights in one liger_cpp
    op (`glu_mlp`, `qkv_rope`) instead of calling them, or None when it must call them: each is
    exactly nn.Linear, without bias (`bias=True`: with or without), with no hook of any kind on it
    (user hooks, DeepSpeed ZeRO-3's parameter gathering) and no global module hook, its parameters
    plain tensors (not DTensors). Without autocast the parameters must be of x's dtype, and that is
    the dtype; under autocast it is autocast's dtype, to which the caller casts x and the parameters
    as nn.Linear's autocast would (float64 is never cast: then None). Anything else (PEFT / LoRA
    layers, quantised linears, parametrizations) takes the module path, which calls each projection
    as HF does."""
    if _global_module_hooks():
        return None
    dev = x.device.type
    if torch.is_autocast_enabled(dev):
        dt = torch.get_autocast_dtype(dev)
        ok = (torch.float32, torch.float16, torch.bfloat16)
    else:
        dt, ok = x.dtype, (x.dtype,)
    if x.dtype not in ok:
        return None
    for p in projections:
        if type(p) is not nn.Linear or (p.bias is not None and not bias):
            return None
        if hooked(p):
            return None
        for w in (p.weight, p.bias):
            if w is not None and (
                (type(w) is not nn.Parameter and type(w) is not torch.Tensor) or w.dtype not in ok
            ):
                return None
    return dt


def hooked(m: nn.Module) -> bool:
    """Whether a module has a hook of its own (forward, forward-pre, backward or backward-pre): a
    caller that would compute its output without calling it must call it instead."""
    return bool(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks)


def as_dtype(t, dtype):
    """t in dtype (itself when it already is; None stays None): autocast's cast of an operand."""
    return t if t is None or t.dtype == dtype else t.to(dtype)


def _global_module_hooks() -> bool:
    m = nn.modules.module
    return bool(
        m._global_forward_hooks
        or m._global_forward_pre_hooks
        or m._global_backward_hooks
        or m._global_backward_pre_hooks
    )


def _check_act(config, attr="hidden_act"):
    act = getattr(config, attr, None)
    if act not in SILU_NAMES:
        raise ValueError(
            f"liger_cpp: config.{attr} {act!r} is not supported; SwiGLU needs one of {SILU_NAMES}"
        )


class LigerSwiGLUMLP(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)) (HF LlamaMLP; biases when config.mlp_bias is
    set, as HF's Llama/Granite MLPs do).

    `in_place` lets the backward write its gradients into the gate and up projections' outputs
    (see `liger_cpp.ops.swiglu.swiglu`): None (default) when no forward hook can hold those
    outputs (see `outputs_private`), True / False always / never. `intermediate_size` overrides
    config.intermediate_size (Liger-Kernel's argument)."""

    def __init__(self, config, intermediate_size=None, in_place: bool | None = None):
        super().__init__()
        _check_act(config)
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size if intermediate_size is None else intermediate_size
        bias = bool(getattr(config, "mlp_bias", False))
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=bias)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=bias)
        self.in_place = in_place

    def forward(self, x):
        g, u, d = self.gate_proj, self.up_proj, self.down_proj
        dt = projection_dtype(x, g, u, d)
        if dt is not None:  # one op and one autograd node (liger_cpp.ops.glu_mlp)
            w = [as_dtype(p.weight, dt) for p in (g, u, d)]
            return glu_mlp(as_dtype(x, dt), *w, "silu", self.in_place is not False)
        ip = resolve_in_place(self.in_place, g, u)
        return d(swiglu(g(x), u(x), in_place=ip))


class LigerQwen3MoeSwiGLUMLP(LigerSwiGLUMLP):
    """Qwen3-MoE's dense MLP (HF Qwen3MoeMLP(config, intermediate_size=None)): a SwiGLU MLP whose
    width may differ from config.intermediate_size."""

    def __init__(self, config, intermediate_size=None):
        nn.Module.__init__(self)
        _check_act(config)
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size if intermediate_size is None else intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.in_place = None


class LigerPhi3SwiGLUMLP(nn.Module):
    """Phi-3's MLP: one fused gate_up_proj (gate first, then up), chunked into two strided
    halves that the kernel reads without copying, then down_proj."""

    def __init__(self, config):
        super().__init__()
        _check_act(config)
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = nn.Linear(self.hidden_size, 2 * self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(swiglu(gate, up))


class LigerBlockSparseTop2MLP(nn.Module):
    """One Mixtral expert (HF MixtralBlockSparseTop2MLP): w2(silu(w1(x)) * w3(x)), with
    ffn_dim = config.intermediate_size (config.ffn_dim where a config only has that)."""

    def __init__(self, config, in_place: bool | None = None):
        super().__init__()
        _check_act(config)
        inter = getattr(config, "intermediate_size", None)
        self.ffn_dim = inter if inter is not None else config.ffn_dim
        self.hidden_dim = config.hidden_size
        self.w1 = nn.Linear(self.hidden_dim, self.ffn_dim, bias=False)
        self.w2 = nn.Linear(self.ffn_dim, self.hidden_dim, bias=False)
        self.w3 = nn.Linear(self.hidden_dim, self.ffn_dim, bias=False)
        self.in_place = in_place

    def forward(self, x):
        ip = resolve_in_place(self.in_place, self.w1, self.w3)
        return self.w2(swiglu(self.w1(x), self.w3(x), in_place=ip))


# The fused experts mixin lives with the MoE modules (it runs liger_cpp's fused experts op).
from liger_cpp.transformers.moe import LigerExpertsSwiGLUMixin  # noqa: E402, F401

# ---- SwiGLU MLPs of the newer model families (each drop-in for its HF class: same parameter
# names and constructor, so class-level patching builds them and state dicts load unchanged) ----


def _projections(module, hidden, inter, bias):
    module.gate_proj = nn.Linear(hidden, inter, bias=bias)
    module.up_proj = nn.Linear(hidden, inter, bias=bias)
    module.down_proj = nn.Linear(inter, hidden, bias=bias)


class LigerFalconH1SwiGLUMLP(nn.Module):
    """Falcon-H1's MLP (HF FalconH1MLP): ``down_proj(up_proj(x) * silu(gate_proj(x) * gate_multiplier))
    * down_multiplier``, the multipliers from ``config.mlp_multipliers``, applied around liger_cpp's
    fused silu(a) * b exactly where HF applies them (so the rounding is HF's)."""

    def __init__(self, config):
        super().__init__()
        _check_act(config)
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        _projections(self, self.hidden_size, self.intermediate_size, bool(getattr(config, "mlp_bias", False)))
        self.gate_multiplier, self.down_multiplier = config.mlp_multipliers
        self.in_place = None

    def forward(self, x):
        gate = self.gate_proj(x)
        if self.gate_multiplier != 1.0:
            gate = gate * self.gate_multiplier
        ip = resolve_in_place(self.in_place, self.gate_proj, self.up_proj)  # gate * m is private too
        y = self.down_proj(swiglu(gate, self.up_proj(x), in_place=ip))
        return y * self.down_multiplier if self.down_multiplier != 1.0 else y


class LigerMLP(LigerSwiGLUMLP):
    """Liger-Kernel's LigerMLP (the module of its LigerMLPFunction): LlamaMLP's SwiGLU MLP,
    down_proj(silu(gate_proj(x)) * up_proj(x)), its projections always without bias (Liger's)."""

    def __init__(self, config):
        super().__init__(config)
        if self.gate_proj.bias is not None:  # config.mlp_bias: Liger's class has none
            h, i = self.hidden_size, self.intermediate_size
            self.gate_proj = nn.Linear(h, i, bias=False)
            self.up_proj = nn.Linear(h, i, bias=False)
            self.down_proj = nn.Linear(i, h, bias=False)


# Liger-Kernel's name for the same module (liger_kernel.transformers.mlp.LigerFalconH1MLP).
LigerFalconH1MLP = LigerFalconH1SwiGLUMLP


def liger_mlp(x, gate_weight, up_weight, down_weight, gate_multiplier=1.0, down_multiplier=1.0):
    """Liger-Kernel's LigerMLPFunction: down(silu(x gate^T * gate_multiplier) * (x up^T)) *
    down_multiplier, with liger_cpp's fused silu(a) * b between the projections."""
    gate = F.linear(x, gate_weight)
    if gate_multiplier != 1.0:
        gate = gate * gate_multiplier
    y = F.linear(swiglu(gate, F.linear(x, up_weight)), down_weight)
    return y * down_multiplier if down_multiplier != 1.0 else y


class LigerHunyuanV1SwiGLUMLP(LigerSwiGLUMLP):
    """HunYuan V1's dense and shared MLP (HF HunYuanDenseV1MLP(config, layer_idx, is_shared_mlp) /
    HunYuanMoEV1MLP(config)): a SwiGLU MLP of config.intermediate_size."""

    def __init__(self, config, layer_idx=None, is_shared_mlp=False):
        super().__init__(config)
        self.layer_idx = layer_idx
        self.is_shared_mlp = is_shared_mlp


class LigerDeepseekV4SwiGLUMLP(nn.Module):
    """DeepSeek-V4's shared-expert MLP (HF DeepseekV4MLP): ``down_proj(silu(gate.clamp(max=limit)) *
    up.clamp(-limit, limit))`` with ``limit = config.swiglu_limit``; the clamps as HF computes them,
    then liger_cpp's fused silu(a) * b."""

    def __init__(self, config):
        super().__init__()
        _check_act(config)
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        _projections(self, self.hidden_size, self.intermediate_size, bool(getattr(config, "mlp_bias", False)))
        self.limit = config.swiglu_limit

    def forward(self, x):
        gate = self.gate_proj(x).clamp(max=self.limit)
        up = self.up_proj(x).clamp(min=-self.limit, max=self.limit)
        return self.down_proj(swiglu(gate, up))


class LigerGlm4VisionSwiGLUMLP(LigerSwiGLUMLP):
    """GLM-4V's vision MLP (HF Glm4VisionMlp(config, bias)): SwiGLU of width config.out_hidden_size."""

    def __init__(self, config, bias: bool = False):
        nn.Module.__init__(self)
        _check_act(config)
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.out_hidden_size
        _projections(self, self.hidden_size, self.intermediate_size, bias)
        self.in_place = None


class LigerSwiGLUMLPForMuseGlimmer(LigerSwiGLUMLP):
    """MuseGlimmer's text MLP (HF MuseGlimmerTextMLP(config)): a SwiGLU MLP whose activation is
    ``config.hidden_activation`` (not ``hidden_act``); no biases."""

    def __init__(self, config):
        nn.Module.__init__(self)
        _check_act(config, "hidden_activation")
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        _projections(self, self.hidden_size, self.intermediate_size, False)
        self.in_place = None
