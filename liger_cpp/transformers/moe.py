"""MoE experts modules over liger_cpp's fused experts op (`liger_cpp.ops.moe_experts`): routed tokens
through gate_up, the gated activation and down, weighted and summed over each token's k experts, in
a few kernels around grouped GEMMs (docs/kernels/moe.md).

- `LigerExperts`: Liger-Kernel's class (transformers 5.x's stacked experts, same parameters
  `gate_up_proj` [E, 2I, H] and `down_proj` [E, H, I], so state dicts load unchanged).
- `LigerExpertsSwiGLUMixin` / `LigerGptOssExpertsMixin`: mixed into HF's own experts classes by the
  patching (class- and instance-level), so only the experts' forward changes; the router, its
  auxiliary loss and shared experts stay Hugging Face's."""

import torch
from torch import nn

from liger_cpp.ops.moe_experts import moe_experts

# config.hidden_act -> the op's activation
_ACTS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh"}


def experts_activation(config, module=None) -> str:
    """The fused op's activation for an experts module: by its config's hidden_act (SiLU ->
    SwiGLU, gelu_pytorch_tanh -> GeGLU), else by its act_fn module; a ValueError otherwise."""
    own = getattr(module, "config", None) if module is not None else None
    act = getattr(own if own is not None else config, "hidden_act", None)
    if act is None and module is not None:
        name = type(getattr(module, "act_fn", None)).__name__
        act = {"SiLU": "silu", "SiLUActivation": "silu", "PytorchGELUTanh": "gelu_pytorch_tanh"}.get(name)
    if act not in _ACTS:
        raise ValueError(
            f"liger_cpp: experts activation {act!r} is not supported; the fused experts run "
            f"{sorted(_ACTS)} (GPT-OSS's clamped GLU through its own experts class)"
        )
    return _ACTS[act]


def _run(self, hidden_states, top_k_index, top_k_weights, **kw):
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, shape[-1])
    gate_up, down = self.gate_up_proj, self.down_proj
    dev = x.device.type
    if torch.is_autocast_enabled(dev):
        # As autocast runs F.linear (HF's eager experts): operands in the autocast dtype (float32
        # master weights are cast per call, their gradients flow back through the cast).
        dt = torch.get_autocast_dtype(dev)
        gate_up, down = gate_up.to(dt), down.to(dt)
        kw = {n: (v.to(dt) if isinstance(v, torch.Tensor) else v) for n, v in kw.items()}
    with torch.autocast(dev, enabled=False):
        out = moe_experts(
            x.to(gate_up.dtype),  # HF's grouped_mm casts the input to the weights' dtype as well
            top_k_index.reshape(x.shape[0], top_k_index.shape[-1]),
            top_k_weights.reshape(x.shape[0], top_k_weights.shape[-1]),
            gate_up,
            down,
            **kw,
        )
    return out.to(hidden_states.dtype).view(shape)


class LigerExperts(nn.Module):
    """Liger-Kernel's LigerExperts: HF 5.x stacked experts (Mixtral / Qwen3-MoE / Qwen3-Next /
    DeepSeek layout) with liger_cpp's fused experts op; SiLU (SwiGLU) or gelu_pytorch_tanh (GeGLU)."""

    def __init__(self, config):
        super().__init__()
        for attr in ("num_experts", "num_local_experts", "n_routed_experts"):
            if getattr(config, attr, None) is not None:
                self.num_experts = getattr(config, attr)
                break
        inter = getattr(config, "moe_intermediate_size", None)
        self.intermediate_dim = inter if inter is not None else config.intermediate_size
        self.hidden_dim = config.hidden_size
        self.activation = experts_activation(config)
        self.gate_up_proj = nn.Parameter(
            torch.empty(self.num_experts, 2 * self.intermediate_dim, self.hidden_dim)
        )
        self.down_proj = nn.Parameter(torch.empty(self.num_experts, self.hidden_dim, self.intermediate_dim))

    def forward(self, hidden_states, top_k_index, top_k_weights):
        return _run(self, hidden_states, top_k_index, top_k_weights, activation=self.activation)


