// Helpers shared by the row-wise norm kernels (RMSNorm, FusedAddRMSNorm,
// LayerNorm): launch planning for the register-cached row kernels, weight
// loads, and the fixed-order reduction of per-block fp32 partial sums.
// Everything is in an unnamed namespace: each .cu gets its own copy (kernels
// included), so no template kernel is shared across translation units.
#pragma once

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "kernels/common/common.cuh"
#include "kernels/common/env_knob.h"
#include "kernels/common/launch_cache.h"

namespace liger_cpp::kernels {
namespace {

constexpr int kGroupScratch = 32 * 32;  // floats: up to 32 groups x 32 warps
// Vectors per thread in the cached kernels: 4 x 16 bytes in flight per operand
// and thread; more spills in the backward (measured with -Xptxas -v).
constexpr int kMaxV = 4;
// Largest row the generic forward stashes in shared memory.
constexpr int64_t kMaxStashBytes = 160 * 1024;

// RMSNorm's xn = x * rstd as the forward multiplies it by the weight (llama,
// HF's LlamaRMSNorm, rounds it to x's dtype T first).
template <typename T>
__device__ __forceinline__ float normed(float xf, float r, bool llama) {
  const float v = xf * r;
  return llama ? round_through<T>(v) : v;
}

// (w + offset) for VEC consecutive columns starting at column c (a multiple
// of VEC), loaded as one aligned access; all ones without a weight.
template <typename WT, int VEC>
__device__ __forceinline__ void load_weight(const WT* w, int64_t c, float offset, float (&out)[VEC]) {
  if (w == nullptr) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = 1.f;
    return;
  }
  const Vec<WT, VEC> wv = load_vec<WT, VEC>(w + c);
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = to_float<WT>(wv.v[j]) + offset;
}

// dw[c] = sum_g partial[g][c] in a fixed order: 32 columns per block, the
// blockDim.y threads of a column each sum a strided slice, then a fixed tree.
// The slice is loaded 8 rows at a time before they are added (in order): one
// load at a time was a chain of ~17 L2 round trips (9 us for 264 x 4096).
template <typename WT>
__global__ void __launch_bounds__(512)
    reduce_partials(const float* __restrict__ partial, int64_t groups, int64_t cols, WT* __restrict__ dw) {
  pdl_wait();  // launched with PDL after the backward that wrote `partial`
  __shared__ float s[16][33];
  constexpr int kBatch = 8;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t ystep = blockDim.y;
  float acc = 0.f;
  if (c < cols)
    for (int64_t g0 = threadIdx.y; g0 < groups; g0 += kBatch * ystep) {
      float v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t g = g0 + k * ystep;
        v[k] = g < groups ? partial[g * cols + c] : 0.f;
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k)
        if (g0 + k * ystep < groups) acc += v[k];
    }
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  for (int h = blockDim.y / 2; h > 0; h >>= 1) {
    if (static_cast<int>(threadIdx.y) < h) s[threadIdx.y][threadIdx.x] += s[threadIdx.y + h][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < cols) dw[c] = from_float<WT>(s[0][threadIdx.x]);
}

// As reduce_partials, for rows of a multiple of 4 floats (16-byte aligned):
// after the backward, the reduction's time is latency (at 264 x 4096 it ran
// 3.7 us, about 4 us past the backward's end even with PDL: ~17 loads a
// thread in batches, then a 4-barrier tree). Here a block of 256 threads
// takes 16 columns: thread t loads float4 lane t & 3 of rows g, g + 64, ...
// (g = t >> 2), all of a batch in flight at once (one L2 round trip for up to
// 512 groups), sums them in row order; then ONE barrier and each column's 64
// slice sums are added 4 at a time and finished by a 16-lane butterfly (every
// lane gets the same bits). Fixed order: deterministic. blockIdx.y picks the
// (partial, out) pair: 0 -> (p0, d0), 1 -> (p1, d1) (LayerNorm's dW and dB);
// a null partial skips its half.
template <typename WT>
__global__ void __launch_bounds__(256)
    reduce_partials4(const float* __restrict__ p0, WT* __restrict__ d0, const float* __restrict__ p1,
                     WT* __restrict__ d1, int64_t groups, int64_t cols) {
  pdl_wait();  // launched with PDL after the backward that wrote the partials
  constexpr int kSlices = 64, kBatch = 8;
  __shared__ float s[kSlices][17];
  const float* part = blockIdx.y == 0 ? p0 : p1;
  WT* dst = blockIdx.y == 0 ? d0 : d1;
  if (part == nullptr) return;  // uniform across the block
  const int q = threadIdx.x & 3, g0 = threadIdx.x >> 2;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 16 + q * 4;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  if (c0 < cols) {
    for (int64_t gb = g0; gb < groups; gb += kSlices * kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int64_t g = gb + k * kSlices;
        v[k] = g < groups ? *reinterpret_cast<const float4*>(part + g * cols + c0)
                          : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if (gb + k * kSlices < groups) {
          acc[0] += v[k].x;
          acc[1] += v[k].y;
          acc[2] += v[k].z;
          acc[3] += v[k].w;
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) s[g0][q * 4 + j] = acc[j];
  __syncthreads();
  const int c = threadIdx.x >> 4, k = threadIdx.x & 15;  // column c of 16, slices 4k..4k+3
  float v = ((s[4 * k][c] + s[4 * k + 1][c]) + s[4 * k + 2][c]) + s[4 * k + 3][c];
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 16 + c;
  if (k == 0 && col < cols) dst[col] = from_float<WT>(v);
}

// Finishes dW (and dB) from fp32 partial rows [groups][cols] in fixed order:
// reduce_partials4 where the rows are whole float4s, else the per-column
// kernels. All launched with PDL (they wait for the backward's writes).
template <typename WT>
cudaError_t launch_reduce_partials(const float* p0, WT* d0, const float* p1, WT* d1, int64_t groups,
                                   int64_t cols, cudaStream_t stream) {
  const bool aligned4 =
      cols % 4 == 0 && (p0 == nullptr || is_aligned(p0, 16)) && (p1 == nullptr || is_aligned(p1, 16));
  if (aligned4) {
    const dim3 grid(static_cast<unsigned>(ceil_div(cols, 16)), p1 != nullptr ? 2u : 1u);
    return launch_pdl(&reduce_partials4<WT>, grid, dim3(256), 0, stream, p0, d0, p1, d1, groups, cols);
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, 32)));
  for (int h = 0; h < 2; ++h) {
    const float* p = h == 0 ? p0 : p1;
    if (p == nullptr) continue;
    const cudaError_t err =
        launch_pdl(&reduce_partials<WT>, grid, dim3(32, 16), 0, stream, p, groups, cols, h == 0 ? d0 : d1);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// Packed stores, volatile loads, named barriers and cp.async: used by the
// RMSNorm and LayerNorm kernels alike.

// Two floats rounded to a 16-bit T and packed into one 32-bit word (low half
// first, as in memory): one cvt.rn.{bf16,f16}x2.f32 on sm_80+, the same
// rounding as two from_float calls.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  static_assert(sizeof(T) == 2, "16-bit types only");
  uint32_t u;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&u, &h, 4);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    std::memcpy(&u, &h, 4);
  }
  return u;
}

