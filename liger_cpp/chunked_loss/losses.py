"""Liger-named modules of the chunked preference losses (weight first, as Liger's modules)."""

from typing import Optional

import torch
from torch import Tensor

from liger_cpp.chunked_loss.functional import (
    check_dpo_loss_type,
    liger_fused_linear_cpo,
    liger_fused_linear_dpo,
    liger_fused_linear_kto,
    liger_fused_linear_orpo,
    liger_fused_linear_simpo,
)


class LigerFusedLinearDPOLoss(torch.nn.Module):
    """Fused lm_head + DPO loss (``loss_type``: sigmoid, ipo, hinge, exo_pair, nca_pair, robust,
    bco_pair, sppo_hard, apo_zero, apo_down, discopop)."""

    def __init__(
        self,
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
        super().__init__()
        check_dpo_loss_type(loss_type, label_smoothing)
        self.ignore_index, self.beta, self.alpha = ignore_index, beta, alpha
        self.compute_nll_loss, self.compiled, self.use_ref_model = compute_nll_loss, compiled, use_ref_model
        self.average_log_prob, self.chunk_size, self.loss_type = average_log_prob, chunk_size, loss_type
        self.label_smoothing, self.discopop_tau = label_smoothing, discopop_tau

    def forward(
        self,
        lin_weight: Tensor,
        _input: Tensor,
        target: Tensor,
        bias: Optional[Tensor] = None,
        ref_input: Optional[Tensor] = None,
        ref_weight: Optional[Tensor] = None,
        ref_bias: Optional[Tensor] = None,
    ):
        return liger_fused_linear_dpo(
            _input,
            lin_weight,
            target,
            bias,
            ref_input,
            ref_weight,
            ref_bias,
            ignore_index=self.ignore_index,
            beta=self.beta,
            alpha=self.alpha,
            compute_nll_loss=self.compute_nll_loss,
            use_ref_model=self.use_ref_model,
            average_log_prob=self.average_log_prob,
            chunk_size=self.chunk_size,
            loss_type=self.loss_type,
            label_smoothing=self.label_smoothing,
            discopop_tau=self.discopop_tau,
        )


class LigerFusedLinearORPOLoss(torch.nn.Module):
    """Fused lm_head + ORPO loss."""

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        compute_nll_loss: bool = True,
        compiled: bool = True,
        chunk_size: int = 1,
    ):
        super().__init__()
        self.ignore_index, self.beta, self.compute_nll_loss = ignore_index, beta, compute_nll_loss
        self.compiled, self.chunk_size = compiled, chunk_size

    def forward(
        self,
        lin_weight: Tensor,
        _input: Tensor,
        target: Tensor,
        bias: Optional[Tensor] = None,
        nll_target: Optional[Tensor] = None,
    ):
        return liger_fused_linear_orpo(
            _input,
            lin_weight,
            target,
            bias,
            ignore_index=self.ignore_index,
            beta=self.beta,
            compute_nll_loss=self.compute_nll_loss,
            nll_target=nll_target,
            chunk_size=self.chunk_size,
        )


class LigerFusedLinearCPOLoss(torch.nn.Module):
    """Fused lm_head + CPO loss."""

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        alpha: float = 1.0,
        label_smoothing: float = 0.0,
        compute_nll_loss: bool = True,
        compiled: bool = True,
        average_log_prob: bool = False,
        chunk_size: int = 1,
    ):
        super().__init__()
        self.ignore_index, self.beta, self.alpha = ignore_index, beta, alpha
        self.label_smoothing, self.compute_nll_loss = label_smoothing, compute_nll_loss
        self.compiled = compiled
        self.average_log_prob, self.chunk_size = average_log_prob, chunk_size

    def forward(self, lin_weight: Tensor, _input: Tensor, target: Tensor, bias: Optional[Tensor] = None):
        return liger_fused_linear_cpo(
            _input,
            lin_weight,
            target,
            bias,
            ignore_index=self.ignore_index,
            beta=self.beta,
            alpha=self.alpha,
            label_smoothing=self.label_smoothing,
            compute_nll_loss=self.compute_nll_loss,
            average_log_prob=self.average_log_prob,
            chunk_size=self.chunk_size,
        )


class LigerFusedLinearSimPOLoss(torch.nn.Module):
    """Fused lm_head + SimPO loss."""

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        alpha: float = 1.0,
        label_smoothing: float = 0.0,
        compute_nll_loss: bool = True,
        compiled: bool = True,
        gamma: float = 0.5,
        chunk_size: int = 1,
    ):
        super().__init__()
        self.ignore_index, self.beta, self.alpha = ignore_index, beta, alpha
        self.label_smoothing, self.compute_nll_loss = label_smoothing, compute_nll_loss
        self.compiled = compiled
        self.gamma, self.chunk_size = gamma, chunk_size

    def forward(self, lin_weight: Tensor, _input: Tensor, target: Tensor, bias: Optional[Tensor] = None):
        return liger_fused_linear_simpo(
            _input,
            lin_weight,
            target,
            bias,
            ignore_index=self.ignore_index,
            beta=self.beta,
            alpha=self.alpha,
            label_smoothing=self.label_smoothing,
            compute_nll_loss=self.compute_nll_loss,
            gamma=self.gamma,
            chunk_size=self.chunk_size,
        )


class LigerFusedLinearKTOLoss(torch.nn.Module):
    """Fused lm_head + KTO loss (unpaired; note: input first, then the weight, as Liger's)."""

    def __init__(
        self,
        ignore_index: int = -100,
        beta: float = 0.1,
        compiled: bool = True,
        use_ref_model: bool = False,
        average_log_prob: bool = False,
        chunk_size: int = 1,
    ):
        super().__init__()
        self.ignore_index, self.beta, self.compiled = ignore_index, beta, compiled
        self.use_ref_model, self.average_log_prob = use_ref_model, average_log_prob
        self.chunk_size = chunk_size

    def forward(
        self,
        _input: Tensor,
        lin_weight: Tensor,
        target: Tensor,
        bias: Optional[Tensor] = None,
        preference_labels: Optional[Tensor] = None,
        ref_input: Optional[Tensor] = None,
        ref_weight: Optional[Tensor] = None,
        ref_bias: Optional[Tensor] = None,
        kl: Optional[Tensor] = None,
    ):
        return liger_fused_linear_kto(
            _input,
            lin_weight,
            target,
            preference_labels,
            bias,
            ref_input,
            ref_weight,
            ref_bias,
            kl,
            ignore_index=self.ignore_index,
            beta=self.beta,
            use_ref_model=self.use_ref_model,
            average_log_prob=self.average_log_prob,
            chunk_size=self.chunk_size,
        )
