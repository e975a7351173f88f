"""Developer tools for tests and benchmarks (not part of the user API)."""

import contextlib
from collections.abc import Iterator

import torch

import liger_cpp  # noqa: F401  (registers torch.ops.liger.*)


def set_plan_override(spec: str) -> str:
    """Replace the launch-plan override by `spec` ("key=value,..."; "" clears); returns the previous."""
    return torch.ops.liger._set_plan_override(spec)


@contextlib.contextmanager
def plan_override(**choices: str) -> Iterator[None]:
    """Force launch-plan choices inside the block, e.g. ``plan_override(rms_bwd="cached")``.

    Keys and values are those of csrc/kernels/common/plan_override.h (docs/tuning.md); an unknown
    key or value raises ValueError. The previous override is restored on exit.
    """
    prev = set_plan_override(",".join(f"{k}={v}" for k, v in choices.items()))
    try:
        yield
    finally:
        set_plan_override(prev)