class LigerExpertsSwiGLUMixin:
    """Mixin for HF 5.x fused-experts classes with concatenated [gate; up] weights (MixtralExperts,
    Qwen3MoeExperts, ...: `gate_up_proj` [E, 2I, H], `down_proj` [E, H, I]): the forward is liger_cpp's
    fused experts op, whatever `config._experts_implementation` says (eager, grouped_mm, ...).
    Expert parallelism (HF's sentinel index E for other ranks' experts) keeps HF's forward."""

    def forward(self, hidden_states, top_k_index, top_k_weights):
        if getattr(self, "_is_expert_parallel", False):
            return super().forward(hidden_states, top_k_index, top_k_weights)
        act = experts_activation(getattr(self, "config", None), self)
        kw = {}
        if getattr(self, "has_bias", False):
            kw = dict(gate_up_bias=self.gate_up_proj_bias, down_bias=self.down_proj_bias)
        return _run(
            self,
            hidden_states,
            top_k_index,
            top_k_weights,
            activation=act,
            transposed=bool(getattr(self, "is_transposed", False)),
            interleaved=not getattr(self, "is_concatenated", True),
            **kw,
        )


class LigerGptOssExpertsMixin:
    """Mixin for HF's GptOssExperts (`gate_up_proj` [E, H, 2I] with gate / up interleaved, biases,
    the clamped GLU with `alpha` and `limit`): the forward is liger_cpp's fused experts op."""

    def forward(self, hidden_states, router_indices=None, routing_weights=None):
        if getattr(self, "_is_expert_parallel", False):
            return super().forward(hidden_states, router_indices, routing_weights)
        return _run(
            self,
            hidden_states,
            router_indices,
            routing_weights,
            gate_up_bias=self.gate_up_proj_bias,
            down_bias=self.down_proj_bias,
            activation="gpt_oss",
            transposed=True,
            interleaved=True,
            alpha=float(self.alpha),
            limit=float(self.limit),
        )


class LigerLlama4TextMoeMixin:
    """Mixin for HF's Llama4TextMoe: its routed experts through liger_cpp's fused experts op.

    HF runs every token through every expert (`torch.bmm` over E copies of the tokens), each copy
    scaled by its router score *before* the expert (Llama 4 scales the input, not the output), with
    score sigmoid(-inf) = 0 outside a token's top k, so that those copies add exact zeros. liger_cpp
    runs only the top-k copies: rows x_t * s_tj (the same bf16 products HF forms), each through its
    one expert with unit output weight, summed over j. Same values, k / E of the GEMM work; the
    router (its top-k and sigmoid) and the shared expert stay HF's, and the router's gradient flows
    through the gathered scores as through HF's scatter."""

    def forward(self, hidden_states):
        x = hidden_states.reshape(-1, self.hidden_dim)
        router_scores, router_logits = self.router(x)
        k = self.router.top_k
        # the router's own top-k (the same call on the same logits: the same experts)
        top_idx = torch.topk(router_logits, k, dim=1).indices
        scores = router_scores.gather(1, top_idx)  # sigmoid of the top-k logits, as HF scales by
        routed_in = (x.unsqueeze(1) * scores.unsqueeze(-1)).reshape(-1, x.shape[-1])  # [T k, H]
        unit = torch.ones(routed_in.shape[0], 1, dtype=routed_in.dtype, device=routed_in.device)
        experts = self.experts
        routed_out = _run(
            experts,
            routed_in,
            top_idx.reshape(-1, 1),
            unit,
            activation=experts_activation(None, experts),
            # Llama4TextExperts: gate_up_proj [E, H, 2I] (gate | up), down_proj [E, I, H]
            transposed=True,
        )
        out = self.shared_expert(x)
        out.add_(routed_out.view(x.shape[0], k, -1).sum(dim=1))
        return out, router_logits


__all__ = [
    "LigerExperts",
    "LigerExpertsSwiGLUMixin",
    "LigerGptOssExpertsMixin",
    "LigerLlama4TextMoeMixin",
    "experts_activation",
]
