"""Liger-Kernel's chunked-loss autograd Functions (DPO, ORPO, CPO, SimPO, KTO, GRPO, JSD, cosine) as
subclasses of liger_cpp's chunked-loss base classes, as in Liger-Kernel.

``apply`` on the class itself runs liger_cpp's fused C++ loss (liger_cpp.chunked_loss.functional),
argument for argument. A subclass that overrides the loss function (``preference_loss_fn``,
``ppo_loss_fn``, ``distillation_loss_fn``), ``forward`` or ``backward`` gets what it would get from
Liger-Kernel: ``torch.autograd.Function.apply``, so the class's ``forward`` (Liger's, mapped onto the
base) runs the base's chunk loop with the override. The two paths compute the same losses and
gradients for the stock loss functions (tests/test_loss_fns.py, tests/test_grpo_ppo_loss_fn.py);
the fused one is faster and never holds a chunk's float32 log-softmax.
"""

import inspect

import torch

from liger_cpp.chunked_loss import loss_fns as _lf
from liger_cpp.chunked_loss.functional import (
    liger_fused_linear_cosine,
    liger_fused_linear_cpo,
    liger_fused_linear_dpo,
    liger_fused_linear_grpo,
    liger_fused_linear_jsd,
    liger_fused_linear_kto,
    liger_fused_linear_orpo,
    liger_fused_linear_simpo,
)
from liger_cpp.chunked_loss.fused_linear_distillation import LigerFusedLinearDistillationBase
from liger_cpp.chunked_loss.fused_linear_ppo import LigerFusedLinearPPOBase
from liger_cpp.chunked_loss.fused_linear_preference import LigerFusedLinearPreferenceBase
from liger_cpp.chunked_loss.fused_linear_unpaired_preference import LigerFusedLinearUnpairedPreferenceBase
from liger_cpp.chunked_loss.grpo_loss import grpo_ppo_loss_fn

_FUNCTION_APPLY = inspect.getattr_static(torch.autograd.Function, "apply")


def _routed_apply(fused):
    """A classmethod ``apply`` with ``fused``'s signature: ``fused`` for the stock class, the autograd
    Function's own apply for a subclass that overrides its loss function, forward or backward."""

    def apply(cls, *args, **kwargs):
        if cls._stock():
            return fused(*args, **kwargs)
        # autograd.Function's own apply, bound to cls: a Python classmethod up to torch 2.11, the C
        # base class's classmethod descriptor in 2.15 (no __func__ there); __get__ binds either.
        return _FUNCTION_APPLY.__get__(None, cls)(*args, **kwargs)

    params = list(inspect.signature(fused).parameters.values())
    apply.__signature__ = inspect.Signature(
        [inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD), *params]
    )
    apply.__doc__ = fused.__doc__
    apply.__name__ = apply.__qualname__ = "apply"
    return classmethod(apply)


class _Routed:
    _loss_attr = ""  # the loss function's attribute name
    _home = None  # the compat class that defines the stock behaviour

    @classmethod
    def _stock(cls):
        home = cls._home
        if cls is home:
            return True

        def raw(f):  # a classmethod's function; a subclass may define forward as a staticmethod
            return getattr(f, "__func__", f)

        same_loss = getattr(cls, cls._loss_attr) is getattr(home, cls._loss_attr)
        return same_loss and raw(cls.forward) is raw(home.forward) and cls.backward is home.backward


def _none(n):
    return (None,) * n


# ---- paired preference losses ----


class LigerFusedLinearDPOFunction(_Routed, LigerFusedLinearPreferenceBase):
    _loss_attr = "preference_loss_fn"
    preference_loss_fn = staticmethod(_lf.dpo_preference_loss_fn)
    apply = _routed_apply(liger_fused_linear_dpo)

    @classmethod
    def forward(
        cls,
        ctx,
        _input,
        weight,
        target,
        bias=None,
        ref_input=None,
        ref_weight=None,
        ref_bias=None,
        ignore_index=-100,
        beta=0.1,
        compute_nll_loss=False,
        compiled=True,
        use_ref_model=True,
        average_log_prob=False,
        chunk_size=1,
        loss_type="sigmoid",
        label_smoothing=0.0,
        discopop_tau=0.05,
        alpha=1.0,
    ):
        return LigerFusedLinearPreferenceBase.forward(
            cls=cls,
            ctx=ctx,
            _input=_input,
            weight=weight,
            target=target,
            bias=bias,
            ignore_index=ignore_index,
            beta=beta,
            alpha=alpha,
            compute_nll_loss=compute_nll_loss,
            compiled=compiled,
            use_ref_model=use_ref_model,
            ref_input=ref_input,
            ref_weight=ref_weight,
            ref_bias=ref_bias,
            average_log_prob=average_log_prob,
            chunk_size=chunk_size,
            loss_type=loss_type,
            label_smoothing=label_smoothing,
            discopop_tau=discopop_tau,
        )

    @staticmethod
    def backward(ctx, *grad_output):
        return (*LigerFusedLinearPreferenceBase.backward(ctx, grad_output)[:4], *_none(14))


