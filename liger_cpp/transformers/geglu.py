"""GeGLU MLP module, drop-in for HF's GemmaMLP (gate_proj, up_proj, down_proj, bias=False),
with liger_cpp's fused gelu(a) * b."""

import torch
from torch import nn

from liger_cpp.ops.geglu import geglu
from liger_cpp.ops.glu_mlp import glu_mlp
from liger_cpp.transformers.swiglu import as_dtype, projection_dtype, resolve_in_place

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
        g, u, d = self.gate_proj, self.up_proj, self.down_proj
        dt = projection_dtype(x, g, u, d)
        if dt is not None:  # one op and one autograd node (liger_cpp.ops.glu_mlp)
            act = "gelu_tanh" if self.approximate == "tanh" else "gelu"
            w = [as_dtype(p.weight, dt) for p in (g, u, d)]
            return glu_mlp(as_dtype(x, dt), *w, act, self.in_place is not False)
        a, b = g(x), u(x)
        ip = resolve_in_place(self.in_place, g, u)
        return d(geglu(a, b, approximate=self.approximate, in_place=ip))


def gemma4_kv_shared(config, layer_idx) -> bool:
    """Whether Gemma 4's layer reuses an earlier layer's keys and values, as HF decides it:
    ``config.kv_sharing_modes[layer_idx] == "reuse"`` (transformers 5.24), or the last
    ``config.num_kv_shared_layers`` layers (5.17, which has no kv_sharing_modes)."""
    if layer_idx is None:
        return False
    modes = getattr(config, "kv_sharing_modes", None)
    if modes is not None:
        return modes[layer_idx] == "reuse"
    first = config.num_hidden_layers - (getattr(config, "num_kv_shared_layers", 0) or 0)
    return layer_idx >= first > 0


class LigerGEGLUMLPForGemma4(LigerGEGLUMLP):
    """Gemma 4's text MLP (HF Gemma4TextMLP(config, layer_idx)): GeGLU of config.intermediate_size,
    twice as wide on the KV-shared layers (gemma4_kv_shared) when ``config.use_double_wide_mlp``
    is set, as HF builds it."""

    def __init__(self, config, layer_idx=None):
        nn.Module.__init__(self)
        double = bool(getattr(config, "use_double_wide_mlp", False)) and gemma4_kv_shared(config, layer_idx)
        self.config = config
        self.layer_idx = layer_idx
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size * (2 if double else 1)
        self.approximate = gelu_approximate(config)
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.in_place = None


class LigerGEGLUMLPForGemma3n(LigerGEGLUMLP):
    """Gemma 3n's text MLP (HF Gemma3nTextMLP(config, layer_idx)): GeGLU of the layer's
    ``config.intermediate_size[layer_idx]``; on the layers with ``activation_sparsity > 0`` the gate
    goes through HF's Gaussian top-k (``relu(gate - (mean + std * icdf(sparsity)))``, computed as HF
    computes it) before the fused gelu(gate) * up."""

    def __init__(self, config, layer_idx=0):
        nn.Module.__init__(self)
        sizes = config.intermediate_size
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = sizes[layer_idx] if isinstance(sizes, (list, tuple)) else sizes
        self.approximate = gelu_approximate(config)
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.activation_sparsity = config.activation_sparsity_pattern[layer_idx]
        self.in_place = None

    def _gaussian_topk(self, inputs):
        target = torch.tensor(self.activation_sparsity, dtype=torch.float32, device=inputs.device)
        std_multiplier = torch.distributions.normal.Normal(0, 1).icdf(target).type(inputs.dtype)
        mean = torch.mean(inputs, dim=-1, keepdim=True)
        std = torch.std(inputs, dim=-1, keepdim=True, unbiased=False)
        return nn.functional.relu(inputs - (mean + std * std_multiplier))

    def forward(self, x):
        a = self.gate_proj(x)
        sparse = self.activation_sparsity > 0.0
        if sparse:
            a = self._gaussian_topk(a)
        b = self.up_proj(x)
        ip = (not sparse) and resolve_in_place(self.in_place, self.gate_proj, self.up_proj)
        return self.down_proj(geglu(a, b, approximate=self.approximate, in_place=ip))
