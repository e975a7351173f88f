"""GeGLU MLP module, drop-in for HF's GemmaMLP (gate_proj, up_proj, down_proj, bias=False),
with liger_cpp's fused gelu(a) * b."""

from torch import nn

from liger_cpp.ops.geglu import geglu
from liger_cpp.transformers.swiglu import resolve_in_place

# HF activation names -> GELU approximation. gelu_new / gelu_fast / gelu_pytorch_tanh are all
# the tanh formula; "gelu" is the exact erf GELU.
GELU_NAMES = {"gelu_pytorch_tanh": "tanh", "gelu_new": "tanh", "gelu_fast": "tanh", "gelu": "none"}


def gelu_approximate(config) -> str:
    """config.hidden_activation (Gemma's), else config.hidden_act, else Gemma's default
    gelu_pytorch_tanh; exact 'gelu' is honoured (approximate='none')."""
    act = getattr(config, "hidden_activation", None)
    if act is None:
        act = getattr(config, "hidden_act", None)
    if act is None:
        return "tanh"
    if act not in GELU_NAMES:
        raise ValueError(
            f"liger_cpp: activation {act!r} is not supported; GeGLU needs one of {sorted(GELU_NAMES)}"
        )
    return GELU_NAMES[act]


class LigerGEGLUMLP(nn.Module):
    """down_proj(gelu(gate_proj(x)) * up_proj(x)) (HF GemmaMLP); `in_place` as in
    `LigerSwiGLUMLP`."""

    def __init__(self, config, in_place: bool | None = None):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.approximate = gelu_approximate(config)
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.in_place = in_place

    def forward(self, x):
        a, b = self.gate_proj(x), self.up_proj(x)
        ip = resolve_in_place(self.in_place, self.gate_proj, self.up_proj)
        return self.down_proj(geglu(a, b, approximate=self.approximate, in_place=ip))
