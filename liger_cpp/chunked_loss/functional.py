"""Functional forms of the chunked preference losses (Liger's ``liger_fused_linear_*``).

Arguments follow Liger's autograd Functions (input first, then weight); ``compiled`` is accepted for
compatibility and ignored (nothing is compiled at run time). Each returns
``(loss, (chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss, *aux))``.
"""

from typing import Optional

from torch import Tensor

from liger_cpp.ops.fused_linear_preference import DPO_LOSS_TYPES, fused_linear_kto, fused_linear_preference


def check_dpo_loss_type(loss_type: str) -> None:
    if loss_type not in DPO_LOSS_TYPES:
        raise ValueError(
            f"liger_cpp: argument 'loss_type': expected one of {DPO_LOSS_TYPES}, got {loss_type!r}"
        )


def _reference(use_ref_model, ref_input, ref_weight, ref_bias):
    """The reference model's tensors to pass on: checked when use_ref_model, else all None."""
    if not use_ref_model:
        return None, None, None
    if ref_input is None or ref_weight is None:
        raise ValueError(
            "liger_cpp: use_ref_model=True needs ref_input and ref_weight (the reference model's hidden "
            "states and lm_head); pass them or use use_ref_model=False"
        )
    return ref_input, ref_weight, ref_bias


def _pack(out, n_aux=2):
    loss, cl, rl, cm, rm, nll, cr, rr, extra = out
    aux = (cr, rr) if n_aux == 2 else (cr, rr, extra[0], extra[1])
    return loss, (cl, rl, cm, rm, nll, *aux)


def liger_fused_linear_dpo(
    _input: Tensor,
    weight: Tensor,
    target: Tensor,
    bias: Optional[Tensor] = None,
    ref_input: Optional[Tensor] = None,
    ref_weight: Optional[Tensor] = None,
    ref_bias: Optional[Tensor] = None,
    ignore_index: int = -100,
    beta: float = 0.1,
    alpha: float = 1.0,
    compute_nll_loss: bool = False,
    compiled: bool = True,
    use_ref_model: bool = True,
    average_log_prob: bool = False,
    chunk_size: int = 1,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    discopop_tau: float = 0.05,
):
    """DPO (and variants, `loss_type`) on chosen-over-rejected stacked hidden states; Liger's formulas,
    plus TRL's ipo: ``(((pi_c - pi_r) - (ref_c - ref_r)) - 1 / (2 beta))^2``."""
    check_dpo_loss_type(loss_type)
    ref_input, ref_weight, ref_bias = _reference(use_ref_model, ref_input, ref_weight, ref_bias)
    out = fused_linear_preference(
        _input,
        weight,
        target,
        bias,
        ref_input,
        ref_weight,
        ref_bias,
        loss_type=loss_type,
        ignore_index=ignore_index,
        beta=beta,
        alpha=alpha,
        compute_nll_loss=compute_nll_loss,
        average_log_prob=average_log_prob,
        label_smoothing=label_smoothing,
        discopop_tau=discopop_tau,
        chunk_size=chunk_size,
    )
    return _pack(out)


def liger_fused_linear_orpo(
    _input: Tensor,
    weight: Tensor,
    target: Tensor,
    bias: Optional[Tensor] = None,
    ignore_index: int = -100,
    beta: float = 0.1,
    compute_nll_loss: bool = True,
    compiled: bool = True,
    nll_target: Optional[Tensor] = None,
    chunk_size: int = 1,
):
    """ORPO: ``-beta * logsigmoid(log_odds)`` with length-averaged log-probs, plus the chosen NLL.
    Aux: chosen/rejected rewards, log_odds_ratio, log_odds_chosen."""
    if nll_target is not None:
        raise NotImplementedError("liger_cpp: argument 'nll_target' is not supported yet (use target)")
    out = fused_linear_preference(
        _input,
        weight,
        target,
        bias,
        loss_type="orpo",
        ignore_index=ignore_index,
        beta=beta,
        alpha=1.0,
        compute_nll_loss=compute_nll_loss,
        average_log_prob=True,
        chunk_size=chunk_size,
    )
    return _pack(out, n_aux=4)


def liger_fused_linear_cpo(
    _input: Tensor,
    weight: Tensor,
    target: Tensor,
    bias: Optional[Tensor] = None,
    ignore_index: int = -100,
    beta: float = 0.1,
    alpha: float = 1.0,
    label_smoothing: float = 0.0,
    compute_nll_loss: bool = True,
    compiled: bool = True,
    average_log_prob: bool = False,
    chunk_size: int = 1,
):
    """CPO: ``-(1-ls) logsigmoid(beta (c - r)) - ls logsigmoid(-beta (c - r))`` plus alpha * NLL."""
    out = fused_linear_preference(
        _input,
        weight,
        target,
        bias,
        loss_type="cpo",
        ignore_index=ignore_index,
        beta=beta,
        alpha=alpha,
        compute_nll_loss=compute_nll_loss,
        average_log_prob=average_log_prob,
        label_smoothing=label_smoothing,
        chunk_size=chunk_size,
    )
    return _pack(out)


def liger_fused_linear_simpo(
    _input: Tensor,
    weight: Tensor,
    target: Tensor,
    bias: Optional[Tensor] = None,
    ignore_index: int = -100,
    beta: float = 0.1,
    alpha: float = 1.0,
    label_smoothing: float = 0.0,
    compute_nll_loss: bool = False,
    compiled: bool = True,
    gamma: float = 0.5,
    chunk_size: int = 1,
):
    """SimPO: the CPO loss of ``beta (c - r) - gamma`` with length-averaged log-probs."""
    out = fused_linear_preference(
        _input,
        weight,
        target,
        bias,
        loss_type="simpo",
        ignore_index=ignore_index,
        beta=beta,
        alpha=alpha,
        compute_nll_loss=compute_nll_loss,
        average_log_prob=True,
        label_smoothing=label_smoothing,
        gamma=gamma,
        chunk_size=chunk_size,
    )
    return _pack(out)


def liger_fused_linear_kto(
    _input: Tensor,
    weight: Tensor,
    target: Tensor,
    preference_labels: Tensor,
    bias: Optional[Tensor] = None,
    ref_input: Optional[Tensor] = None,
    ref_weight: Optional[Tensor] = None,
    ref_bias: Optional[Tensor] = None,
    kl: Optional[Tensor] = None,
    ignore_index: int = -100,
    beta: float = 0.1,
    compiled: bool = True,
    use_ref_model: bool = True,
    average_log_prob: bool = False,
    chunk_size: int = 1,
):
    """KTO (unpaired): ``1 - sigmoid(beta (logratio - kl) (+1 desirable / -1 undesirable))`` summed / B.
    Returns (loss, (chosen_logps_sum, rejected_logps_sum, chosen_logits_sum, rejected_logits_sum,
    chosen_rewards_sum, rejected_rewards_sum)), the sums over the desirable / undesirable sequences."""
    if preference_labels is None:
        raise ValueError("liger_cpp: argument 'preference_labels': required (one bool per sequence)")
    ref_input, ref_weight, ref_bias = _reference(use_ref_model, ref_input, ref_weight, ref_bias)
    out = fused_linear_kto(
        _input,
        weight,
        target,
        preference_labels,
        bias,
        ref_input,
        ref_weight,
        ref_bias,
        kl,
        ignore_index=ignore_index,
        beta=beta,
        average_log_prob=average_log_prob,
        chunk_size=chunk_size,
    )
    return out[0], tuple(out[1:])
