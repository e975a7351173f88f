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


class LigerExpertParallelFusedMoe(nn.Module):
    """Liger's LigerExpertParallelFusedMoe(process_group=None): a SwiGLU MoE layer's experts with
    their weights passed to forward, spread over the ranks of `process_group` (expert parallelism).

    forward(hidden_states [..., H], expert_indices [..., k], expert_weights [..., k], all_B
    [E_local, I, H] (gate), all_C [E_local, I, H] (up), all_A [E_local, H, I] (down), num_experts)
    returns sum_j w_j A_e (silu(B_e x) * C_e x) for each token's experts e, in x's shape. Rank r
    holds the global experts [r E_local, (r + 1) E_local). Without a group (or a group of one),
    E_local is num_experts and liger_cpp's fused experts op runs them in place; with one, each
    (token, expert) row travels to its expert's rank and back through torch.distributed's
    differentiable all_to_all_single, and the combine happens at home. Liger's runs on NVSHMEM; this
    one runs on any backend with all-to-all (NCCL, gloo). Costs: B and C are concatenated into the
    op's [E_local, 2I, H] layout each call, and the row counts take one host synchronisation."""

    def __init__(self, process_group=None) -> None:
        super().__init__()
        self.process_group = process_group

    def forward(self, hidden_states, expert_indices, expert_weights, all_B, all_C, all_A, num_experts):
        import torch.distributed as dist

        h, k = hidden_states.shape[-1], expert_indices.shape[-1]
        e_local = all_B.shape[0]
        world = 1
        if self.process_group is not None or (
            dist.is_available() and dist.is_initialized() and e_local != num_experts
        ):
            world = dist.get_world_size(self.process_group)
        if (
            e_local * world != num_experts
            or all_C.shape != all_B.shape
            or all_A.shape != (e_local, h, all_B.shape[1])
        ):
            raise ValueError(
                f"liger_cpp: arguments 'all_B', 'all_C', 'all_A', 'num_experts': expected [E_local, I, {h}] "
                f"twice and [E_local, {h}, I] with E_local x {world} ranks = num_experts, got "
                f"{tuple(all_B.shape)}, {tuple(all_C.shape)}, {tuple(all_A.shape)} and {num_experts}"
            )
        x = hidden_states.reshape(-1, h)
        idx = expert_indices.reshape(-1, k).long()
        w = expert_weights.reshape(-1, k)
        gate_up = torch.cat((all_B, all_C), dim=1)
        if world == 1:
            return moe_experts(x, idx, w, gate_up, all_A).reshape(hidden_states.shape)
        return self._expert_parallel(x, idx, w, gate_up, all_A, e_local, world).reshape(hidden_states.shape)

    def _expert_parallel(self, x, idx, w, gate_up, down, e_local, world):
        import torch.distributed as dist
        from torch.distributed.nn.functional import all_to_all_single

        group, dev = self.process_group, x.device
        flat = idx.reshape(-1)
        dest = torch.div(flat, e_local, rounding_mode="floor")
        order = torch.argsort(dest, stable=True)  # (token, slot) rows grouped by destination rank
        send = torch.bincount(dest, minlength=world)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=group)
        send_sizes, recv_sizes = send.tolist(), recv.tolist()  # the one host synchronisation
        rows = x.index_select(0, torch.div(order, idx.shape[1], rounding_mode="floor"))
        local_ids = (flat[order] - dest[order] * e_local).to(torch.long)
        got_rows = all_to_all_single(
            x.new_empty(sum(recv_sizes), x.shape[1]), rows, recv_sizes, send_sizes, group=group
        )
        got_ids = torch.empty(sum(recv_sizes), dtype=torch.long, device=dev)
        dist.all_to_all_single(got_ids, local_ids, recv_sizes, send_sizes, group=group)
        ones = torch.ones(got_ids.shape[0], 1, dtype=w.dtype, device=dev)
        y = moe_experts(got_rows, got_ids.unsqueeze(1), ones, gate_up, down)
        back = all_to_all_single(y.new_empty(rows.shape), y, send_sizes, recv_sizes, group=group)
        # back[i] is the expert output of (token, slot) row order[i]; weight it and add it home
        weighted = back.float() * w.reshape(-1)[order].unsqueeze(1).float()  # float32 sums, as the op's
        token = torch.div(order, idx.shape[1], rounding_mode="floor")
        out = torch.zeros(x.shape, dtype=torch.float32, device=dev).index_add(0, token, weighted)
        return out.to(x.dtype)