class LigerFusedLinearORPOFunction(_Routed, LigerFusedLinearPreferenceBase):
    _loss_attr = "preference_loss_fn"
    preference_loss_fn = staticmethod(_lf.orpo_preference_loss_fn)
    apply = _routed_apply(liger_fused_linear_orpo)

    @classmethod
    def forward(
        cls,
        ctx,
        _input,
        weight,
        target,
        bias=None,
        ignore_index=-100,
        beta=0.1,
        compute_nll_loss=True,
        nll_target=None,
        compiled=True,
        chunk_size=1,
    ):
        return LigerFusedLinearPreferenceBase.forward(
            cls=cls,
            ctx=ctx,
            _input=_input,
            weight=weight,
            target=target,
            bias=bias,
            ignore_index=ignore_index,
            beta=beta,
            compute_nll_loss=compute_nll_loss,
            nll_target=nll_target,
            compiled=compiled,
            chunk_size=chunk_size,
        )

    @staticmethod
    def backward(ctx, *grad_output):
        return (*LigerFusedLinearPreferenceBase.backward(ctx, grad_output)[:4], *_none(6))


class LigerFusedLinearCPOFunction(_Routed, LigerFusedLinearPreferenceBase):
    _loss_attr = "preference_loss_fn"
    preference_loss_fn = staticmethod(_lf.cpo_preference_loss_fn)
    apply = _routed_apply(liger_fused_linear_cpo)

    @classmethod
    def forward(
        cls,
        ctx,
        _input,
        weight,
        target,
        bias=None,
        ignore_index=-100,
        beta=0.1,
        alpha=1.0,
        label_smoothing=0.0,
        compute_nll_loss=True,
        compiled=True,
        average_log_prob=False,
        chunk_size=1,
    ):
        return LigerFusedLinearPreferenceBase.forward(
            cls=cls,
            ctx=ctx,
            _input=_input,
            weight=weight,
            target=target,
            bias=bias,
            ignore_index=ignore_index,
            alpha=alpha,
            beta=beta,
            label_smoothing=label_smoothing,
            compute_nll_loss=compute_nll_loss,
            average_log_prob=average_log_prob,
            compiled=compiled,
            chunk_size=chunk_size,
        )

    @staticmethod
    def backward(ctx, *grad_output):
        return (*LigerFusedLinearPreferenceBase.backward(ctx, grad_output)[:4], *_none(8))


class LigerFusedLinearSimPOFunction(_Routed, LigerFusedLinearPreferenceBase):
    _loss_attr = "preference_loss_fn"
    preference_loss_fn = staticmethod(_lf.simpo_preference_loss_fn)
    apply = _routed_apply(liger_fused_linear_simpo)

    @classmethod
    def forward(
        cls,
        ctx,
        _input,
        weight,
        target,
        bias=None,
        ignore_index=-100,
        beta=0.1,
        alpha=1.0,
        label_smoothing=0.0,
        compute_nll_loss=False,
        compiled=True,
        gamma=0.5,
        chunk_size=1,
    ):
        return LigerFusedLinearPreferenceBase.forward(
            cls=cls,
            ctx=ctx,
            _input=_input,
            weight=weight,
            target=target,
            bias=bias,
            ignore_index=ignore_index,
            alpha=alpha,
            beta=beta,
            label_smoothing=label_smoothing,
            compute_nll_loss=compute_nll_loss,
            compiled=compiled,
            gamma=gamma,
            chunk_size=chunk_size,
        )

    @staticmethod
    def backward(ctx, *grad_output):
        return (*LigerFusedLinearPreferenceBase.backward(ctx, grad_output)[:4], *_none(8))


# ---- unpaired preference (KTO) ----


class LigerFusedLinearKTOFunction(_Routed, LigerFusedLinearUnpairedPreferenceBase):
    _loss_attr = "preference_loss_fn"
    preference_loss_fn = staticmethod(_lf.kto_preference_loss_fn)
    apply = _routed_apply(liger_fused_linear_kto)

    @classmethod
    def forward(
        cls,
        ctx,
        _input,
        weight,
        target,
        preference_labels,
        bias=None,
        ref_input=None,
        ref_weight=None,
        ref_bias=None,
        kl=None,
        ignore_index=-100,
        beta=0.1,
        compiled=True,
        use_ref_model=True,
        average_log_prob=False,
        chunk_size=1,
    ):
        return LigerFusedLinearUnpairedPreferenceBase.forward(
            cls=cls,
            ctx=ctx,
            _input=_input,
            weight=weight,
            target=target,
            preference_labels=preference_labels,
            bias=bias,
            ignore_index=ignore_index,
            beta=beta,
            compiled=compiled,
            use_ref_model=use_ref_model,
            ref_input=ref_input,
            ref_weight=ref_weight,
            ref_bias=ref_bias,
            average_log_prob=average_log_prob,
            kl=kl,
            chunk_size=chunk_size,
        )

    @staticmethod
    def backward(ctx, *grad_output):
        return (*LigerFusedLinearUnpairedPreferenceBase.backward(ctx, grad_output)[:5], *_none(10))


# ---- GRPO family ----


