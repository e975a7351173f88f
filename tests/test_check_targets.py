"""Out-of-range class targets (issue 26, item 5). On the CPU every op of the cross-entropy family
raises a ValueError naming the first bad position and value. On CUDA the default is an asynchronous
device-side assertion (no host synchronisation; it leaves the CUDA context unusable), and the
documented opt-in liger_cpp.set_check_targets(True) makes the check synchronise and raise the same
catchable ValueError, after which the process's CUDA context still works."""

import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import CUDA_OK

import liger_cpp
from liger_cpp.ops.cross_entropy import cross_entropy
from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy
from liger_cpp.ops.fused_linear_preference import fused_linear_kto, fused_linear_preference


def test_set_check_targets_returns_the_previous_setting():
    assert liger_cpp.set_check_targets(True) is False
    try:
        assert liger_cpp.set_check_targets(True) is True
    finally:
        assert liger_cpp.set_check_targets(False) is True
    assert liger_cpp.set_check_targets(False) is False


@pytest.mark.parametrize("check", [False, True])
def test_cpu_raises_value_error_naming_position_and_value(check):
    prev = liger_cpp.set_check_targets(check)  # the CPU check is the same either way
    try:
        x = torch.randn(2, 5, 30, requires_grad=True)
        t = torch.randint(0, 30, (2, 5))
        t[1, 3] = 30
        with pytest.raises(ValueError, match=r"argument 'target'.*\[0, 30\).*got 30 at position 8"):
            cross_entropy(x, t)
        w = torch.randn(30, 16, requires_grad=True)
        h = torch.randn(2, 5, 16, requires_grad=True)
        t[1, 3] = -7
        with pytest.raises(ValueError, match="got -7 at position 8"):
            fused_linear_cross_entropy(h, w, t)
        with pytest.raises(ValueError, match="got -7 at position 8"):
            fused_linear_cross_entropy(h, w, t, reduction="none")
        with pytest.raises(ValueError, match="got -7 at position 8"):
            fused_linear_preference(h, w, t)
        with pytest.raises(ValueError, match="got -7 at position 8"):
            fused_linear_kto(h, w, t, torch.tensor([True, False]))
        t[1, 3] = -100  # ignore_index: fine
        cross_entropy(x, t).backward()
    finally:
        liger_cpp.set_check_targets(prev)


_CUDA_CHILD = textwrap.dedent(
    """
    import torch, liger_cpp
    from liger_cpp.ops.cross_entropy import cross_entropy
    from liger_cpp.ops.fused_linear_cross_entropy import fused_linear_cross_entropy
    from liger_cpp.ops.fused_linear_preference import fused_linear_preference
    assert liger_cpp.set_check_targets(True) is False
    x = torch.randn(6, 5, 300, device="cuda", requires_grad=True)
    h = torch.randn(6, 5, 32, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(300, 32, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, 300, (6, 5), device="cuda")
    t[4, 2] = 300
    calls = {
        "cross_entropy": lambda: cross_entropy(x, t),
        "cross_entropy none": lambda: cross_entropy(x, t, reduction="none"),
        "flce": lambda: fused_linear_cross_entropy(h, w, t),
        "flce none": lambda: fused_linear_cross_entropy(h, w, t, reduction="none"),
        "preference": lambda: fused_linear_preference(h, w, t),
    }
    for name, call in calls.items():
        try:
            call()
        except ValueError as e:
            assert "got 300 at position 22" in str(e), (name, e)
        else:
            raise SystemExit(name + ": no ValueError")
    # the CUDA context is still usable after the caught errors
    t[4, 2] = -100
    cross_entropy(x, t).backward()
    torch.cuda.synchronize()
    assert torch.isfinite(x.grad).all()
    liger_cpp.set_check_targets(False)
    print("ok")
    """
)


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_cuda_opt_in_raises_a_catchable_value_error():
    # In a child process: if the opt-in failed, a device-side assertion would poison this process.
    r = subprocess.run([sys.executable, "-c", _CUDA_CHILD], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


@pytest.mark.skipif(not CUDA_OK, reason="needs a GPU and a CUDA build")
def test_cuda_default_has_no_host_synchronisation():
    # The default check stays an asynchronous device assertion: nothing synchronises.
    assert liger_cpp.set_check_targets(False) is False
    x = torch.randn(64, 1000, device="cuda", requires_grad=True)
    t = torch.randint(0, 1000, (64,), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        cross_entropy(x, t).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
