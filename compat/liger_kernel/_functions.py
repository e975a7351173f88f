"""Liger-Kernel's autograd Function names with their ``.apply`` argument order and defaults, on
liger_cpp's ops (whose autograd is registered with torch.library, not Python autograd Functions).

The chunked-loss Functions (DPO ... GRPO, JSD, cosine) are in _chunked_functions.py: subclasses of
liger_cpp's chunked-loss bases, as in Liger-Kernel. Each other class only has ``apply``; its result
is Liger-Kernel's (for the cross-entropy family the
4-tuple (loss, z_loss, token_accuracy, predicted_tokens), unrequested entries None). The one
deliberate difference: ``in_place`` defaults to False (liger_cpp's documented safety choice), and
cross entropy never overwrites its logits with the gradient.
"""

import torch

from liger_cpp.ops.ce_tvd import fused_ce_tvd
from liger_cpp.ops.cross_entropy import cross_entropy as _cross_entropy
from liger_cpp.ops.divergence import jsd as _jsd
from liger_cpp.ops.divergence import kl_div as _kl_div
from liger_cpp.ops.divergence import tvd as _tvd
from liger_cpp.ops.fused_add_rms_norm import fused_add_rms_norm as _fused_add_rms_norm
from liger_cpp.ops.geglu import geglu as _geglu
from liger_cpp.ops.grpo_logits import grpo_loss_on_logits
from liger_cpp.ops.layer_norm import layer_norm as _layer_norm
from liger_cpp.ops.llama4_rope import llama4_rope as _llama4_rope
from liger_cpp.ops.relu_squared import relu_squared as _relu_squared
from liger_cpp.ops.rms_norm import rms_norm as _rms_norm
from liger_cpp.ops.swiglu import swiglu as _swiglu
from liger_cpp.transformers import functional as _functional
from liger_cpp.transformers.qwen2vl_mrope import liger_multimodal_rotary_pos_emb
from liger_cpp.transformers.rope import liger_rotary_pos_emb
from liger_cpp.transformers.swiglu import liger_mlp
from liger_kernel._chunked_functions import (  # noqa: F401 (re-exported: _implemented.py names them here)
    LigerFusedLinearCosineSimilarityFunction,
    LigerFusedLinearCPOFunction,
    LigerFusedLinearDPOFunction,
    LigerFusedLinearGRPOFunction,
    LigerFusedLinearJSDFunction,
    LigerFusedLinearKTOFunction,
    LigerFusedLinearORPOFunction,
    LigerFusedLinearSimPOFunction,
)


def _four(out, loss_only: bool):
    if loss_only:
        return out, None, None, None
    return out.loss, out.z_loss, out.token_accuracy, out.predicted_tokens


class LigerCrossEntropyFunction:
    @staticmethod
    def apply(
        _input,
        target,
        weight,
        ignore_index=-100,
        lse_square_scale=0.0,
        label_smoothing=0.0,
        reduction="mean",
        softcap=None,
        return_z_loss=False,
        return_token_accuracy=False,
        return_predicted_tokens=False,
    ):
        out = _cross_entropy(
            _input,
            target,
            weight,
            ignore_index=ignore_index,
            label_smoothing=label_smoothing,
            lse_square_scale=lse_square_scale,
            softcap=softcap,
            reduction=reduction,
            return_z_loss=return_z_loss,
            return_token_accuracy=return_token_accuracy,
            return_predicted_tokens=return_predicted_tokens,
        )
        return _four(out, not (return_z_loss or return_token_accuracy or return_predicted_tokens))


class LigerFusedLinearCrossEntropyFunction:
    @staticmethod
    def apply(
        _input,
        weight,
        target,
        bias=None,
        ce_weight=None,
        ignore_index=-100,
        lse_square_scale=0.0,
        label_smoothing=0.0,
        reduction="mean",
        softcap=None,
        return_z_loss=False,
        accum_dtype=None,
        use_token_scaling=False,
        return_token_accuracy=False,
        return_predicted_tokens=False,
        ce_impl=None,
        ce_mode=None,
        chunk_mem_const=None,
    ):
        """`ce_impl` / `ce_mode` (Liger-Kernel's inner kernel choice) and `chunk_mem_const` (its chunk
        sizing constant) are accepted and not used: liger_cpp has one implementation and sizes its
        chunks itself."""
        extra = {"use_token_scaling": True} if use_token_scaling else {}
        out = _functional.liger_fused_linear_cross_entropy(
            _input,
            weight,
            target,
            bias=bias,
            ce_weight=ce_weight,
            ignore_index=ignore_index,
            lse_square_scale=lse_square_scale,
            label_smoothing=label_smoothing,
            reduction=reduction,
            softcap=softcap,
            return_z_loss=return_z_loss,
            accum_dtype=accum_dtype,
            return_token_accuracy=return_token_accuracy,
            return_predicted_tokens=return_predicted_tokens,
            **extra,
        )
        return _four(out, not (return_z_loss or return_token_accuracy or return_predicted_tokens))


