"""Functional forms of the chunked preference losses (Liger's ``liger_fused_linear_*``).

Arguments, their order and defaults are those of Liger-Kernel's autograd Functions (what
``liger_kernel.chunked_loss.functional.liger_fused_linear_*`` are: input first, then weight), so
positional calls written for Liger mean the same here; ``compiled`` is accepted for compatibility and
ignored (nothing is compiled at run time). Each returns
``(loss, (chosen_logps, rejected_logps, chosen_logits_mean, rejected_logits_mean, nll_loss, *aux))``.
"""

from typing import Optional

from torch import Tensor

from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy
from liger_cpp.ops.fused_linear_preference import DPO_LOSS_TYPES, fused_linear_kto, fused_linear_preference


def check_dpo_loss_type(loss_type: str, label_smoothing: float = 0.0) -> None:
    """ValueError for an unknown DPO loss type, or a label_smoothing its loss is undefined for."""
    if loss_type not in DPO_LOSS_TYPES:
        raise ValueError(
            f"liger_cpp: argument 'loss_type': expected one of {DPO_LOSS_TYPES}, got {loss_type!r}"
        )
    ls = float(label_smoothing)
    if not 0.0 <= ls <= 1.0:
        raise ValueError(f"liger_cpp: argument 'label_smoothing': expected a value in [0, 1], got {ls}")
    if loss_type == "exo_pair" and not 0.0 < ls < 1.0:
        raise ValueError(
            "liger_cpp: argument 'label_smoothing': expected a value in (0, 1) for loss_type 'exo_pair' "
            f"(its loss has log(label_smoothing); the EXO paper uses 1e-3), got {ls}"
        )
    if loss_type == "robust" and not ls < 0.5:
        raise ValueError(
            "liger_cpp: argument 'label_smoothing': expected a value in [0, 0.5) for loss_type 'robust' "
            f"(it divides by 1 - 2 label_smoothing), got {ls}"
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
    compute_nll_loss: bool = False,
    compiled: bool = True,
    use_ref_model: bool = True,
    average_log_prob: bool = False,
    chunk_size: int = 1,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    discopop_tau: float = 0.05,
    alpha: float = 1.0,
):
    """DPO (and variants, `loss_type`) on chosen-over-rejected stacked hidden states; Liger's formulas,
    plus TRL's ipo: ``(((pi_c - pi_r) - (ref_c - ref_r)) - 1 / (2 beta))^2``. `alpha` weighs the
    chosen NLL (with compute_nll_loss); it is last, as in Liger-Kernel's Function (added there
    after the others)."""
    check_dpo_loss_type(loss_type, label_smoothing)
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
    nll_target: Optional[Tensor] = None,
    compiled: bool = True,
    chunk_size: int = 1,
):
    """ORPO: ``-beta * logsigmoid(log_odds)`` with length-averaged log-probs, plus the chosen NLL.
    Aux: chosen/rejected rewards, log_odds_ratio, log_odds_chosen.

    `nll_target` ((2B, T) as target; its chosen half is used): the NLL's targets when they differ
    from the preference targets (Liger-Kernel's option), normalised by its non-ignored chosen tokens.
    """
    if nll_target is not None and compute_nll_loss:
        return _orpo_with_nll_target(_input, weight, target, bias, ignore_index, beta, nll_target, chunk_size)
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


def _orpo_with_nll_target(_input, weight, target, bias, ignore_index, beta, nll_target, chunk_size):
    """ORPO with the NLL on other targets: the preference loss from the chunked op (its NLL off) plus
    the NLL of the chosen half against nll_target from the fused linear cross entropy (the chosen
    half's lm_head GEMMs run twice)."""
    if nll_target.shape != target.shape:
        raise ValueError(
            f"liger_cpp: argument 'nll_target': expected target's shape {tuple(target.shape)} (chosen "
            f"sequences stacked over rejected; the chosen half is used), got {tuple(nll_target.shape)}"
        )
    out = fused_linear_preference(
        _input,
        weight,
        target,
        bias,
        loss_type="orpo",
        ignore_index=ignore_index,
        beta=beta,
        alpha=1.0,
        compute_nll_loss=False,
        average_log_prob=True,
        chunk_size=chunk_size,
    )
    n_chosen = target.shape[0] // 2
    chosen = _input[:n_chosen]
    nll_t = nll_target[:n_chosen].reshape(-1).to(chosen.device)
    nll_sum, _, _, _ = fused_linear_cross_entropy(
        chosen.reshape(-1, chosen.shape[-1]), weight, nll_t, bias, ignore_index=ignore_index, reduction="sum"
    )
    nll = nll_sum / (nll_t != ignore_index).sum()  # on the device: no host synchronisation
    loss, (cl, rl, cm, rm, _zero, *aux) = _pack(out, n_aux=4)
    return loss + nll, (cl, rl, cm, rm, nll.detach(), *aux)


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


# ---- RL and distillation losses (Liger's functional aliases) ----
from liger_cpp.chunked_loss.cosine_similarity_loss import liger_fused_linear_cosine  # noqa: E402,F401
from liger_cpp.chunked_loss.grpo_loss import liger_fused_linear_grpo  # noqa: E402,F401
from liger_cpp.chunked_loss.jsd_loss import liger_fused_linear_jsd  # noqa: E402,F401
