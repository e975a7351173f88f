"""Liger-Kernel 0.8.5's ``liger_kernel.ops.configure``: the collective set-up of the native
kernels of the optional liger-cute-kernels package (LCK) for its fused linear scaled cross entropy
and MoE. liger_cpp's kernels need no such set-up, so ``configure`` does what Liger-Kernel does where
LCK is absent: it warns and returns False, changing nothing."""

import warnings
from dataclasses import dataclass
from typing import Optional

__all__ = ["configure", "FusedLinearCrossEntropyConfig", "MoEConfig"]


@dataclass(frozen=True)
class FusedLinearCrossEntropyConfig:
    """Capacity of LCK's fused linear scaled cross entropy (and its process group's name)."""

    max_tokens: int
    hidden_size: int
    local_vocab_size: int
    group: Optional[str] = None
    tiles_per_reduce: int = 1


@dataclass(frozen=True)
class MoEConfig:
    """Capacity and expert-parallel layout of LCK's MoE (and its process group's name)."""

    max_tokens: int
    hidden_size: int
    num_experts: int
    top_k: int
    num_hosts: int
    gpus_per_host: int
    group: Optional[str] = None
    max_inflight: int = 1


def configure(*, process_groups=None, bootstrap_group=None, device=None, flsce=None, moe=None) -> bool:
    """False, with a warning: there is no native runtime to configure under liger_cpp."""
    warnings.warn(
        "liger_kernel (liger_cpp): liger_kernel.ops.configure sets up liger-cute-kernels' native "
        "runtime, which liger_cpp does not use; nothing was configured. liger_cpp's kernels need no "
        "set-up.",
        UserWarning,
        stacklevel=2,
    )
    return False
