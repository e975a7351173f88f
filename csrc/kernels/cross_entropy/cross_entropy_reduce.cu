// The small steps around the cross-entropy row kernel, one launch each
// (declared in cross_entropy.h). The ATen expressions they replace (target
// check, valid count, weighted count, reciprocals, the loss sums) were about
// fifteen launches of a few microseconds each, a tenth of the whole op at
// LLM vocabulary sizes (docs/kernels/cross_entropy.md): now one launch before
// the row kernel and, for a reduced loss, one after it.
// One block each: the inputs are one value per row (or class), and a fixed
// thread-to-element map with a fixed tree gives the same sums on every call;
// the sums are float64, rounded once.
#include <assert.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cross_entropy/cross_entropy.h"

namespace liger_cpp::kernels {
namespace {

constexpr int kReduceThreads = 1024;

// Sum over the block in a fixed order; every thread gets the result.
template <typename A>
__device__ A block_sum(A v, A* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int half = kReduceThreads / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) scratch[threadIdx.x] += scratch[threadIdx.x + half];
    __syncthreads();
  }
  const A total = scratch[0];
  __syncthreads();  // scratch is reused by the next call
  return total;
}

__global__ void __launch_bounds__(kReduceThreads)
    ce_prologue_kernel(const int64_t* __restrict__ target, int64_t rows, int64_t V, int64_t ignore_index,
                       const float* __restrict__ weight, int reduction, float* __restrict__ scales) {
  __shared__ double dscratch[kReduceThreads];
  __shared__ long long iscratch[kReduceThreads];
  long long valid = 0, bad = 0;
  double wy = 0.0, wall = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += kReduceThreads) {
    const int64_t t = target[r];
    if (t == ignore_index) continue;
    if (t < 0 || t >= V) {
      ++bad;
      continue;
    }
    ++valid;
    if (weight != nullptr) wy += weight[t];
  }
  if (weight != nullptr)
    for (int64_t j = threadIdx.x; j < V; j += kReduceThreads) wall += weight[j];
  bad = block_sum(bad, iscratch);
  if (bad != 0) {
    // As at::_assert_async (called directly, so NDEBUG cannot compile it
    // out): the stream fails with a device-side assertion,
    // reported at the next synchronising call, and nothing reads out of bounds
    // (the row kernel gives such rows NaN, never an access at the target).
    if (threadIdx.x == 0)
      __assert_fail("liger_cpp: argument 'target': every value must be ignore_index or in [0, V)", __FILE__,
                    __LINE__, __func__);
    return;
  }
  valid = block_sum(valid, iscratch);
  if (weight != nullptr) {
    wy = block_sum(wy, dscratch);
    wall = block_sum(wall, dscratch);
  }
  if (threadIdx.x != 0) return;
  float ce = 1.f, z = 1.f;
  if (reduction == 1) {  // mean: 1 / N and 1 / sum of w[y]; 0 for an all-ignored batch
    const float n = static_cast<float>(valid);
    z = valid > 0 ? 1.f / n : 0.f;
    const float ws = static_cast<float>(wy);
    ce = weight == nullptr ? z : (ws != 0.f ? 1.f / ws : 0.f);
  }
  scales[0] = ce;
  scales[1] = z;
  scales[2] = static_cast<float>(wall);
}

__global__ void __launch_bounds__(kReduceThreads)
    ce_epilogue_kernel(const float* __restrict__ loss_rows, const float* __restrict__ z_rows, int64_t rows,
                       const float* __restrict__ scales, float* __restrict__ loss, float* __restrict__ z) {
  __shared__ double scratch[kReduceThreads];
  double l = 0.0, zs = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += kReduceThreads) {
    l += loss_rows[r];
    if (z_rows != nullptr) zs += z_rows[r];
  }
  l = block_sum(l, scratch);
  if (z_rows != nullptr) zs = block_sum(zs, scratch);
  if (threadIdx.x != 0) return;
  const double zl = zs * scales[1];
  *loss = static_cast<float>(l * scales[0] + zl);
  *z = static_cast<float>(zl);
}

}  // namespace

cudaError_t ce_prologue(const int64_t* target, int64_t rows, int64_t V, int64_t ignore_index,
                        const float* weight, int reduction, float* scales, cudaStream_t stream) {
  ce_prologue_kernel<<<1, kReduceThreads, 0, stream>>>(target, rows, V, ignore_index, weight, reduction,
                                                       scales);
  return cudaGetLastError();
}

cudaError_t ce_epilogue(const float* loss_rows, const float* z_rows, int64_t rows, const float* scales,
                        float* loss, float* z, cudaStream_t stream) {
  ce_epilogue_kernel<<<1, kReduceThreads, 0, stream>>>(loss_rows, z_rows, rows, scales, loss, z);
  return cudaGetLastError();
}

}  // namespace liger_cpp::kernels