class LigerRMSNormFunction:
    @staticmethod
    def apply(X, W, eps, offset=0.0, casting_mode="llama", in_place=False, row_mode=None):
        """`row_mode` (Liger-Kernel's row or block kernel) is accepted and not used."""
        return _rms_norm(X, W, eps, offset=offset, casting_mode=casting_mode, in_place=in_place)


class LigerFusedAddRMSNormFunction:
    @staticmethod
    def apply(X, R, W, eps, offset=0.0, casting_mode="llama", in_place=False):
        return _fused_add_rms_norm(X, R, W, eps, offset=offset, casting_mode=casting_mode, in_place=in_place)


class LigerLayerNormFunction:
    @staticmethod
    def apply(X, W, B, eps):
        return _layer_norm(X, W, B, eps)


class LigerRopeFunction:
    @staticmethod
    def apply(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, rotary_dim=None):
        return liger_rotary_pos_emb(q, k, cos, sin, position_ids, unsqueeze_dim, rotary_dim)


class LigerQwen2VLMRopeFunction:
    @staticmethod
    def apply(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
        return liger_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section, unsqueeze_dim)


class LigerSiLUMulFunction:
    @staticmethod
    def apply(a, b, gate_multiplier=1.0, down_multiplier=1.0):
        """silu(a * gate_multiplier) * b * down_multiplier (Falcon-H1's multipliers, applied around
        liger_cpp's fused silu(a) * b)."""
        if gate_multiplier != 1.0:
            a = a * gate_multiplier
        out = _swiglu(a, b)
        return out * down_multiplier if down_multiplier != 1.0 else out


class LigerFusedGateUpSiLUMulFunction:
    @staticmethod
    def apply(y, in_place=False):
        """silu(gate) * up of one [..., 2 I] tensor holding gate then up (Megatron's linear_fc1
        layout): liger_cpp's SwiGLU kernel reads the two strided halves in place, no copy.
        in_place=True lets the backward write the halves' gradients into y (visible to autograd:
        y's version counter records it)."""
        if y.shape[-1] % 2:
            raise ValueError(
                f"liger_cpp: argument 'y': expected an even last dimension, got {tuple(y.shape)}"
            )
        gate, up = y.chunk(2, dim=-1)
        return _swiglu(gate, up, in_place=in_place)


class LigerGELUMulFunction:
    @staticmethod
    def apply(a, b):
        return _geglu(a, b, approximate="tanh")


class LigerFusedMoEFunction:
    @staticmethod
    def apply(x, gate_up_proj, down_proj, top_k_index, top_k_weights):
        from liger_cpp.ops.moe_experts import moe_experts

        return moe_experts(x, top_k_index, top_k_weights, gate_up_proj, down_proj)


class LigerReLUSquaredFunction:
    @staticmethod
    def apply(X):
        return _relu_squared(X)


class LigerLlama4RopeFunction:
    @staticmethod
    def apply(q, k, freqs_cis, BLOCK_SIZE=None):
        """q, k (B, S, H, D) times complex freqs_cis on interleaved pairs; BLOCK_SIZE (Triton's) is
        accepted and unused."""
        del BLOCK_SIZE
        if freqs_cis.dim() == 3 and freqs_cis.shape[1] == 1 and q.shape[1] == freqs_cis.shape[0]:
            freqs_cis = freqs_cis[:, 0]  # the vision table (N, 1, D/2)
        return _llama4_rope(q, k, freqs_cis)


class LigerJSDFunction:
    @staticmethod
    def apply(_input, target, shift_labels=None, beta=0.5, ignore_index=-100, jsd_impl=None, jsd_mode=None):
        return _jsd(_input, target, shift_labels, beta, ignore_index)


