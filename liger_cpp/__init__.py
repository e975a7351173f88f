"""liger_cpp: exact fused kernels for LLM training, in C++/CUDA, with Liger-Kernel's API.

Importing the package loads the compiled extension ``liger_cpp._C``, which registers the
``torch.ops.liger.*`` operators (CPU always; CUDA when the build had a CUDA toolkit).
"""

import os

import torch  # loads libc10/libtorch, which _C links against


def _load_failure(e):
    """The message when _C does not load: naming the torch it was built against where that differs
    from this process's (its symbols change between releases, so it must be rebuilt)."""
    msg = f"liger_cpp: the compiled extension liger_cpp._C is missing or does not load ({e})."
    try:
        from liger_cpp._build_torch import TORCH_VERSION
    except ImportError:
        TORCH_VERSION = None
    if TORCH_VERSION and TORCH_VERSION != torch.__version__:
        msg += (
            f" It was built against torch {TORCH_VERSION} and this process runs torch {torch.__version__}:"
            " rebuild it with the torch you run, without build isolation (pip would otherwise build"
            " against the newest torch)."
        )
    return msg + " Build it with `pip install --no-build-isolation -e .` from the source tree."


try:
    from liger_cpp import _C  # noqa: F401  (registers torch.ops.liger.*)
except ImportError as e:  # pragma: no cover - only without a build
    raise ImportError(_load_failure(e)) from e

from liger_cpp import ops  # noqa: E402,F401  (fake registrations)
from liger_cpp._version import __version__  # noqa: E402,F401

# The developer override of launch plans for a whole process (tests and benchmarks; see
# liger_cpp._testing.plan_override): an unknown key or value fails here, at import.
if os.environ.get("LIGER_CPP_PLAN"):
    torch.ops.liger._set_plan_override(os.environ["LIGER_CPP_PLAN"])


def set_check_targets(enabled: bool = True) -> bool:
    """Check class-index targets on CUDA with a host synchronisation; returns the previous setting.

    The cross-entropy family (cross entropy, fused linear cross entropy, the chunked preference
    losses) needs every target in [0, V) or equal to ``ignore_index``. On the CPU a bad target always
    raises ``ValueError`` naming the first bad position and value. On CUDA the default check is an
    asynchronous device-side assertion (no host synchronisation, CUDA graphs work), which leaves the
    CUDA context unusable: the process must exit. ``liger_cpp.set_check_targets(True)`` (for the
    whole process, e.g. at the top of a training script while debugging data) makes the CUDA check
    synchronise once per call and raise the same catchable ``ValueError`` instead. Not inside CUDA
    graph capture (a synchronisation is not allowed there).
    """
    return torch.ops.liger._set_check_targets(bool(enabled))


def env_report() -> str:
    """torch, CUDA, GPU and what this build contains (also `python -m liger_cpp.env`)."""
    from liger_cpp.env import env_report as _report

    return _report()
