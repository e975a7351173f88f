"""python -m liger_cpp.demo: the training worker (in-process, tiny config) and the report."""

import argparse

import pytest

pytest.importorskip("transformers")

from hf_models import single_thread  # noqa: E402,F401  (autouse fixture)

from liger_cpp import demo  # noqa: E402
from liger_cpp.transformers import monkey_patch as mp  # noqa: E402
from liger_cpp.transformers.monkey_patch import revert  # noqa: E402


def test_corpus_is_shipped_bytes():
    data = demo.corpus()
    assert len(data) > 20_000 and max(data) < 256


def test_worker_runs_match_and_report(capsys):
    args = argparse.Namespace(
        device="cpu",
        size="tiny",
        batch=2,
        seq=32,
        steps=3,
        dtype="fp32",
        lr=1e-3,
        attn="sdpa",
        grad_checkpointing=False,
    )
    results = {}
    try:
        for run in ("hf", "liger"):
            results[run] = demo.worker(argparse.Namespace(run=run, **vars(args)))
        assert revert._ORIGINALS  # the liger run patched Llama
    finally:
        mp.revert_liger_kernel()
    hf, lg = results["hf"], results["liger"]
    assert len(hf["losses"]) == 3 and hf["losses"][-1] < hf["losses"][0]
    assert lg["losses"] == pytest.approx(hf["losses"], rel=1e-4)
    assert hf["tokens_per_s"] > 0 and lg["peak_memory"] > 0 and hf["params"] == lg["params"]
    text = demo.report(args, results)
    assert "tokens/s" in text and "peak memory" in text and text.count("\n") > 8
    results["hf"] = dict(error="out of memory", losses=hf["losses"][:1])
    assert "out of memory" in demo.report(args, results)


def test_parse_defaults():
    args = demo.parse(["--device=cpu"])
    assert (args.size, args.dtype, args.seq) == ("tiny", "fp32", 128)
    args = demo.parse(["--device=cuda", "--steps=5"])
    assert (args.size, args.dtype, args.steps) == ("1b", "bf16", 5)
    cfg = demo.llama_config("1b", 2048)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (2048, 16, 128256)
