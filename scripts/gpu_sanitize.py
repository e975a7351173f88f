"""Representative calls of every op's default path and kept fallbacks, for compute-sanitizer.

    compute-sanitizer --tool memcheck  python3 scripts/gpu_sanitize.py
    compute-sanitizer --tool racecheck python3 scripts/gpu_sanitize.py --quick

Each case runs forward + backward once on small shapes that still reach the kernel it names (the
sanitizers slow kernels down 10-100x). Fallbacks are forced through the plan override. Cases are
listed by name with --list; --only NAME[,NAME] runs a subset, --shard I/N every N-th of them.
The script itself checks nothing but that every call returns finite values: the sanitizer's
report is the result (scripts/gpu_check.sh SANITIZE=1 runs all four tools and counts errors in
liger_cpp's kernels and elsewhere).
"""

import argparse
import sys

import torch

import liger_cpp  # noqa: F401
from liger_cpp._testing import plan_override
from liger_cpp.chunked_loss import LigerFusedLinearDPOLoss
from liger_cpp.transformers import (
    LigerFusedLinearCrossEntropyLoss,
    liger_cross_entropy,
    liger_fused_add_rms_norm,
    liger_geglu,
    liger_layer_norm,
    liger_rms_norm,
    liger_rotary_pos_emb,
    liger_swiglu,
)

DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run of the script itself
BF16 = torch.bfloat16


def _g(*shape, dtype=BF16):
    return torch.randn(*shape, device=DEV, dtype=dtype).requires_grad_(True)


def _backward(*outs):
    loss = sum((o.float() * torch.randn_like(o, dtype=torch.float32)).sum() for o in outs)
    loss.backward()


def rms(rows, cols, dtype=BF16, wdtype=None, casting="llama"):
    def run():
        x = _g(rows, cols, dtype=dtype)
        w = _g(cols, dtype=wdtype or dtype)
        _backward(liger_rms_norm(x, w, 1e-6, 0.0, casting))

    return run


def fused_add(rows, cols, dtype=BF16):
    def run():
        x, r, w = _g(rows, cols, dtype=dtype), _g(rows, cols, dtype=dtype), _g(cols, dtype=dtype)
        _backward(*liger_fused_add_rms_norm(x, r, w, 1e-6))

    return run


def layer_norm(rows, cols, dtype=BF16):
    def run():
        x, w, b = _g(rows, cols, dtype=dtype), _g(cols, dtype=dtype), _g(cols, dtype=dtype)
        _backward(liger_layer_norm(x, w, b, 1e-6))

    return run


def glu(rows, cols, kind="swiglu", dtype=BF16):
    def run():
        a, b = _g(rows, cols, dtype=dtype), _g(rows, cols, dtype=dtype)
        _backward(liger_swiglu(a, b) if kind == "swiglu" else liger_geglu(a, b))

    return run


