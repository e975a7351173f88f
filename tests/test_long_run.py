"""benchmarks/long_run.py: the long-run comparison's workers (in-process, tiny config, CPU) and its
analysis (finiteness, same initial weights, loss differences against the noise run, memory growth,
tokens/s steadiness) on real and on doctored records."""

import argparse
import copy
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import long_run  # noqa: E402
from hf_models import single_thread  # noqa: E402,F401  (autouse fixture)

from liger_cpp.transformers import monkey_patch as mp  # noqa: E402


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    init = tmp_path_factory.mktemp("lr") / "init.pt"
    args = argparse.Namespace(
        device="cpu", size="tiny", steps=6, batch=2, seq=32, dtype="fp32", lr=1e-3, clip=1.0, init=str(init)
    )
    out = {}
    try:
        for run in ("hf", "liger", "hf_alt"):
            if run != "liger":
                mp.revert_liger_kernel()
            out[run] = long_run.worker(args, run)
    finally:
        mp.revert_liger_kernel()
    return args, out


def test_runs_share_init_and_train(records):
    args, rec = records
    a = long_run.analyse(rec, args.batch, args.seq, window=3, settle=2)
    assert a["same_init"] and a["ok"]["finite"] and a["ok"]["complete"]
    for r in rec.values():
        assert len(r["losses"]) == 6 and r["losses"][-1] < r["losses"][0]
        assert len(r["grad_norms"]) == len(r["step_s"]) == len(r["mem_allocated"]) == 6
    # fp32: the three stacks agree to float32 rounding, and the verdict says so
    assert a["loss_diff"]["max_abs"] < 1e-4 and a["ok"]["within_noise"]
    text = long_run.summary(args, a)
    assert "within" in text and "same initial weights in every run: True" in text


def test_analysis_flags_what_it_should(records, tmp_path):
    args, rec = records
    bad = copy.deepcopy(rec)
    bad["liger"]["losses"][3] = float("nan")
    bad["liger"]["mem_allocated"] = [2**30 + i * 2**27 for i in range(6)]  # +128 MiB a step
    bad["hf"]["init_checksum"] = [0.0, 1.0]
    a = long_run.analyse(bad, args.batch, args.seq, window=3, settle=2)
    assert not a["ok"]["finite"] and not a["ok"]["no_memory_growth"] and not a["same_init"]
    far = copy.deepcopy(rec)
    far["liger"]["losses"] = [x + 0.5 for x in far["liger"]["losses"]]
    assert long_run.analyse(far, args.batch, args.seq, window=3, settle=2)["ok"]["within_noise"] is False
    slow = copy.deepcopy(rec)
    slow["liger"]["step_s"] = [0.1, 0.1, 0.1, 1.0, 0.1, 0.1]  # one window 5.5x slower
    assert (
        long_run.analyse(slow, args.batch, args.seq, window=2, settle=0)["ok"]["tokens_per_s_steady"] is False
    )
    pytest.importorskip("matplotlib")
    png = tmp_path / "lr.png"
    a = long_run.analyse(rec, args.batch, args.seq, window=3, settle=2)
    assert "written" in long_run.plot(rec, a, str(png), "t") and png.stat().st_size > 10_000