// VEC floats rounded to T, built as 32-bit words (so nothing downstream sees
// separate 16-bit elements).
template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> pack_vec(const float (&f)[VEC]) {
  static_assert(sizeof(Vec<T, VEC>) % 4 == 0, "whole words only");
  Vec<T, VEC> out;
  uint32_t* o = reinterpret_cast<uint32_t*>(&out);
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = __float_as_uint(f[j]);
  } else {
#pragma unroll
    for (int k = 0; k < VEC / 2; ++k) o[k] = pack2<T>(f[2 * k], f[2 * k + 1]);
  }
  return out;
}

// A whole number of 16-byte vectors stored with st.global.v4.b32 each. The
// plain struct store (store_vec) is split by nvcc in rms_fwd_cached: PTX for
// the bf16 ADD instance stores the last two vectors of each row piece as
// 8 x st.global.u16 (y and s) and the plain instance's y as 4 x 32-bit
// stores, i.e. up to 8 store instructions (and L2 write requests) per 16 bytes.
template <typename V>
__device__ __forceinline__ void store_16B_words(void* dst, const V& v) {
  static_assert(sizeof(V) % 16 == 0, "whole 16-byte vectors only");
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
  char* d = static_cast<char*>(dst);
#pragma unroll
  for (int c = 0; c < static_cast<int>(sizeof(V) / 16); ++c)
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(d + 16 * c), "r"(w[4 * c]),
                 "r"(w[4 * c + 1]), "r"(w[4 * c + 2]), "r"(w[4 * c + 3]));
}

