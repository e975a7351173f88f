"""Makes ``import liger_kernel`` load this checkout's compatibility package (compat/), installed as
pip installs it, for the tests/test_compat_*.py modules (call ``ensure_compat()`` before importing
liger_kernel or building a Trainer).

scripts/setup.sh installs it into the environment (CI); when the installed one is missing or is not
this checkout's (another liger-kernel, a stale copy), it is installed once per test session into a
temporary directory put first on sys.path (`pip install --no-deps --target`), which leaves the
environment untouched."""

import atexit
import filecmp
import importlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPAT = os.path.join(REPO, "compat")
_TARGET = []


def _same_tree(installed: str, source: str) -> bool:
    for root, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(root, source)
        for f in files:
            if f.endswith((".py", ".json")):
                other = os.path.join(installed, rel, f)
                if not os.path.exists(other) or not filecmp.cmp(os.path.join(root, f), other, shallow=False):
                    return False
    return True


def staged_source(workdir: str) -> str:
    """A copy of compat/ (with the liger_cpp/_version.py its setup.py reads) under workdir: pip's
    in-tree build then writes nothing into the checkout, and parallel test workers do not share a
    build directory."""
    shutil.copytree(
        COMPAT,
        os.path.join(workdir, "compat"),
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    os.makedirs(os.path.join(workdir, "liger_cpp"))
    shutil.copy(os.path.join(REPO, "liger_cpp", "_version.py"), os.path.join(workdir, "liger_cpp"))
    return os.path.join(workdir, "compat")


def install_compat(target: str) -> None:
    """pip install --no-deps --target `target` ./compat (from a staged copy of compat/)."""
    with tempfile.TemporaryDirectory(prefix="liger_kernel_src_") as work:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
            + ["--no-build-isolation", "--target", target, staged_source(work)],
            check=True,
            capture_output=True,
        )


def ensure_compat() -> str:
    """The directory liger_kernel is imported from (this checkout's compat package)."""
    if "liger_kernel" in sys.modules:
        return os.path.dirname(sys.modules["liger_kernel"].__file__)
    spec = importlib.util.find_spec("liger_kernel")
    if (
        spec is not None
        and spec.origin
        and _same_tree(os.path.dirname(spec.origin), os.path.join(COMPAT, "liger_kernel"))
    ):
        return os.path.dirname(spec.origin)
    if not _TARGET:
        target = tempfile.mkdtemp(prefix="liger_kernel_compat_")
        atexit.register(shutil.rmtree, target, True)
        install_compat(target)
        sys.path.insert(0, target)
        importlib.invalidate_caches()
        _TARGET.append(target)
    # transformers caches its availability checks (functools.lru_cache): recompute them.
    try:
        from transformers.utils import import_utils

        for name in ("is_liger_kernel_available",):
            fn = getattr(import_utils, name, None)
            if hasattr(fn, "cache_clear"):
                fn.cache_clear()
    except ImportError:
        pass
    return os.path.join(_TARGET[0], "liger_kernel")
