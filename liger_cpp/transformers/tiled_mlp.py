"""Tiled SwiGLU and GeGLU MLPs (Liger-Kernel's `LigerTiledSwiGLUMLP` / `LigerTiledGEGLUMLP`, the
training-mode MLPs of Hugging Face's hub kernels): the MLP over shards of the rows, computed again
in the backward, for long sequences. Same parameter names as HF's MLPs (gate_proj, up_proj,
down_proj), so state dicts load unchanged. Plain projections: one C++ op (`glu_mlp_tiled`);
otherwise (PEFT / LoRA layers, hooks) liger_cpp.ops.tiled_mlp around the module's own forward."""

from torch import nn

from liger_cpp.ops.glu_mlp import glu_mlp_tiled
from liger_cpp.ops.tiled_mlp import apply_tiled_mlp, default_shards
from liger_cpp.transformers.geglu import LigerGEGLUMLP
from liger_cpp.transformers.swiglu import SILU_NAMES, LigerSwiGLUMLP, as_dtype, projection_dtype


def _shard_forward(module, x):
    return module._untiled_forward(x)


class _Tiled:
    """What both tiled MLPs share: `num_shards` shards (None: ceil(seq / hidden), Liger-Kernel's
    rule). With plain projections (swiglu.projection_dtype: exactly nn.Linear, no hooks) one C++ op,
    liger_cpp.ops.glu_mlp.glu_mlp_tiled (its chunk loop and weight-gradient sums in C++); otherwise
    (PEFT / LoRA layers, DeepSpeed ZeRO-3's hooks) apply_tiled_mlp around the module's own forward."""

    def forward(self, x):
        g, u, d = self.gate_proj, self.up_proj, self.down_proj
        dt = projection_dtype(x, g, u, d)
        if dt is not None:
            shards = self.num_shards if self.num_shards is not None else default_shards(x)
            w = [as_dtype(p.weight, dt) for p in (g, u, d)]
            return glu_mlp_tiled(as_dtype(x, dt), *w, self._activation(), max(1, int(shards)))
        trainable = [p for p in self.parameters() if p.requires_grad]
        return apply_tiled_mlp(_shard_forward, self, x, self.num_shards, trainable)


class LigerTiledSwiGLUMLP(_Tiled, LigerSwiGLUMLP):
    """down_proj(silu(gate_proj(x)) * up_proj(x)) over shards of the rows (HF LlamaMLP's parameters,
    without biases, as Liger-Kernel's). config.hidden_act, where the config has one, must be silu /
    swish."""

    def __init__(self, config, num_shards: int | None = None):
        act = getattr(config, "hidden_act", None)
        if act is not None and act not in SILU_NAMES:
            raise ValueError(f"liger_cpp: LigerTiledSwiGLUMLP needs a SiLU / Swish activation, got {act!r}")
        nn.Module.__init__(self)
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
        self.in_place = None
        self.num_shards = num_shards

    _untiled_forward = LigerSwiGLUMLP.forward

    def _activation(self):
        return "silu"


class LigerTiledGEGLUMLP(_Tiled, LigerGEGLUMLP):
    """down_proj(gelu(gate_proj(x)) * up_proj(x)) over shards of the rows (HF GemmaMLP's
    parameters). The GELU is the config's: tanh for gelu_pytorch_tanh / gelu_new / gelu_fast (and
    without an activation in the config), exact erf for "gelu" (Liger-Kernel's takes tanh for all)."""

    def __init__(self, config, num_shards: int | None = None):
        LigerGEGLUMLP.__init__(self, config)
        self.num_shards = num_shards

    _untiled_forward = LigerGEGLUMLP.forward

    def _activation(self):
        return "gelu_tanh" if self.approximate == "tanh" else "gelu"


__all__ = ["LigerTiledGEGLUMLP", "LigerTiledSwiGLUMLP"]
