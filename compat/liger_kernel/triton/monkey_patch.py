"""Liger-Kernel's Triton cache manager: Triton's file cache, each entry written in a directory of
its own and moved into place with one rename, so processes sharing a cache (several ranks, a
network file system) never read a half-written file (the transient FileNotFoundError of Triton's
compilation that Liger's switch works around). Needs Triton (what torch's CUDA wheels ship)."""

import os
import tempfile

from triton.runtime.cache import FileCacheManager


class LigerTritonFileCacheManager(FileCacheManager):
    def put(self, data, filename, binary=True) -> str:
        if not self.cache_dir:
            raise RuntimeError("Could not create or locate cache dir")
        binary = isinstance(data, bytes)
        path = self._make_path(filename)
        # a private directory beside the entry (same file system: the rename is atomic on POSIX)
        staging = tempfile.mkdtemp(prefix=f"tmp.pid_{os.getpid()}_", dir=self.cache_dir)
        staged = os.path.join(staging, filename)
        try:
            with open(staged, "wb" if binary else "w") as f:
                f.write(data if binary else str(data))
            os.replace(staged, path)
        finally:
            if os.path.exists(staged):
                os.remove(staged)
            os.rmdir(staging)
        return path


def apply_liger_triton_cache_manager():
    """Makes Triton use LigerTritonFileCacheManager (TRITON_CACHE_MANAGER), in this process and the
    ones it starts."""
    os.environ["TRITON_CACHE_MANAGER"] = "liger_kernel.triton.monkey_patch:LigerTritonFileCacheManager"