// load_16B_volatile for any whole number of 16-byte vectors.
template <typename V>
__device__ __forceinline__ void load_words_volatile(V& dst, const void* src) {
  static_assert(sizeof(V) % 16 == 0, "whole 16-byte vectors only");
  uint32_t* d = reinterpret_cast<uint32_t*>(&dst);
  const char* s = static_cast<const char*>(src);
#pragma unroll
  for (int c = 0; c < static_cast<int>(sizeof(V) / 16); ++c)
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(d[4 * c]), "=r"(d[4 * c + 1]), "=r"(d[4 * c + 2]), "=r"(d[4 * c + 3])
                 : "l"(s + 16 * c));
}

// Named barrier over the `nthreads` threads (a multiple of 32) that use the
// same `id` (1..15; 0 is __syncthreads's).
__device__ __forceinline__ void named_barrier(int id, int nthreads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}
constexpr int kMaxNamedGroups = 15;  // named barriers 1..15

// 16 bytes global -> shared without passing through registers (sm_80+), so
// the bytes in flight are not limited by the register file.
__device__ __forceinline__ void copy_16B_async(void* dst_smem, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst_smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#else
  *static_cast<uint4*>(dst_smem) = *static_cast<const uint4*>(src);
#endif
}
// 4 bytes global -> shared, as copy_16B_async (through L1: .cg takes 16 bytes only).
__device__ __forceinline__ void copy_4B_async(void* dst_smem, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst_smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
#else
  *static_cast<uint32_t*>(dst_smem) = *static_cast<const uint32_t*>(src);
#endif
}
__device__ __forceinline__ void async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

struct Plan {
  bool cached = false;
  int vec = 1, tx = 32, ty = 1;
  bool stash = false;     // forward generic: row stashed in shared memory
  bool dw_smem = false;   // backward cached: dW partials in shared memory
  int64_t grid = 0;       // backward: persistent blocks (cached) or row splits (generic)
  int64_t ws_floats = 0;  // backward workspace
};

int next_pow2(int64_t n) {
  int p = 32;
  while (p < n && p < (1 << 30)) p <<= 1;  // capped: no int overflow for huge n
  return p;
}

// Chooses the cached layout: TX (power of two >= 32) threads per row, maxv
// (the kernel's MAXV) vectors per thread, TY rows per block.
bool pick_cached(int64_t nvec, Plan& p, int maxv = kMaxV) {
  const int64_t tx = next_pow2((nvec + maxv - 1) / maxv);
  if (tx > 1024) return false;
  p.cached = true;
  p.tx = static_cast<int>(tx);
  p.ty = std::max(1, 256 / p.tx);
  return true;
}

// Rows a block of the cached forwards: LIGER_CPP_LN_FWD_TY / LIGER_CPP_RMS_FWD_TY
// = 1|2|4 (A/B measurements of the block shape: TY = 1 gives 128-thread blocks
// at 4096 bf16 columns, ten a SM at 48 registers, each with a 4-warp barrier);
// unset or a block above 1024 threads: the caller's p.ty.
int fwd_rows_per_block(const char* knob, const Plan& p) {
  const int i = env_choice(knob, {"1", "2", "4"});
  const int ty = i < 0 ? p.ty : 1 << i;
  return p.tx * ty <= 1024 ? ty : p.ty;
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

#define LIGER_DISPATCH_VEC(vec, VEC_FULL, ...) \
  if ((vec) == 1) {                            \
    constexpr int VEC = 1;                     \
    __VA_ARGS__                                \
  } else {                                     \
    constexpr int VEC = VEC_FULL;              \
    __VA_ARGS__                                \
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
template <typename K>
int pipe_blocks_per_sm(K* kern, int threads, size_t smem, bool prefer_smem) {
  const void* f = reinterpret_cast<const void*>(kern);
  if (!raise_max_dynamic_smem(f, smem)) return 0;
  if (prefer_smem) prefer_max_shared_carveout(f);
  return cached_blocks_per_sm(f, threads, smem);
}

}  // namespace
}  // namespace liger_cpp::kernels
