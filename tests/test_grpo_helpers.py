"""Liger's per-token GRPO helpers (liger_cpp.chunked_loss.grpo_loss.k3_loss_fn, get_gamma_weights,
sapo_loss_fn, clip_coef_fn; liger_kernel.chunked_loss.grpo_loss through the compatibility package)
against the formulas written out element by element in Python floats."""

import math

import pytest
import torch

from liger_cpp.chunked_loss.grpo_loss import clip_coef_fn, get_gamma_weights, k3_loss_fn, sapo_loss_fn


def _rand(*shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def test_k3_is_schulmans_estimator():
    lp, lq = _rand(4, 7, seed=1), _rand(4, 7, seed=2)
    out = k3_loss_fn(lp, lq)
    for a, b, o in zip(lp.flatten().tolist(), lq.flatten().tolist(), out.flatten().tolist()):
        assert o == pytest.approx(math.exp(a - b) - (a - b) - 1.0, rel=1e-12, abs=1e-15)
    assert (out >= 0).all() and k3_loss_fn(lp, lp).abs().max() == 0


def _phi(adv, lr, m, isr, kp, lp, kn, ln):
    """One sequence's VESPO weight, in Python floats."""
    floor = math.log(1e-8)
    s = sum(min(max(x, -20.0), 20.0) * mm for x, mm in zip(lr, m))
    if isr is not None:
        s += sum(min(max(math.log(r), floor), 20.0) for r in isr)
    logw = min(max(s, floor), 20.0)
    k, lam = (kp, lp) if adv >= 0 else (kn, ln)
    lam = max(lam, 1e-4)
    try:
        v = math.exp(lam + k * logw - lam * math.exp(logw))
    except OverflowError:
        v = 0.0
    return v if math.isfinite(v) else 0.0


@pytest.mark.parametrize("with_isr", [False, True])
@pytest.mark.parametrize("params", [(2.0, 3.0, 3.0, 2.0), (1.5, 1.5, 0.5, 0.0)])
def test_gamma_weights(with_isr, params):
    B, T = 6, 9
    adv = _rand(B, seed=3)
    adv[0] = 0.0  # zero counts as non-negative
    lr = _rand(B, T, seed=4, scale=0.3)
    m = (torch.rand(B, T, generator=torch.Generator().manual_seed(5)) > 0.3).double()
    lr[1], m[1] = -2.0, 1.0
    lr[1, 2] = 25.0  # clamped to 20 per token: the sequence's log-ratio is 4, not 9
    isr = _rand(B, T, seed=6, scale=0.2).exp() if with_isr else None
    lr.requires_grad_(True)
    phi = get_gamma_weights(adv, lr, m, isr, *params)
    assert phi.shape == (B, 1) and not phi.requires_grad  # a coefficient, no gradient
    for b in range(B):
        want = _phi(
            adv[b].item(),
            lr[b].tolist(),
            m[b].tolist(),
            None if isr is None else isr[b].tolist(),
            *params,
        )
        assert phi[b, 0].item() == pytest.approx(want, rel=1e-12, abs=1e-300)


def test_gamma_weight_is_one_at_ratio_one_when_k_equals_lambda():
    phi = get_gamma_weights(
        torch.tensor([1.0, -1.0]), torch.zeros(2, 5), torch.ones(2, 5), None, 2.0, 2.0, 3.0, 3.0
    )
    torch.testing.assert_close(phi, torch.ones(2, 1))


def test_sapo_gate():
    r = _rand(20, seed=7, scale=0.5).exp()
    for tau in (1.0, 1.05, 0.3):
        out = sapo_loss_fn(r, tau)
        for x, o in zip(r.tolist(), out.tolist()):
            assert o == pytest.approx(4.0 / tau / (1.0 + math.exp(-tau * (x - 1.0))), rel=1e-12)
    with pytest.raises(ValueError, match="sapo_temperature"):
        sapo_loss_fn(r, 0.0)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "bnpo", "dr_grpo", "luspo", "cispo", "sapo", "vespo"])
def test_clip_coef(loss_type):
    coef = torch.tensor([0.5, 0.85, 1.0, 1.25, 3.0, 6.0], requires_grad=True)
    clipped, lower, upper = clip_coef_fn(coef, 0.2, 4.0 if loss_type == "cispo" else 0.3, loss_type)
    c = coef.tolist()
    if loss_type == "cispo":
        assert clipped.tolist() == [min(x, 4.0) for x in c] and not clipped.requires_grad
        assert lower is False and upper.tolist() == [x > 4.0 for x in c]
    elif loss_type in ("sapo", "vespo"):
        assert clipped is None and not lower.any() and not upper.any()
    else:
        assert clipped.tolist() == pytest.approx([min(max(x, 0.8), 1.3) for x in c])
        assert clipped.requires_grad
        assert lower.tolist() == [x < 0.8 for x in c] and upper.tolist() == [x > 1.3 for x in c]


def test_compat_names_are_these():
    from compat_env import ensure_compat

    ensure_compat()
    import liger_kernel.chunked_loss.grpo_loss as g

    import liger_cpp.chunked_loss.grpo_loss as ours

    for n in ("k3_loss_fn", "get_gamma_weights", "sapo_loss_fn", "clip_coef_fn"):
        assert getattr(g, n) is getattr(ours, n), n
