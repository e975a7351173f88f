"""Conformance with Liger-Kernel 0.8.5 itself: its chunked RL, distillation and preference losses
(pure PyTorch, run on the CPU with compiled=False in a subprocess where `liger_kernel` is Liger-Kernel)
against liger_cpp's modules of the same names on identical inputs (tests/conformance_cases.py): the
loss, every returned metric or auxiliary output, and the gradients of the input, weight and bias.
Every GRPO loss type and sampling level and the options, every DPO loss type but ipo, ORPO, CPO,
SimPO, KTO, JSD and cosine distillation.

Liger-Kernel is found in $LIGER_UPSTREAM_DIR or ./.liger_upstream (scripts/setup.sh installs the
0.8.5 wheel there with --target); without it the tests skip, saying so."""

import os
import subprocess
import sys

import conformance_cases as cc
import pytest
import torch

import liger_cpp.chunked_loss as ours

HERE = os.path.dirname(os.path.abspath(__file__))
UPSTREAM = os.environ.get("LIGER_UPSTREAM_DIR", os.path.join(os.path.dirname(HERE), ".liger_upstream"))


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    if not os.path.isdir(os.path.join(UPSTREAM, "liger_kernel")):
        pytest.skip(f"Liger-Kernel 0.8.5 is not installed in {UPSTREAM} (scripts/setup.sh puts it there)")
    out = tmp_path_factory.mktemp("upstream") / "results.pt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([UPSTREAM, HERE]), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "liger_upstream_runner.py"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


def _close(a, b, bf16, what, factor=0.005):
    if not bf16:
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-6, msg=lambda m: f"{what}: {m}")
        return
    # bfloat16 heads: both libraries round the logits and the gradients to bfloat16 (Liger twice a
    # chunk for dW); measured differences are below 0.5 % of the largest value for losses and
    # outputs and 1.4 % for gradients, a semantic difference is of the order of the values themselves
    scale = float(b.abs().max()) if b.numel() else 0.0
    torch.testing.assert_close(
        a,
        b,
        rtol=0,
        atol=factor * scale + 1e-6,
        msg=lambda m: f"{what} (within {factor} of the largest): {m}",
    )


def _compare(mine, theirs, bf16=False):
    tol = dict(rtol=2e-5, atol=2e-6)
    if bf16:
        _close(mine["loss"], theirs["loss"], True, "loss")
        assert len(mine["outputs"]) == len(theirs["outputs"])
        for i, (a, b) in enumerate(zip(mine["outputs"], theirs["outputs"])):
            _close(a, b, True, f"output {i}")
        for name, a, b in zip(("input", "weight", "bias"), mine["grads"], theirs["grads"]):
            _close(a, b, True, f"d{name}", factor=0.03)
        return
    torch.testing.assert_close(mine["loss"], theirs["loss"], **tol, msg=lambda m: f"loss: {m}")
    assert len(mine["outputs"]) == len(theirs["outputs"]), (len(mine["outputs"]), len(theirs["outputs"]))
    for i, (a, b) in enumerate(zip(mine["outputs"], theirs["outputs"])):
        torch.testing.assert_close(a, b, **tol, msg=lambda m, i=i: f"output {i}: {m}")
    for name, a, b in zip(("input", "weight", "bias"), mine["grads"], theirs["grads"]):
        assert (a is None) == (b is None), name
        if a is not None:
            torch.testing.assert_close(a, b, **tol, msg=lambda m, name=name: f"d{name}: {m}")


@pytest.mark.parametrize("case", cc.CASES, ids=[c[0] for c in cc.CASES])
def test_matches_liger_kernel(upstream, case):
    cid, cls, kwargs, recipe, extra = case
    theirs = upstream[cid]
    assert "error" not in theirs, f"Liger-Kernel failed on this case: {theirs.get('error')}"
    _compare(cc.run(getattr(ours, cls), kwargs, recipe, extra), theirs, bf16=extra.get("bf16", False))


