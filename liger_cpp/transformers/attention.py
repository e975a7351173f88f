"""Llama-structured attention with its q / k / v projections and RoPE as one liger_cpp op.

HF's LlamaAttention.forward (and its copies: Gemma, Granite, Ernie 4.5, Qwen2-MoE, ...; with a
sliding window: Qwen2, Mistral, Mixtral, Ministral) projects
hidden_states three times through nn.Linear, views and transposes each result, then rotates q and k.
At small batches a training step is bound by the host, and that sequence is about thirty dispatcher
calls and a dozen autograd nodes per layer. `rope=True` wraps such a class's forward: when the
conditions below hold, q, k and v come from `liger_cpp.ops.qkv_rope` (one call, one node, the same
GEMMs and RoPE kernel, bitwise the same q, k, v), and the rest is HF's: its attention interface
for the configured implementation, then o_proj. Otherwise HF's forward runs unchanged.

A KV cache is updated with the op's k and v as HF's forward updates it (HF's models build one in
training too, unless use_cache=False), so training with a model's default config and generation
take the op alike.

Conditions, checked on every call: cos and sin of the full head width
without gradient, liger_cpp's RoPE bound in the modeling module (the rope patch in effect), and the
projections plain nn.Linear (with or without bias) without hooks, of hidden_states' dtype or, under
autocast, cast to autocast's dtype as nn.Linear's autocast would (`swiglu.projection_dtype`).
"""

import inspect

from liger_cpp.ops.qkv_rope import qkv_rope
from liger_cpp.transformers.rms_norm import LigerRMSNorm
from liger_cpp.transformers.rope import liger_rotary_pos_emb
from liger_cpp.transformers.swiglu import as_dtype, hooked, projection_dtype

# The globals and attributes HF's LlamaAttention.forward reads (transformers 5.17-5.25). A forward
# that reads exactly these has Llama's structure (projections, RoPE, cache update, attention
# interface, o_proj) and nothing else (no q/k norms, sliding windows, sinks or scaling of its own).
LLAMA_ATTENTION_NAMES = frozenset(
    {
        "ALL_ATTENTION_FUNCTIONS",
        "_attn_implementation",
        "apply_rotary_pos_emb",
        "attention_dropout",
        "config",
        "contiguous",
        "eager_attention_forward",
        "get_interface",
        "head_dim",
        "k_proj",
        "layer_idx",
        "o_proj",
        "q_proj",
        "reshape",
        "scaling",
        "shape",
        "training",
        "transpose",
        "update",
        "v_proj",
        "view",
    }
)
# Classes whose forward is Llama's plus named parts, each with the names it reads (what `structure`
# checks) and what the wrapper does for it:
#   "module" / "config": the attention call's sliding_window, read from the module (Qwen2,
#     Ministral, ...) or as getattr(config, "sliding_window", None) (Mistral, Mixtral);
#   "norms": RMSNorms q_norm / k_norm on the projections before RoPE (per head: Qwen3, Qwen3-VL,
#     Gemma 3; over the whole projection: OLMo 2 / 3), taken into the op when they are liger_cpp's
#     LigerRMSNorm (the rms_norm patch);
#   "softcap": the attention call's softcap, the module's attn_logit_softcapping (Gemma 2).
# Named, not inferred: the names alone do not say where a norm sits, and Cohere 2 reads Qwen2's
# names but rotates only on its sliding layers.
NAMED_ATTENTION = {
    "Qwen2Attention": ("module",),
    "MinistralAttention": ("module",),
    "MistralAttention": ("config",),
    "MixtralAttention": ("config",),
    "Qwen3Attention": ("norms", "module"),
    "Qwen3MoeAttention": ("norms", "module"),
    "Qwen3VLTextAttention": ("norms",),
    "Qwen3VLMoeTextAttention": ("norms",),
    "Gemma3Attention": ("norms", "module"),
    "Olmo2Attention": ("norms",),
    "Olmo3Attention": ("norms", "module"),
    "Gemma2Attention": ("module", "softcap"),
}
_PART_NAMES = {
    "module": {"sliding_window"},
    "config": {"getattr"},
    "norms": {"q_norm", "k_norm"},
    "softcap": {"attn_logit_softcapping"},
}


