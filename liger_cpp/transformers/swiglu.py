"""SwiGLU MLP modules, drop-in for HF's LlamaMLP, Phi3MLP and MixtralBlockSparseTop2MLP (same
parameter names, so state dicts load unchanged), with liger_cpp's fused silu(a) * b."""

from torch import nn

from liger_cpp.ops.swiglu import swiglu

SILU_NAMES = ("silu", "swish")


def _check_act(config, attr="hidden_act"):
    act = getattr(config, attr, None)
    if act not in SILU_NAMES:
        raise ValueError(
            f"liger_cpp: config.{attr} {act!r} is not supported; SwiGLU needs one of {SILU_NAMES}"
        )


class LigerSwiGLUMLP(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)) (HF LlamaMLP, bias=False).

    `in_place=True` lets the backward write its gradients into the gate and up projections'
    outputs (see `liger_cpp.ops.swiglu.swiglu`)."""

    def __init__(self, config, in_place: bool = False):
        super().__init__()
        _check_act(config)
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.in_place = in_place

    def forward(self, x):
        return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x), in_place=self.in_place))


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

    def __init__(self, config, in_place: bool = False):
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
        return self.w2(swiglu(self.w1(x), self.w3(x), in_place=self.in_place))