class LigerFusedLinearGRPOFunction(_Routed, LigerFusedLinearPPOBase):
    _loss_attr = "ppo_loss_fn"
    ppo_loss_fn = staticmethod(grpo_ppo_loss_fn)
    apply = _routed_apply(liger_fused_linear_grpo)

    @classmethod
    def forward(
        cls,
        ctx,
        _input,
        weight,
        selected_token_ids,
        attention_mask,
        advantages,
        bias=None,
        ref_per_token_logps=None,
        old_per_token_logps=None,
        ref_input=None,
        ref_weight=None,
        ref_bias=None,
        beta=0.04,
        epsilon_low=0.2,
        epsilon_high=0.2,
        loss_type="dapo",
        max_completion_length=None,
        importance_sampling_level="token",
        sapo_temperature_pos=1.0,
        sapo_temperature_neg=1.05,
        temperature=1.0,
        compiled=True,
        use_ref_model=True,
        chunk_size=1,
        vllm_is_ratio=None,
        delta=None,
        use_bias_correction_kl=False,
        vespo_k_pos=2.0,
        vespo_lambda_pos=3.0,
        vespo_k_neg=3.0,
        vespo_lambda_neg=2.0,
        num_items_in_batch=None,
    ):
        return LigerFusedLinearPPOBase.forward(
            cls=cls,
            ctx=ctx,
            _input=_input,
            weight=weight,
            selected_token_ids=selected_token_ids,
            attention_mask=attention_mask,
            advantages=advantages,
            bias=bias,
            ref_per_token_logps=ref_per_token_logps,
            old_per_token_logps=old_per_token_logps,
            ref_input=ref_input,
            ref_weight=ref_weight,
            ref_bias=ref_bias,
            beta=beta,
            epsilon_low=epsilon_low,
            epsilon_high=epsilon_high,
            loss_type=loss_type,
            max_completion_length=max_completion_length,
            temperature=temperature,
            compiled=compiled,
            use_ref_model=use_ref_model,
            chunk_size=chunk_size,
            importance_sampling_level=importance_sampling_level,
            sapo_temperature_pos=sapo_temperature_pos,
            sapo_temperature_neg=sapo_temperature_neg,
            vllm_is_ratio=vllm_is_ratio,
            delta=delta,
            use_bias_correction_kl=use_bias_correction_kl,
            vespo_k_pos=vespo_k_pos,
            vespo_lambda_pos=vespo_lambda_pos,
            vespo_k_neg=vespo_k_neg,
            vespo_lambda_neg=vespo_lambda_neg,
            num_items_in_batch=num_items_in_batch,
        )

    @staticmethod
    def backward(ctx, grad_output, *grad_metrics):
        return (*LigerFusedLinearPPOBase.backward(ctx, grad_output)[:6], *_none(25))


# ---- distillation ----


class _DistillationFunction(_Routed, LigerFusedLinearDistillationBase):
    """Liger's JSD and cosine Functions share their forward and backward; each sets its loss."""

    _loss_attr = "distillation_loss_fn"

    @classmethod
    def forward(
        cls,
        ctx,
        student_input,
        student_weight,
        teacher_input,
        teacher_weight,
        true_labels,
        student_bias,
        teacher_bias,
        weight_hard_loss=0.5,
        weight_soft_loss=0.5,
        beta=0.5,
        ignore_index=-100,
        temperature=1.0,
        compiled=True,
        chunk_size=1024,
        return_soft_hard_loss=False,
    ):
        return LigerFusedLinearDistillationBase.forward(
            cls=cls,
            ctx=ctx,
            student_input=student_input,
            student_weight=student_weight,
            teacher_input=teacher_input,
            teacher_weight=teacher_weight,
            target=true_labels,
            student_bias=student_bias,
            teacher_bias=teacher_bias,
            chunk_size=chunk_size,
            weight_hard_loss=weight_hard_loss,
            weight_soft_loss=weight_soft_loss,
            beta=beta,
            ignore_index=ignore_index,
            temperature=temperature,
            compiled=compiled,
            return_soft_hard_loss=return_soft_hard_loss,
        )

    @staticmethod
    def backward(ctx, grad_output, *args):
        return (*LigerFusedLinearDistillationBase.backward(ctx, grad_output, *args)[:6], *_none(9))


class LigerFusedLinearJSDFunction(_DistillationFunction):
    distillation_loss_fn = staticmethod(_lf.jsd_distillation_loss_fn)
    apply = _routed_apply(liger_fused_linear_jsd)


class LigerFusedLinearCosineSimilarityFunction(_DistillationFunction):
    distillation_loss_fn = staticmethod(_lf.cosine_distillation_loss_fn)
    apply = _routed_apply(liger_fused_linear_cosine)


for _cls in (
    LigerFusedLinearDPOFunction,
    LigerFusedLinearORPOFunction,
    LigerFusedLinearCPOFunction,
    LigerFusedLinearSimPOFunction,
    LigerFusedLinearKTOFunction,
    LigerFusedLinearGRPOFunction,
    LigerFusedLinearJSDFunction,
    LigerFusedLinearCosineSimilarityFunction,
):
    _cls._home = _cls
