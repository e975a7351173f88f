"""The RL and distillation losses through the liger-kernel compatibility package (compat/): Liger
0.8.5's names resolve to liger_cpp's objects, and calls in Liger-Kernel's positional order
(compat/liger_kernel/_reference_signatures.json) equal keyword calls of liger_cpp's own API."""

import ast
import json
import os

import torch
from compat_env import COMPAT, ensure_compat

ensure_compat()

import liger_kernel.chunked_loss as kcl  # noqa: E402
import liger_kernel.ops as kops  # noqa: E402
import liger_kernel.transformers as kt  # noqa: E402
from liger_kernel.chunked_loss import functional as kcf  # noqa: E402
from liger_kernel.transformers import functional as kf  # noqa: E402

from liger_cpp import chunked_loss as cl  # noqa: E402
from liger_cpp import ops  # noqa: E402
from liger_cpp import transformers as lt  # noqa: E402

MODULES = json.load(open(os.path.join(COMPAT, "liger_kernel", "_reference_signatures.json")))["modules"]


def _positional(ref_params, values):
    names = [p[0] for p in ref_params]
    last = max(names.index(k) for k in values)
    return [
        values[n] if n in values else ast.literal_eval(ref_params[i][1])
        for i, n in enumerate(names[: last + 1])
    ]


def _close(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    else:
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y)


def test_names_are_liger_cpp_objects():
    for name in (
        "LigerFusedLinearGRPOLoss",
        "LigerFusedLinearJSDLoss",
        "LigerFusedLinearCosineSimilarityLoss",
    ):
        assert getattr(kcl, name) is getattr(cl, name)
    for name in ("LigerJSD", "LigerKLDIVLoss", "LigerTVDLoss", "LigerFusedLinearJSD"):
        assert getattr(kt, name) is getattr(lt, name)
    assert kops.LigerFusedLinearScaledCrossEntropyFunction is ops.LigerFusedLinearScaledCrossEntropyFunction


def _data():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return g, r


def test_grpo_positional_in_liger_order():
    g, r = _data()
    B, T, H, V = 3, 5, 6, 11
    values = dict(
        _input=r(B, T, H),
        weight=r(V, H),
        selected_token_ids=torch.randint(0, V, (B, T), generator=g),
        attention_mask=torch.ones(B, T),
        advantages=torch.tensor([0.5, -1.0, 0.3]),
        bias=r(V),
        ref_per_token_logps=r(B, T).float() - 3,
        old_per_token_logps=r(B, T).float() - 3,
        beta=0.1,
        epsilon_high=0.28,
        loss_type="grpo",
        importance_sampling_level="sequence",
        temperature=0.8,
        use_bias_correction_kl=True,
        vllm_is_ratio=torch.rand(B, 1, generator=g) + 0.5,
    )
    ref = MODULES["liger_kernel.chunked_loss.grpo_loss"]["LigerFusedLinearGRPOFunction"]["apply"]
    want = cl.liger_fused_linear_grpo(**values)
    _close(kcf.liger_fused_linear_grpo(*_positional(ref, values)), want)
    _close(kcl.grpo_loss.LigerFusedLinearGRPOFunction.apply(*_positional(ref, values)), want)
    loss, metrics = want
    assert loss.dim() == 0 and isinstance(metrics, tuple) and len(metrics) == 2  # (kl, clip_ratio)


def test_distillation_positional_in_liger_order():
    g, r = _data()
    values = dict(
        student_input=r(8, 6),
        student_weight=r(11, 6),
        teacher_input=r(8, 7),
        teacher_weight=r(11, 7),
        true_labels=torch.randint(0, 11, (8,), generator=g),
        student_bias=r(11),
        teacher_bias=r(11),
        weight_hard_loss=0.3,
        weight_soft_loss=0.7,
        beta=0.2,
        temperature=1.5,
        return_soft_hard_loss=True,
    )
    for name, mod, fn in (
        ("jsd", "jsd_loss", "LigerFusedLinearJSDFunction"),
        ("cosine", "cosine_similarity_loss", "LigerFusedLinearCosineSimilarityFunction"),
    ):
        ref = MODULES[f"liger_kernel.chunked_loss.{mod}"][fn]["apply"]
        want = getattr(cl, f"liger_fused_linear_{name}")(**values)
        _close(getattr(kcf, f"liger_fused_linear_{name}")(*_positional(ref, values)), want)
        _close(getattr(getattr(kcl, mod), fn).apply(*_positional(ref, values)), want)


def test_divergences_positional_in_liger_order():
    g, r = _data()
    q, p = torch.log_softmax(r(6, 10), -1), torch.log_softmax(r(6, 10), -1)
    sl = torch.tensor([1, -100, 2, 3, 4, 5])
    _close(kops.LigerJSDFunction.apply(q, p, sl, 0.3), lt.liger_jsd(q, p, sl, beta=0.3))
    _close(kf.liger_jsd(q, p, sl, 0.3), lt.liger_jsd(q, p, sl, beta=0.3))
    _close(
        kops.LigerKLDivLossFunction.apply(q, p, "sum", True),
        lt.liger_kl_div(q, p, reduction="sum", log_target=True),
    )
    _close(
        kf.liger_kl_div(q, p, True, True, "sum", True),
        lt.liger_kl_div(q, p, reduction="sum", log_target=True),
    )
    _close(kops.LigerTVDLossFunction.apply(q.exp(), p.exp(), sl, "mean"), lt.liger_tvd(q.exp(), p.exp(), sl))
    _close(kf.liger_tvd(q.exp(), p.exp(), sl), lt.liger_tvd(q.exp(), p.exp(), sl))
    xs, ws, xt, wt = r(6, 5), r(10, 5), r(6, 4), r(10, 4)
    want = lt.liger_fused_linear_jsd(xs, ws, xt, wt, sl, jsd_beta=0.7, temperature=0.9)
    _close(kops.LigerFusedLinearJSDFunction.apply(xs, ws, xt, wt, sl, 0.7, -100, 0.9), want)
    _close(kf.liger_fused_linear_jsd(xs, ws, xt, wt, sl, 0.7, -100, 0.9), want)