class LigerKLDivLossFunction:
    @staticmethod
    def apply(y_pred, y_true, reduction="batchmean", log_target=False, eps=1e-10):
        return _kl_div(y_pred, y_true, reduction, log_target, eps)


class LigerTVDLossFunction:
    @staticmethod
    def apply(p, q, shift_labels=None, reduction="batchmean", ignore_index=-100):
        return _tvd(p, q, shift_labels, reduction, ignore_index)


class LigerFusedCETVDFunction:
    @staticmethod
    def apply(student_logits, teacher_logits, target, ignore_index=-100):
        return fused_ce_tvd(student_logits, teacher_logits, target, ignore_index)


def fused_ce_tvd_forward(student_logits, teacher_logits, target, ignore_index):
    """Liger's kernel entry point: (ce, tvd, student_lse, teacher_lse, sigma), each (BT,), no autograd."""
    with torch.no_grad():
        ce, tvd, stats = torch.ops.liger.ce_tvd_fwd(student_logits, teacher_logits, target, ignore_index)
    return ce, tvd, stats[:, 0], stats[:, 1], stats[:, 2]


def fused_ce_tvd_backward(
    grad_ce, grad_tvd, student_logits, teacher_logits, target, student_lse, teacher_lse, sigma, ignore_index
):
    """Liger's backward entry point: the student's gradient from the forward's per-row statistics."""
    stats = torch.stack([student_lse, teacher_lse, sigma], dim=1)
    with torch.no_grad():
        return torch.ops.liger.ce_tvd_bwd(
            grad_ce, grad_tvd, student_logits, teacher_logits, target, stats, ignore_index
        )


class GrpoLossFunction:
    """Liger's GrpoLossFunction.apply: reduce=True gives (loss, kl mean or None, clip ratio), reduce=False
    (per-token loss, KL or None, clipping) times the mask; loss_type 'vespo' takes phi_seq (Liger's
    triton_grpo_loss computes it)."""

    @staticmethod
    def apply(
        logits,
        old_logp,
        ref_logp,
        completion_ids,
        advantages,
        completion_mask,
        temperature,
        beta,
        eps_low,
        eps_high,
        inplace,
        loss_type="grpo",
        max_completion_length=None,
        reduce=True,
        importance_sampling_level="token",
        sapo_temperature_pos=1.0,
        sapo_temperature_neg=1.05,
        vllm_is_ratio=None,
        delta=None,
        use_bias_correction_kl=False,
        num_items_in_batch=None,
        phi_seq=None,
    ):
        if loss_type == "vespo" and phi_seq is None:
            raise ValueError(
                "liger_cpp: argument 'phi_seq': loss_type='vespo' requires phi_seq pre-computed (use "
                "triton_grpo_loss, which computes it)"
            )
        return grpo_loss_on_logits(
            logits,
            old_logp,
            ref_logp,
            completion_ids,
            advantages,
            completion_mask,
            temperature,
            beta,
            eps_low,
            eps_high,
            inplace,
            loss_type,
            max_completion_length,
            reduce,
            importance_sampling_level,
            sapo_temperature_pos,
            sapo_temperature_neg,
            vllm_is_ratio,
            delta,
            use_bias_correction_kl,
            num_items_in_batch,
            phi_seq,
        )


class LigerMLPFunction:
    @staticmethod
    def apply(input, gate_weight, up_weight, down_weight, gate_multiplier=1.0, down_multiplier=1.0):
        return liger_mlp(input, gate_weight, up_weight, down_weight, gate_multiplier, down_multiplier)


class LigerFusedLinearKLDivFunction:
    # liger_fused_linear_kl_div takes .apply's arguments in Liger-Kernel's order
    apply = staticmethod(_functional.liger_fused_linear_kl_div)


class LigerFusedLinearJSDOps:  # liger_kernel.ops.fused_linear_jsd.LigerFusedLinearJSDFunction
    @staticmethod
    def apply(
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        shift_labels=None,
        jsd_beta=0.5,
        ignore_index=-100,
        temperature=1.0,
        accum_dtype=None,
        jsd_impl=None,
        jsd_mode=None,
    ):
        return _functional.liger_fused_linear_jsd(
            student_input,
            student_weight,
            teacher_input,
            teacher_weight,
            shift_labels,
            jsd_beta=jsd_beta,
            ignore_index=ignore_index,
            temperature=temperature,
            accum_dtype=accum_dtype,
        )
