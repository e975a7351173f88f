// Host helpers of the norm launch plans (RMSNorm, FusedAddRMSNorm, LayerNorm):
// the register-cached kernels' row layout, alignment checks, and the cached
// occupancy queries of the persistent backwards. In an unnamed namespace, as
// norm_common.cuh (launch_cache.h's query caches are per translation unit).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "kernels/common/common.cuh"
#include "kernels/common/launch_cache.h"

namespace liger_cpp::kernels {
namespace {

// Vectors per thread in the cached kernels: 4 x 16 bytes in flight per operand
// and thread; more spills in the backward (measured with -Xptxas -v).
constexpr int kMaxV = 4;
// Largest row the generic forward stashes in shared memory.
constexpr int64_t kMaxStashBytes = 160 * 1024;

int next_pow2(int64_t n) {
  int p = 32;
  while (p < n && p < (1 << 30)) p <<= 1;  // capped: no int overflow for huge n
  return p;
}

// The register-cached kernels' layout: TX (power of two >= 32) threads a row,
// each holding up to maxv (the kernel's MAXV) vectors, TY rows a block.
struct CachedLayout {
  int tx = 32, ty = 1;
};
// false when a row would need more than 1024 threads.
bool cached_layout(int64_t nvec, CachedLayout& l, int maxv = kMaxV) {
  const int64_t tx = next_pow2((nvec + maxv - 1) / maxv);
  if (tx > 1024) return false;
  l.tx = static_cast<int>(tx);
  l.ty = std::max(1, 256 / l.tx);
  return true;
}

// True when every row of every operand starts on a whole vector of `vec`
// elements: widths and row strides divisible by vec, and each base pointer
// aligned to vec elements of its own type (given with it, in bytes).
bool all_aligned(int vec, int64_t cols, std::initializer_list<int64_t> strides,
                 std::initializer_list<std::pair<const void*, int>> ptrs) {
  if (cols % vec != 0) return false;
  for (int64_t s : strides)
    if (s % vec != 0) return false;
  for (const auto& q : ptrs)
    if (q.first && !is_aligned(q.first, vec * q.second)) return false;
  return true;
}

// Blocks per SM for sizing a persistent grid of a kernel that is launched
// whatever the count (no fallback): at least 1, with the shared-memory limit
// raised first. Should the raise or the query fail, the launch reports it.
int sm_blocks(const void* kernel, int threads, size_t smem) {
  if (!raise_max_dynamic_smem(kernel, smem)) return 1;
  return std::max(cached_blocks_per_sm(kernel, threads, smem), 1);
}

// How many blocks of `threads` threads with `smem` bytes of dynamic shared
// memory the pipelined backwards fit on an SM at once; 0 when none (the
// caller then takes another kernel), with no sticky CUDA error left behind.
// Opts the kernel in to more than 48 KiB of dynamic shared memory and, with
// prefer_smem, asks for the largest shared-memory carveout (a kernel that
// reads nothing twice has no use for L1). All three calls are cached.
int pipe_blocks_per_sm(const void* kern, int threads, size_t smem, bool prefer_smem) {
  if (!raise_max_dynamic_smem(kern, smem)) return 0;
  if (prefer_smem) prefer_max_shared_carveout(kern);
  return cached_blocks_per_sm(kern, threads, smem);
}

}  // namespace
}  // namespace liger_cpp::kernels
