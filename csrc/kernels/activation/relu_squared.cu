// ReLU squared: the plan and the kernels (element-wise, memory bound). Each thread handles one
// 16-byte vector (or one element when a pointer is misaligned) per step of a grid-stride loop; the
// grid is capped at a few waves of resident blocks, so a tensor of any size takes one launch.
#include "kernels/activation/relu_squared.h"
#include "kernels/common/common.cuh"

namespace liger_cpp::kernels {
namespace {

// Blocks per SM for a 256-thread element-wise kernel (8 resident; 4 waves' worth is plenty to hide
// latency, more only adds scheduling).
constexpr int64_t kBlocksPerSm = 8 * 4;

template <typename T>
__device__ __forceinline__ float fwd_elem(T x) {
  const float r = fmaxf(to_float<T>(x), 0.f);
  return r * r;
}

template <typename T>
__device__ __forceinline__ float bwd_elem(T x, T g) {
  const float r = fmaxf(to_float<T>(x), 0.f);
  return to_float<T>(g) * (2.f * r);
}

// VEC elements a thread and step; BWD: dx = dy * 2 relu(x), else y = relu(x)^2.
template <typename T, int VEC, bool BWD>
__global__ void __launch_bounds__(kReluSquaredThreads)
    relu_squared_kernel(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ out, int64_t n) {
  const int64_t nvec = n / VEC;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < nvec; i += stride) {
    const Vec<T, VEC> xv = load_vec<T, VEC>(x + i * VEC);
    Vec<T, VEC> o;
    if constexpr (BWD) {
      const Vec<T, VEC> gv = load_vec<T, VEC>(dy + i * VEC);
#pragma unroll
      for (int j = 0; j < VEC; ++j) o.v[j] = from_float<T>(bwd_elem<T>(xv.v[j], gv.v[j]));
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) o.v[j] = from_float<T>(fwd_elem<T>(xv.v[j]));
    }
    store_vec<T, VEC>(out + i * VEC, o);
  }
  // The tail (fewer than VEC elements) by the first threads of block 0.
  if constexpr (VEC > 1) {
    if (blockIdx.x == 0) {
      const int64_t t = nvec * VEC + threadIdx.x;
      if (t < n) {
        if constexpr (BWD)
          out[t] = from_float<T>(bwd_elem<T>(x[t], dy[t]));
        else
          out[t] = from_float<T>(fwd_elem<T>(x[t]));
      }
    }
  }
}

template <bool BWD>
cudaError_t launch(const ReluSquaredArgs& a, int sm_count, cudaStream_t stream) {
  if (a.n == 0) return cudaSuccess;
  bool aligned = is_aligned(a.x, 16) && is_aligned(a.out, 16);
  if (BWD) aligned = aligned && is_aligned(a.dy, 16);
  return dispatch_dtype(a.dtype, [&](auto tv) -> cudaError_t {
    using T = decltype(tv);
    constexpr int kVec = 16 / sizeof(T);
    const ReluSquaredPlan p = plan_relu_squared(a.n, sizeof(T), aligned, sm_count);
    const T* x = static_cast<const T*>(a.x);
    const T* dy = static_cast<const T*>(a.dy);
    T* out = static_cast<T*>(a.out);
    const unsigned grid = static_cast<unsigned>(p.grid);
    if (p.vec)
      relu_squared_kernel<T, kVec, BWD><<<grid, kReluSquaredThreads, 0, stream>>>(x, dy, out, a.n);
    else
      relu_squared_kernel<T, 1, BWD><<<grid, kReluSquaredThreads, 0, stream>>>(x, dy, out, a.n);
    return cudaGetLastError();
  });
}

}  // namespace

ReluSquaredPlan plan_relu_squared(int64_t n, int elem_size, bool aligned, int sm_count) {
  const int64_t vec = aligned ? 16 / elem_size : 1;
  const int64_t work = ceil_div(n, vec);  // vectors (the tail rides on block 0)
  const int64_t cap = static_cast<int64_t>(sm_count > 0 ? sm_count : 132) * kBlocksPerSm;
  int64_t grid = ceil_div(work, kReluSquaredThreads);
  if (grid < 1) grid = 1;
  if (grid > cap) grid = cap;
  return {aligned, grid};
}

cudaError_t relu_squared_fwd(const ReluSquaredArgs& a, int sm_count, cudaStream_t stream) {
  return launch<false>(a, sm_count, stream);
}

cudaError_t relu_squared_bwd(const ReluSquaredArgs& a, int sm_count, cudaStream_t stream) {
  return launch<true>(a, sm_count, stream);
}

}  // namespace liger_cpp::kernels
