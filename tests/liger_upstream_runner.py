"""Runs tests/conformance_cases.py's cases on Liger-Kernel itself (the real `liger_kernel` first on
PYTHONPATH, CPU, `compiled=False`) and saves the results: `python liger_upstream_runner.py OUT.pt`.
A separate process, because the compatibility package takes the import name `liger_kernel` in the
test's own process."""

import importlib.util
import sys

import conformance_cases as cc
import liger_kernel.chunked_loss as lc
import torch


def main(out):
    if importlib.util.find_spec("liger_kernel._surface") is not None:
        sys.exit(
            "liger_upstream_runner: `liger_kernel` is liger_cpp's compatibility package, not Liger-Kernel"
        )
    results = {}
    for cid, cls, kwargs, recipe, extra in cc.CASES:
        try:
            results[cid] = cc.run(getattr(lc, cls), kwargs, recipe, extra)
        except Exception as e:  # recorded: the test reports it against the case
            results[cid] = {"error": f"{type(e).__name__}: {e}"}
    from liger_kernel.chunked_loss.fused_linear_distillation import LigerFusedLinearDistillationBase
    from liger_kernel.chunked_loss.fused_linear_ppo import LigerFusedLinearPPOBase
    from liger_kernel.chunked_loss.fused_linear_preference import LigerFusedLinearPreferenceBase
    from liger_kernel.chunked_loss.fused_linear_unpaired_preference import (
        LigerFusedLinearUnpairedPreferenceBase,
    )

    bases = {
        "distillation": LigerFusedLinearDistillationBase,
        "preference": LigerFusedLinearPreferenceBase,
        "unpaired": LigerFusedLinearUnpairedPreferenceBase,
        "ppo": LigerFusedLinearPPOBase,
    }
    for cid in cc.BASE_CASES:
        try:
            results[cid] = cc.run_base(cid, bases)
        except Exception as e:
            results[cid] = {"error": f"{type(e).__name__}: {e}"}
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
    for cid in cc.FUNCTION_CASES:
        try:
            results[cid] = cc.run_function_subclass(cid, fns)
        except Exception as e:
            results[cid] = {"error": f"{type(e).__name__}: {e}"}
    import liger_kernel.chunked_loss.grpo_loss as grpo_loss

    results["helpers"] = cc.run_helpers(grpo_loss)
    from liger_kernel.ops.fused_linear_scaled_cross_entropy import LigerFusedLinearScaledCrossEntropyFunction

    for cid in cc.SCALED_CE_CASES:
        try:
            results[cid] = cc.run_scaled_ce(cid, LigerFusedLinearScaledCrossEntropyFunction)
        except Exception as e:
            results[cid] = {"error": f"{type(e).__name__}: {e}"}
    torch.save(results, out)


if __name__ == "__main__":
    torch.manual_seed(0)
    main(sys.argv[1])
