"""benchmarks/captured_step.py: a whole training step (patched Llama + FLCE + fused AdamW; a DPO
step) eager with the sync debug mode on, then captured in a CUDA graph and replayed: same losses.

On the CPU only the eager reference path runs (the script's own smoke test: both cases train, the
fused loss is what the patched forward ran); the capture itself is the CUDA test."""

import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import CUDA_OK

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import captured_step  # noqa: E402

from liger_cpp.transformers import monkey_patch as mp  # noqa: E402


@pytest.fixture(autouse=True)
def _unpatch():
    # the script patches the Llama classes (class level): undone, so no later test in this process
    # builds a patched model by accident (test_fsdp's plain-HF reference checks for that)
    yield
    mp.revert_liger_kernel()


def test_eager_reference_path_on_cpu(tmp_path, monkeypatch):
    import liger_cpp.transformers.causal_lm as causal_lm

    calls = []
    fused = causal_lm.liger_fused_linear_cross_entropy
    monkeypatch.setattr(
        causal_lm, "liger_fused_linear_cross_entropy", lambda *a, **k: calls.append(1) or fused(*a, **k)
    )
    out = tmp_path / "cs.json"
    rc = captured_step.main(
        ["--device", "cpu", "--size", "tiny", "--seq", "16", "--steps", "2", "--out", str(out)]
    )
    assert rc == 0
    res = json.loads(out.read_text())
    for case in ("lm", "dpo"):
        assert res[case]["passed"] and res[case]["eager_finite"], res[case]
        assert len(res[case]["eager_losses"]) == 2
        assert res[case]["eager_losses"][0] != res[case]["eager_losses"][1]  # the optimizer stepped
    # the lm case's priming step and its two steps went through the fused linear cross entropy
    assert len(calls) == 3


def test_restore_resets_weights_and_optimizer_state():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    opt = captured_step.make_optimizer(lin.parameters(), "cpu")
    p0 = captured_step.snapshot(lin)
    lin(torch.randn(2, 4)).sum().backward()
    opt.step()
    assert not torch.equal(lin.weight, p0[0])
    captured_step.restore(lin, opt, p0)
    assert all(torch.equal(a, b) for a, b in zip(lin.parameters(), p0))
    assert all(
        float(v.abs().sum()) == 0 for s in opt.state.values() for v in s.values() if torch.is_tensor(v)
    )


def test_causal_mask_is_additive_and_causal():
    m = captured_step.causal_mask(4, "cpu", torch.float32)
    assert m.shape == (1, 1, 4, 4)
    assert torch.equal(torch.isinf(m[0, 0]), torch.ones(4, 4, dtype=torch.bool).triu(1))
    assert m[0, 0].tril().abs().sum() == 0


def test_dpo_targets_mask_the_prompt_and_shift():
    ids = torch.arange(12).view(2, 6)
    t = captured_step.dpo_targets(ids, 2)
    assert t[:, :2].eq(-100).all() and t[:, -1].eq(-100).all()
    assert torch.equal(t[:, 2:-1], ids[:, 3:])


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_cuda_captured_step_matches_eager_bitwise(tmp_path):
    # 2 decoder layers of the "1b" shape (the full 128k vocabulary through the FLCE): the eager
    # steps raise on any host synchronisation; the replayed graph gives bitwise the eager losses.
    out = tmp_path / "cs.json"
    rc = captured_step.main(
        ["--layers", "2", "--batch", "2", "--seq", "256", "--steps", "5", "--out", str(out)]
    )
    res = json.loads(out.read_text())
    for case in ("lm", "dpo"):
        r = res[case]
        assert r["host_sync"] is None, r["host_sync"]
        assert "capture_error" not in r, r.get("capture_error")
        assert r["losses_bitwise_equal"] and r["final_weights_bitwise_equal"], r
    assert rc == 0
