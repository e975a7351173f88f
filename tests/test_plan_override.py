"""The developer override of launch plans (liger_cpp._testing): strict about keys and values."""

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import CUDA_OK

from liger_cpp._testing import plan_override, set_plan_override


def test_unknown_key_is_an_error_naming_it():
    with pytest.raises(ValueError, match="unknown key 'no_such_key'"):
        set_plan_override("no_such_key=1")
    with pytest.raises(ValueError, match="unknown key 'no_such_key'"):
        with plan_override(no_such_key="1"):
            pass


def test_malformed_spec_is_an_error():
    with pytest.raises(ValueError, match="expected key=value"):
        set_plan_override("novalue")


def test_a_failed_set_changes_nothing_and_clear_restores():
    assert set_plan_override("") == ""
    with pytest.raises(ValueError):
        set_plan_override("no_such_key=1")
    assert set_plan_override("") == ""


# The keys of the GLU, cross-entropy and PDL plans (docs/tuning.md): every value is accepted, any
# other named in the error with what is accepted.
@pytest.mark.parametrize(
    "key,values",
    [
        ("pdl", ["on", "off"]),
        ("glu", ["generic"]),
        ("ce", ["two_pass", "cluster", "smem"]),
        ("ce_smem_blocks", ["1", "2", "4", "8"]),
    ],
)
def test_plan_keys_accept_their_values_only(key, values):
    for v in values:
        with plan_override(**{key: v}):
            pass
    with pytest.raises(
        ValueError, match=f"plan override {key}: expected one of {', '.join(values)}, got 'x'"
    ):
        set_plan_override(f"{key}=x")
    assert set_plan_override("") == ""


# LIGER_CPP_PDL, the user's kill switch, is read once per process; a value other than on / off is an
# error naming it (on the first launch that asks: the norms' backwards), in a fresh process.
@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("value,ok", [("off", True), ("on", True), ("maybe", False)])
def test_cuda_pdl_environment_kill_switch(value, ok):
    code = textwrap.dedent(
        """
        import torch
        from liger_cpp.ops.rms_norm import rms_norm
        x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.ones(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        try:
            rms_norm(x, w, 1e-6).sum().backward()
            torch.cuda.synchronize()
            print("RAN")
        except (RuntimeError, ValueError) as e:
            print("ERROR", e)
        """
    )
    env = {**os.environ, "LIGER_CPP_PDL": value}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if ok:
        assert "RAN" in out.stdout, out.stdout + out.stderr
    else:
        want = "LIGER_CPP_PDL: expected one of on, off (or unset), got 'maybe'"
        assert want in out.stdout, out.stdout + out.stderr