def rope(b, s, hq, hk, d, dtype=BF16):
    def run():
        q, k = _g(b, hq, s, d, dtype=dtype), _g(b, hk, s, d, dtype=dtype)
        f = torch.randn(1, s, d // 2, device=DEV)
        emb = torch.cat([f, f], -1)
        _backward(*liger_rotary_pos_emb(q, k, emb.cos(), emb.sin()))

    return run


def glu_mlp_case(rows, hidden, inter, activation="silu", in_place=True, dtype=BF16):
    from liger_cpp.ops import glu_mlp

    def run():
        x = _g(rows, hidden, dtype=dtype)
        wg, wu, wd = (
            _g(inter, hidden, dtype=dtype),
            _g(inter, hidden, dtype=dtype),
            _g(hidden, inter, dtype=dtype),
        )
        _backward(glu_mlp(x, wg, wu, wd, activation, in_place))

    return run


def qkv_rope_case(b, s, hidden, hq, hk, d, bias=False, norms=None, dtype=BF16):
    """norms: None, "head" ((D,) weights, Qwen3) or "proj" ((heads D,) weights, OLMo 2)."""
    from liger_cpp.ops import qkv_rope

    def run():
        x = _g(b, s, hidden, dtype=dtype)
        w = [_g(h * d, hidden, dtype=dtype) for h in (hq, hk, hk)]
        bs = [_g(h * d, dtype=dtype) for h in (hq, hk, hk)] if bias else [None] * 3
        ns = [None, None]
        if norms:
            ns = [_g(d if norms == "head" else h * d, dtype=dtype) for h in (hq, hk)]
        f = torch.randn(b, s, d // 2, device=DEV)
        emb = torch.cat([f, f], -1)
        _backward(*qkv_rope(x, *w, emb.cos().to(dtype), emb.sin().to(dtype), d, *bs, *ns))

    return run


def llama4_rope(b, s, h, d, vision=False, dtype=BF16):
    from liger_cpp.transformers import liger_llama4_text_rotary_pos_emb, liger_llama4_vision_rotary_pos_emb

    def run():
        q, k = _g(b, s, h, d, dtype=dtype), _g(b, s, h, d, dtype=dtype)
        angle = torch.randn(s, d // 2, device=DEV)
        freqs = torch.polar(torch.ones_like(angle), angle)
        if vision:  # HF's (N, 1, D/2) view, one table for every image and head
            _backward(*liger_llama4_vision_rotary_pos_emb(q, k, freqs[:, None]))
        else:
            _backward(*liger_llama4_text_rotary_pos_emb(q, k, freqs.expand(b, s, d // 2)))

    return run


def relu_squared(rows, cols, dtype=BF16):
    from liger_cpp.transformers import liger_relu_squared

    def run():
        _backward(liger_relu_squared(_g(rows, cols, dtype=dtype)))

    return run


def ce(rows, vocab, dtype=BF16):
    def run():
        x = _g(rows, vocab, dtype=dtype)
        t = torch.randint(0, vocab, (rows,), device=DEV)
        t[::7] = -100
        liger_cross_entropy(x, t, label_smoothing=0.1).backward()

    return run


def gemm_then_read(rows, hidden, vocab, dtype=BF16):
    """initcheck's control: logits written by cuBLAS (as the chunk loops write them), then read by
    ATen's own reduction and by liger_cpp's CE kernel. A report on ATen's read says the tool does not
    see cuBLAS's writes (its reports on our kernels reading such buffers are then the tool's)."""

    def run():
        x = torch.randn(rows, hidden, device=DEV, dtype=dtype)
        w = torch.randn(vocab, hidden, device=DEV, dtype=dtype)
        logits = torch.empty(rows, vocab, device=DEV, dtype=dtype)
        torch.mm(x, w.t(), out=logits)
        print(f"control: ATen sum of cuBLAS's output {float(logits.float().sum()):.3e}", flush=True)
        t = torch.randint(0, vocab, (rows,), device=DEV)
        ce = float(liger_cross_entropy(logits, t))
        print(f"control: liger_cpp CE of cuBLAS's output {ce:.3e}", flush=True)

    return run


def flce(rows, hidden, vocab, dtype=BF16):
    def run():
        x, w = _g(rows, hidden, dtype=dtype), _g(vocab, hidden, dtype=dtype)
        t = torch.randint(0, vocab, (rows,), device=DEV)
        LigerFusedLinearCrossEntropyLoss()(w, x, t).backward()

    return run


def dpo(pairs, seq, hidden, vocab, dtype=BF16):
    def run():
        x, w = _g(2 * pairs, seq, hidden, dtype=dtype), _g(vocab, hidden, dtype=dtype)
        t = torch.randint(0, vocab, (2 * pairs, seq), device=DEV)
        ref_x, ref_w = torch.randn_like(x).detach(), torch.randn_like(w).detach()
        loss, _ = LigerFusedLinearDPOLoss()(w, x, t, ref_input=ref_x, ref_weight=ref_w)
        loss.backward()

    return run


def grpo(seqs, seq, hidden, vocab, dtype=BF16, **kw):
    from liger_cpp.ops import fused_linear_grpo

    def run():
        x, w = _g(seqs, seq, hidden, dtype=dtype), _g(vocab, hidden, dtype=dtype)
        ids = torch.randint(0, vocab, (seqs, seq), device=DEV)
        mask = torch.ones(seqs, seq, device=DEV)
        mask[0, seq // 2 :] = 0
        adv = torch.randn(seqs, device=DEV)
        old = -torch.rand(seqs, seq, device=DEV) * 5
        ref_x, ref_w = torch.randn_like(x).detach(), torch.randn_like(w).detach()
        loss = fused_linear_grpo(x, w, ids, mask, adv, None, None, old, ref_x, ref_w, **kw)[0]
        loss.backward()

    return run


def distill(rows, hs, ht, vs, vt, loss="jsd", beta=0.5, dtype=BF16):
    from liger_cpp.ops import fused_linear_distillation

    def run():
        xs, ws = _g(rows, hs, dtype=dtype), _g(vs, hs, dtype=dtype)
        xt, wt = torch.randn(rows, ht, device=DEV, dtype=dtype), torch.randn(vt, ht, device=DEV, dtype=dtype)
        t = torch.randint(0, vs, (rows,), device=DEV)
        t[::5] = -100
        fused_linear_distillation(xs, ws, xt, wt, t, loss=loss, beta=beta, temperature=0.9)[0].backward()

    return run


def logprobs(rows, hidden, vocab, dtype=BF16):
    from liger_cpp.ops import fused_linear_token_logprobs

    def run():
        x, w = _g(rows, hidden, dtype=dtype), _g(vocab, hidden, dtype=dtype)
        t = torch.randint(0, vocab, (rows,), device=DEV)
        t[::7] = -100
        _backward(*fused_linear_token_logprobs(x, w, t, temperature=0.8, return_entropy=True))

    return run


def selective(rows, vocab, dtype=BF16):
    """Log-probs of given tokens from given logits, a quarter of the columns masked (-inf), some
    rows ignored: the logprob forward kernel without the entropy."""
    from liger_cpp.ops import selective_log_softmax

    def run():
        z = torch.randn(rows, vocab, device=DEV, dtype=dtype)
        z[:, : vocab // 4] = -float("inf")
        t = torch.randint(vocab // 4, vocab, (rows,), device=DEV)
        t[::5] = -100
        selective_log_softmax(z, t, 0.9)

    return run


def divergences(rows, vocab, dtype=BF16):
    from liger_cpp.ops import jsd, kl_div, tvd

    def run():
        q = torch.log_softmax(torch.randn(rows, vocab, device=DEV), -1).to(dtype).requires_grad_(True)
        p = torch.log_softmax(torch.randn(rows, vocab, device=DEV), -1).to(dtype)
        sl = torch.randint(0, vocab, (rows,), device=DEV)
        sl[::3] = -100
        _backward(jsd(q, p, sl, beta=0.3), kl_div(q, p, "none", True), tvd(q.exp(), p.exp(), sl, "sum"))

    return run


# name -> (callable, plan override or {}). Shapes reach the kernels named (see docs/kernels/*.md).
def kl_div_head(rows, hidden, vocab, dtype=BF16, q_dtype=torch.float32):
    from liger_cpp.ops import fused_linear_kl_div

    def run():
        x, w = _g(rows, hidden, dtype=dtype), _g(vocab, hidden, dtype=dtype)
        q = torch.softmax(torch.randn(rows, vocab, device=DEV), -1).to(q_dtype)
        labels = torch.randint(0, vocab, (rows,), device=DEV)
        labels[::5] = -100
        fused_linear_kl_div(
            x, w, q, labels, temperature=2.0, chunk_rows=64, accum_dtype=torch.float32
        ).backward()

    return run


def moe(tokens, experts, k, hidden, inter, dtype=BF16, gpt_oss=False, drop=False):
    from liger_cpp.ops.moe_experts import moe_experts

    def run():
        x, w = _g(tokens, hidden, dtype=dtype), _g(tokens, k, dtype=dtype)
        idx = torch.stack([torch.randperm(experts, device=DEV)[:k] for _ in range(tokens)])
        if drop and DEV == "cuda":  # slots outside [0, E): dropped on CUDA (an error on the CPU)
            idx[::3, 0] = experts
        gu_shape = (experts, hidden, 2 * inter) if gpt_oss else (experts, 2 * inter, hidden)
        dn_shape = (experts, inter, hidden) if gpt_oss else (experts, hidden, inter)
        gu, dn = _g(*gu_shape, dtype=dtype), _g(*dn_shape, dtype=dtype)
        if gpt_oss:
            b1, b2 = _g(experts, 2 * inter, dtype=dtype), _g(experts, hidden, dtype=dtype)
            _backward(moe_experts(x, idx, w, gu, dn, b1, b2, "gpt_oss", True, True))
        else:
            _backward(moe_experts(x, idx, w, gu, dn))

    return run


CASES = {
    "rms_small_rows": (rms(4096, 64), {}),
    "rms_4096": (rms(512, 4096), {}),
    "rms_5120": (rms(512, 5120), {}),
    "rms_fp32w_gemma": (rms(300, 2048, wdtype=torch.float32, casting="gemma"), {}),
    "rms_16384": (rms(64, 16384), {}),
    "rms_32768": (rms(16, 32768), {}),
    "rms_unaligned": (rms(37, 1000), {}),
    "rms_fp32": (rms(200, 4096, dtype=torch.float32), {}),
    "fused_add_4096": (fused_add(512, 4096), {}),
    "fused_add_unaligned": (fused_add(37, 1000), {}),
    "layer_norm_4096": (layer_norm(512, 4096), {}),
    "layer_norm_unaligned": (layer_norm(37, 1000), {}),
    "layer_norm_wide": (layer_norm(8, 32768), {}),
    "swiglu": (glu(512, 4096), {}),
    "swiglu_odd": (glu(37, 1001), {}),
    "geglu": (glu(512, 4096, "geglu"), {}),
    "rope": (rope(2, 256, 8, 2, 128), {}),
    "rope_odd": (rope(1, 37, 5, 1, 92), {}),
    "llama4_rope_text": (llama4_rope(2, 37, 4, 64), {}),
    "llama4_rope_vision_odd": (llama4_rope(3, 17, 3, 88, vision=True), {}),
    # The composites (csrc/aten/composite): cuBLAS GEMMs around the GLU, RoPE and RMSNorm kernels on
    # the rows and strided head views they hand those kernels.
    "glu_mlp_in_place": (glu_mlp_case(300, 256, 704), {}),
    "glu_mlp_geglu_odd": (glu_mlp_case(37, 96, 80, "gelu_tanh", False), {}),
    "qkv_rope": (qkv_rope_case(2, 37, 256, 8, 2, 64), {}),
    "qkv_rope_bias_odd": (qkv_rope_case(1, 37, 96, 5, 1, 92, bias=True), {}),
    "qkv_rope_head_norms": (qkv_rope_case(2, 37, 256, 8, 2, 64, norms="head"), {}),
    "qkv_rope_proj_norms": (qkv_rope_case(1, 37, 256, 4, 4, 64, norms="proj"), {}),
    "relu_squared": (relu_squared(512, 4096), {}),
    "relu_squared_odd": (relu_squared(37, 1001), {}),
    "ce_32000": (ce(64, 32000), {}),
    "ce_151936": (ce(16, 151936), {}),
    "ce_odd": (ce(37, 1001), {}),
    "flce": (flce(300, 256, 4099), {}),
    "dpo": (dpo(2, 37, 128, 1001), {}),
    # Kept fallbacks, forced (docs/tuning.md): each where the forced kernel can take the call.
    "rms_fwd_cached": (rms(512, 4096), {"rms_fwd": "cached"}),
    "rms_fwd_l2hint": (rms(64, 4096), {"rms_fwd": "l2hint"}),
    "rms_bwd_pipe": (rms(512, 4096), {"rms_bwd": "pipe"}),
    "rms_bwd_cached": (rms(64, 16384), {"rms_bwd": "cached"}),
    "rms_bwd_generic": (rms(300, 2048), {"rms_bwd": "generic"}),
    "fused_add_bwd_pipe": (fused_add(512, 4096), {"rms_bwd": "pipe"}),
    "ln_bwd_tma_unpaired": (layer_norm(512, 4096), {"ln_bwd": "tma_unpaired"}),
    "ln_bwd_pipe16": (layer_norm(512, 4096), {"ln_bwd": "pipe16"}),
    "ln_bwd_pipe": (layer_norm(300, 2048), {"ln_bwd": "pipe"}),
    "ln_bwd_generic": (layer_norm(300, 2048), {"ln_bwd": "generic"}),
    "glu_generic": (glu(512, 4096), {"glu": "generic"}),
    "ce_two_pass": (ce(64, 32000), {"ce": "two_pass"}),
    "ce_cluster": (ce(64, 32000), {"ce": "cluster"}),
    "ce_smem_1": (ce(16, 151936), {"ce_smem_blocks": "1"}),
    "no_pdl": (rms(512, 4096), {"pdl": "off"}),
    # RL / distillation (docs/kernels/rl_losses.md): GRPO through the CE row step, in one chunk and
    # in pieces of a sequence (two phases for sequence-level sampling), the distillation row kernel
    # (aligned with a padded teacher vocabulary, odd widths, both grids), log-probs with entropy, the
    # divergences of given distributions.
    "grpo": (grpo(2, 37, 64, 4096), {}),
    "control_gemm_then_read": (gemm_then_read(74, 64, 4096), {}),
    "grpo_pieces_sequence": (grpo(1, 300, 64, 1001, chunk_rows=64, importance_sampling_level="sequence"), {}),
    "distill_jsd": (distill(300, 64, 96, 4096, 4104), {}),
    "distill_jsd_smem_8": (distill(64, 64, 96, 4096, 4104, beta=0.0), {"distill_smem_blocks": "8"}),
    "distill_jsd_block": (distill(64, 64, 96, 4096, 4104), {"distill": "block"}),
    "distill_cosine": (distill(64, 32, 48, 4000, 4104, loss="cosine"), {}),
    "distill_cosine_odd": (distill(37, 32, 48, 1001, 1001, loss="cosine"), {}),
    "logprobs_entropy": (logprobs(300, 64, 4096), {}),
    "logprobs_entropy_odd": (logprobs(37, 32, 1001), {}),
    "selective_masked": (selective(64, 40000), {}),
    "selective_masked_odd": (selective(37, 1001, torch.float32), {}),
    "divergences": (divergences(64, 4096), {}),
    "divergences_odd": (divergences(37, 1001), {}),
    "fused_linear_kl_div": (kl_div_head(300, 64, 4099), {}),
    "fused_linear_kl_div_smem": (kl_div_head(300, 64, 4096), {}),
    "fused_linear_kl_div_smem_bf16_q": (kl_div_head(64, 64, 4096, q_dtype=BF16), {}),
    "fused_linear_kl_div_block": (kl_div_head(64, 64, 4096), {"distill": "block"}),
    # Fused MoE experts (docs/kernels/moe.md): the grouped GEMMs with empty experts and E = 256, the
    # per-expert loop (float32, odd sizes), GPT-OSS's interleaved layout with biases, dropped slots.
    "moe_grouped": (moe(300, 64, 8, 128, 64), {}),
    "moe_many_experts": (moe(40, 256, 8, 64, 32), {}),
    "moe_loop_odd": (moe(37, 7, 3, 52, 20, dtype=torch.float32), {}),
    "moe_gpt_oss": (moe(64, 8, 4, 64, 32, gpt_oss=True), {}),
    "moe_dropped": (moe(64, 8, 2, 64, 32, drop=True), {}),
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", action="store_true")
    p.add_argument("--only", default="")
    p.add_argument("--shard", default="0/1", help="I/N: every N-th case from the I-th (parallel processes)")
    a = p.parse_args()
    if a.list:
        print("\n".join(CASES))
        return 0
    names = a.only.split(",") if a.only else list(CASES)
    i, n = (int(v) for v in a.shard.split("/"))
    names = names[i::n]
    torch.manual_seed(0)
    for name in names:
        fn, override = CASES[name]
        with plan_override(**override):
            fn()
        if DEV == "cuda":
            torch.cuda.synchronize()
        print(f"ran {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