def structure(class_name: str, forward) -> str | None:
    """How an attention forward relates to HF's LlamaAttention.forward: "llama" (it reads exactly
    LLAMA_ATTENTION_NAMES), the "+"-joined parts of NAMED_ATTENTION for a named class that reads
    exactly Llama's names and its parts' (e.g. "module", "config", "norms+module"), None (anything
    else: not wrapped)."""
    code = getattr(inspect.unwrap(forward), "__code__", None)
    if code is None:
        return None
    names = frozenset(code.co_names)
    if names == LLAMA_ATTENTION_NAMES:
        return "llama"
    parts = NAMED_ATTENTION.get(class_name)
    if parts is None:
        return None
    expected = LLAMA_ATTENTION_NAMES.union(*(_PART_NAMES[p] for p in parts))
    return "+".join(parts) if names == expected else None


def _norm_args(q_norm, k_norm, dtype):
    """(n_q, n_k, eps, offset, casting) of liger_cpp's RMSNorms q_norm / k_norm for qkv_rope, or
    None where the op cannot stand in for them: another norm class or forward, hooks, no weight, a
    weight of another dtype than the projections' (e.g. float32 norms under autocast), or options
    that differ between the two."""
    args = []
    for m in (q_norm, k_norm):
        if (
            not isinstance(m, LigerRMSNorm)
            or type(m).forward is not LigerRMSNorm.forward
            or hooked(m)
            or m._parameters.get("weight") is None
            or m.weight.dtype != dtype
        ):
            return None
        args.append((m.weight, float(m.variance_epsilon), float(m.offset), m.casting_mode))
    (wq, *opts_q), (wk, *opts_k) = args
    return (wq, wk, *opts_q) if opts_q == opts_k else None


def fused_projections_forward(hf_forward, mod, kind="llama"):
    """A forward for mod's attention class of this structure (see `structure`): qkv_rope when it
    applies (module docstring), hf_forward otherwise. Biased projections (Qwen2's) are fine; q / k
    norms ("norms" kinds) go into the op when they are liger_cpp's RMSNorm (`_norm_args`)."""
    interfaces, eager = mod.ALL_ATTENTION_FUNCTIONS, mod.eager_attention_forward
    update_kwargs = "cache" in inspect.signature(inspect.unwrap(hf_forward)).parameters  # 5.25 / 5.17
    parts = set(kind.split("+"))
    with_norms, softcap = "norms" in parts, "softcap" in parts
    window = "module" if "module" in parts else ("config" if "config" in parts else None)

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, *args, **kwargs):
        if (
            args
            or position_embeddings is None
            or hidden_states.dim() != 3
            or mod.apply_rotary_pos_emb is not liger_rotary_pos_emb
        ):
            return hf_forward(self, hidden_states, position_embeddings, attention_mask, *args, **kwargs)
        cos, sin = position_embeddings
        qp, kp, vp = self.q_proj, self.k_proj, self.v_proj
        dt = (
            None
            if cos.requires_grad or sin.requires_grad
            else projection_dtype(hidden_states, qp, kp, vp, bias=True)
        )
        if dt is None or cos.shape[-1] != self.head_dim:
            return hf_forward(self, hidden_states, position_embeddings, attention_mask, *args, **kwargs)
        norms = ()
        if with_norms:
            norms = _norm_args(self.q_norm, self.k_norm, dt)
            if norms is None:
                return hf_forward(self, hidden_states, position_embeddings, attention_mask, *args, **kwargs)
        w = [as_dtype(t, dt) for t in (qp.weight, kp.weight, vp.weight, qp.bias, kp.bias, vp.bias)]
        q, k, v = qkv_rope(as_dtype(hidden_states, dt), *w[:3], cos, sin, self.head_dim, *w[3:], *norms)
        cache = kwargs.pop("cache", None)
        cache = kwargs.pop("past_key_values", None) if cache is None else cache
        if cache is not None:  # as HF's forward calls it: 5.25 hands it the other keyword arguments
            k, v = (
                cache.update(k, v, self.layer_idx, kwargs=kwargs)
                if update_kwargs
                else cache.update(k, v, self.layer_idx)
            )
        if window == "module":
            kwargs["sliding_window"] = self.sliding_window
        elif window == "config":
            kwargs["sliding_window"] = getattr(self.config, "sliding_window", None)
        if softcap:
            kwargs["softcap"] = self.attn_logit_softcapping
        attention = interfaces.get_interface(self.config._attn_implementation, eager)
        out, weights = attention(
            self,
            q,
            k,
            v,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )
        out = out.reshape(*hidden_states.shape[:-1], -1).contiguous()
        return self.o_proj(out), weights

    forward.__wrapped_hf__ = hf_forward
    forward.__doc__ = hf_forward.__doc__
    return forward