@pytest.mark.parametrize("case", cc.BASE_CASES)
def test_base_subclass_matches_liger_kernel(upstream, case):
    """One user's subclass of each chunked-loss base class, on Liger-Kernel's base and on liger_cpp's."""
    from liger_cpp.chunked_loss.fused_linear_distillation import LigerFusedLinearDistillationBase
    from liger_cpp.chunked_loss.fused_linear_ppo import LigerFusedLinearPPOBase
    from liger_cpp.chunked_loss.fused_linear_preference import LigerFusedLinearPreferenceBase
    from liger_cpp.chunked_loss.fused_linear_unpaired_preference import LigerFusedLinearUnpairedPreferenceBase

    bases = {
        "distillation": LigerFusedLinearDistillationBase,
        "preference": LigerFusedLinearPreferenceBase,
        "unpaired": LigerFusedLinearUnpairedPreferenceBase,
        "ppo": LigerFusedLinearPPOBase,
    }
    theirs = upstream[case]
    assert "error" not in theirs, f"Liger-Kernel failed on this case: {theirs.get('error')}"
    _compare(cc.run_base(case, bases), theirs)


@pytest.mark.parametrize("case", cc.FUNCTION_CASES)
def test_function_subclass_matches_liger_kernel(upstream, case):
    """A subclass of Liger's DPO / KTO / GRPO / JSD Function that overrides only its loss function:
    through the compatibility package it must run the override (the bases' loop), as Liger-Kernel."""
    from compat_env import ensure_compat

    ensure_compat()
    from liger_kernel.chunked_loss.dpo_loss import LigerFusedLinearDPOFunction
    from liger_kernel.chunked_loss.grpo_loss import LigerFusedLinearGRPOFunction
    from liger_kernel.chunked_loss.jsd_loss import LigerFusedLinearJSDFunction
    from liger_kernel.chunked_loss.kto_loss import LigerFusedLinearKTOFunction

    fns = {
        "dpo_fn": LigerFusedLinearDPOFunction,
        "kto_fn": LigerFusedLinearKTOFunction,
        "grpo_fn": LigerFusedLinearGRPOFunction,
        "jsd_fn": LigerFusedLinearJSDFunction,
    }
    theirs = upstream[case]
    assert "error" not in theirs, f"Liger-Kernel failed on this case: {theirs.get('error')}"
    _compare(cc.run_function_subclass(case, fns), theirs)


def test_grpo_helpers_match_liger_kernel(upstream):
    import liger_cpp.chunked_loss.grpo_loss as grpo_loss

    mine, theirs = cc.run_helpers(grpo_loss), upstream["helpers"]
    assert mine.keys() == theirs.keys()
    for k in mine:
        torch.testing.assert_close(mine[k], theirs[k], rtol=1e-6, atol=1e-7, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("case", list(cc.SCALED_CE_CASES))
def test_scaled_cross_entropy_matches_liger_kernel(upstream, case):
    """LigerFusedLinearScaledCrossEntropyFunction (per-token NLL, entropy, selected ids' log-probs):
    the same structure (a tensor or a tuple of as many), dtypes, values and gradients as Liger's."""
    from liger_cpp.ops import LigerFusedLinearScaledCrossEntropyFunction

    theirs = upstream[case]
    assert "error" not in theirs, f"Liger-Kernel failed on this case: {theirs.get('error')}"
    mine = cc.run_scaled_ce(case, LigerFusedLinearScaledCrossEntropyFunction)
    assert (mine["kind"], mine["dtypes"]) == (theirs["kind"], theirs["dtypes"])
    # Relative to the largest value: both sides differ from a float64 run by up to 1e-5 of it in
    # float32 (the entropy's gradient cancels; Liger's error there is the larger) and by 2-4 % in
    # bfloat16, where each rounds its logits to bfloat16 (test_token_logprobs holds the accuracy).
    factor = 0.04 if cc.SCALED_CE_CASES[case][0] == torch.bfloat16 else 2e-4
    for i, (a, b) in enumerate(zip(mine["outputs"], theirs["outputs"])):
        _close(a, b, True, f"output {i}", factor=factor)
    for name, a, b in zip(("input", "weight"), mine["grads"], theirs["grads"]):
        _close(a, b, True, f"d{name}", factor=factor)
