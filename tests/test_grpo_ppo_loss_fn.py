"""Liger's GRPO-family ppo_loss_fn in PyTorch (liger_cpp.chunked_loss.grpo_loss.grpo_ppo_loss_fn,
attached to the compatibility package's LigerFusedLinearGRPOFunction as ``ppo_loss_fn``): run on
LigerFusedLinearPPOBase, it must give what liger_cpp's C++ GRPO gives (loss, metrics, gradients) for
every loss type, token- and sequence-level sampling and the options."""

import math

import pytest
import torch
from conftest import DEVICES
from rl_reference import leaf

from liger_cpp.chunked_loss.fused_linear_ppo import LigerFusedLinearPPOBase
from liger_cpp.chunked_loss.grpo_loss import grpo_ppo_loss_fn, liger_fused_linear_grpo

LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]


class _G(LigerFusedLinearPPOBase):
    ppo_loss_fn = staticmethod(grpo_ppo_loss_fn)

    @staticmethod
    def forward(ctx, x, w, ids, mask, adv, b, ref_lp, old_lp, opts):
        return LigerFusedLinearPPOBase.forward(_G, ctx, x, w, ids, mask, adv, b, ref_lp, old_lp, **opts)

    @staticmethod
    def backward(ctx, grad_output, *grad_metrics):
        g = LigerFusedLinearPPOBase.backward(ctx, grad_output)
        return (*g[:6], None, None, None)


def _inputs(device, B=4, T=9, H=13, V=31, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rn(*s, scale=1.0):
        return (torch.randn(*s, generator=gen) * scale).to(device)

    x = rn(B, T, H).requires_grad_(True)
    w = rn(V, H, scale=2.0 / math.sqrt(H)).requires_grad_(True)
    b = rn(V, scale=0.3).requires_grad_(True)
    ids = torch.randint(0, V, (B, T), generator=gen).to(device)
    mask = (torch.rand(B, T, generator=gen) > 0.25).to(device)
    adv = rn(B)
    old = rn(B, T, scale=0.15) - 3.5
    ref = rn(B, T, scale=0.15) - 3.5
    return x, w, b, ids, mask, adv, old, ref


def _compare(device, **opts):
    x, w, b, ids, mask, adv, old, ref = _inputs(device)
    if opts.pop("vllm", False):
        opts["vllm_is_ratio"] = (
            torch.rand(x.shape[0], x.shape[1], generator=torch.Generator().manual_seed(3)) + 0.5
        ).to(device)
    x2, w2, b2 = (leaf(v) for v in (x, w, b))
    opts.setdefault("chunk_size", 3)  # 2 uneven chunks on the base; the C++ op plans its own
    loss, metrics = _G.apply(x, w, ids, mask, adv, b, ref, old, dict(opts, use_ref_model=True))
    loss2, metrics2 = liger_fused_linear_grpo(x2, w2, ids, mask, adv, b2, ref, old, **opts)
    loss.backward()
    loss2.backward()
    torch.testing.assert_close(loss, loss2, rtol=2e-5, atol=2e-6)
    assert len(metrics) == len(metrics2)
    for a, c in zip(metrics, metrics2):
        torch.testing.assert_close(a, c, rtol=2e-5, atol=2e-6)
    for a, c in [(x.grad, x2.grad), (w.grad, w2.grad), (b.grad, b2.grad)]:
        torch.testing.assert_close(a, c, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_loss_types_match_the_fused_grpo(device, loss_type, level):
    if level == "sequence" and loss_type in ("cispo", "sapo", "vespo"):
        pytest.skip("sequence-level sampling is not defined for cispo, sapo, vespo (both raise)")
    _compare(
        device,
        loss_type=loss_type,
        importance_sampling_level=level,
        max_completion_length=9,
        epsilon_high=0.28 if loss_type != "cispo" else 4.0,
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "opts",
    [
        dict(beta=0.0),
        dict(vllm=True),
        dict(vllm=True, loss_type="vespo"),
        dict(delta=1.1),
        dict(use_bias_correction_kl=True),
        dict(num_items_in_batch=23),
        dict(temperature=0.8, loss_type="grpo"),
        dict(sapo_temperature_pos=0.7, sapo_temperature_neg=1.3, loss_type="sapo"),
        dict(vespo_k_pos=1.5, vespo_lambda_pos=2.5, loss_type="vespo"),
    ],
    ids=str,
)
def test_options_match_the_fused_grpo(device, opts):
    _compare(device, **opts)


def test_sequence_level_refused_where_undefined():
    lp = torch.zeros(2, 3)
    m = torch.ones(2, 3)
    with pytest.raises(ValueError, match="Sequence-level"):
        grpo_ppo_loss_fn(lp, m, torch.ones(2), m, loss_type="cispo", importance_sampling_level="sequence")


def test_compat_function_carries_it():
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.chunked_loss.grpo_loss import LigerFusedLinearGRPOFunction

    assert LigerFusedLinearGRPOFunction.ppo_loss_fn is grpo_ppo_loss_fn
