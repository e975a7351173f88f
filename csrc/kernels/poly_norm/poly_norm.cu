// PolyNorm: the plan and the kernels (row-wise, memory bound). Each ty lane of a block takes one row
// at a time, its tx threads across the row; the row's three (forward) or four (backward) sums go
// through one fixed-order block reduction per row, so a row is read once when it fits in registers
// (nv vectors a thread) and twice otherwise (the second read from L2). The backward's dw / db are
// float32 per-lane partial sums reduced in a fixed order afterwards (poly_norm_reduce).
#include <type_traits>

#include "kernels/common/float_rows.cuh"
#include "kernels/poly_norm/poly_norm.h"

namespace liger_cpp::kernels {
namespace {

// The backward's blocks stride over the rows, two an SM (one wave, resident together: the launch
// bound keeps their registers within two 256-thread blocks), so that its partial sums stay few; the
// forward's take one row a lane each (many short blocks: no partly filled last wave).
constexpr int kBwdBlocksPerSm = 2;
constexpr int kMaxLanes = kPolyNormThreads / 32;
constexpr int64_t kMaxGridX = 0x7fffffff;

// v[i] summed over the tx threads of this ty lane, in a fixed order (warps by shuffles, then the
// warps' sums in warp order); every thread of the block calls it (it synchronises) and gets the sums.
// scratch: kMaxLanes * N * 8 floats.
template <int N>
__device__ __forceinline__ void lane_sums(float (&v)[N], float* scratch) {
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = warp_sum(v[i]);
  if (blockDim.x == 32) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  float* mine = scratch + threadIdx.y * N * 8;
  __syncthreads();  // the previous row's readers are done with scratch
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) mine[i * 8 + warp] = v[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float s = 0.f;
    for (int w = 0; w < nw; ++w) s += mine[i * 8 + w];
    v[i] = s;
  }
}

// NV > 0: a thread's vectors k * tx + threadIdx.x (k < NV) stay in registers between the sums and
// the outputs; NV == 0: any length, the row read again for the outputs.
template <typename T, typename WT, int VEC, int NV>
__global__ void __launch_bounds__(kPolyNormThreads)
    poly_norm_fwd_kernel(const T* __restrict__ x, const WT* __restrict__ w, const WT* __restrict__ b,
                         float* __restrict__ rstd, T* __restrict__ y, int64_t rows, int64_t cols, float eps) {
  __shared__ float scratch[kMaxLanes * 3 * 8];
  constexpr int kHold = NV > 0 ? NV : 1;
  const float w0 = to_float<WT>(w[0]), w1 = to_float<WT>(w[1]), w2 = to_float<WT>(w[2]);
  const float bias = to_float<WT>(b[0]);
  const int64_t nvec = cols / VEC, tx = blockDim.x, ty = blockDim.y;
  const float inv_n = 1.f / static_cast<float>(cols);
  for (int64_t rb = blockIdx.x; rb * ty < rows; rb += gridDim.x) {
    const int64_t row = rb * ty + threadIdx.y;
    const bool ok = row < rows;
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    float s[3] = {0.f, 0.f, 0.f};
    float xv[kHold][VEC];
    auto add = [&](const float(&f)[VEC]) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float x2 = f[j] * f[j], x4 = x2 * x2;
        s[0] += x2;
        s[1] += x4;
        s[2] += x4 * x2;
      }
    };
    if (ok) {
      if constexpr (NV > 0) {
#pragma unroll
        for (int k = 0; k < NV; ++k) {
          const int64_t v = k * tx + threadIdx.x;
          if (v < nvec) load_floats<T, VEC>(xr + v * VEC, xv[k]);
        }
#pragma unroll
        for (int k = 0; k < NV; ++k)
          if (k * tx + threadIdx.x < nvec) add(xv[k]);
      } else {
        for (int64_t v = threadIdx.x; v < nvec; v += tx) {
          load_floats<T, VEC>(xr + v * VEC, xv[0]);
          add(xv[0]);
        }
      }
    }
    lane_sums<3>(s, scratch);
    if (!ok) continue;
    const float r1 = rsqrtf(s[0] * inv_n + eps), r2 = rsqrtf(s[1] * inv_n + eps),
                r3 = rsqrtf(s[2] * inv_n + eps);
    if (threadIdx.x == 0) {
      rstd[row * 3] = r3;
      rstd[row * 3 + 1] = r2;
      rstd[row * 3 + 2] = r1;
    }
    const float k3 = w0 * r3, k2 = w1 * r2, k1 = w2 * r1;
    auto out = [&](int64_t v, const float(&f)[VEC]) {
      float o[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) o[j] = ((k3 * f[j] + k2) * f[j] + k1) * f[j] + bias;
      store_floats<T, VEC>(yr + v * VEC, o);
    };
    if constexpr (NV > 0) {
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        const int64_t v = k * tx + threadIdx.x;
        if (v < nvec) out(v, xv[k]);
      }
    } else {
      for (int64_t v = threadIdx.x; v < nvec; v += tx) {
        load_floats<T, VEC>(xr + v * VEC, xv[0]);
        out(v, xv[0]);
      }
    }
  }
}

// part: [blocks * ty][4] float32 partial sums (dw[0..2], db), one per ty lane, written by its
// threadIdx.x == 0 thread.
template <typename T, typename WT, int VEC, int NV>
__global__ void __launch_bounds__(kPolyNormThreads, kBwdBlocksPerSm)
    poly_norm_bwd_kernel(const T* __restrict__ x, const T* __restrict__ dy, const WT* __restrict__ w,
                         const float* __restrict__ rstd, T* __restrict__ dx, float* __restrict__ part,
                         int64_t rows, int64_t cols) {
  __shared__ float scratch[kMaxLanes * 4 * 8];
  constexpr int kHold = NV > 0 ? NV : 1;
  const float w0 = to_float<WT>(w[0]), w1 = to_float<WT>(w[1]), w2 = to_float<WT>(w[2]);
  const int64_t nvec = cols / VEC, tx = blockDim.x, ty = blockDim.y;
  const float inv_n = 1.f / static_cast<float>(cols);
  float pw0 = 0.f, pw1 = 0.f, pw2 = 0.f, pb = 0.f;
  for (int64_t rb = blockIdx.x; rb * ty < rows; rb += gridDim.x) {
    const int64_t row = rb * ty + threadIdx.y;
    const bool ok = row < rows;
    const T* xr = x + row * cols;
    const T* gr = dy + row * cols;
    T* dr = dx + row * cols;
    float s[4] = {0.f, 0.f, 0.f, 0.f};  // sum g x, g x^2, g x^3, g
    float xv[kHold][VEC], gv[kHold][VEC];
    auto add = [&](const float(&f)[VEC], const float(&g)[VEC]) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float gx = g[j] * f[j], gx2 = gx * f[j];
        s[0] += gx;
        s[1] += gx2;
        s[2] += gx2 * f[j];
        s[3] += g[j];
      }
    };
    if (ok) {
      if constexpr (NV > 0) {
#pragma unroll
        for (int k = 0; k < NV; ++k) {
          const int64_t v = k * tx + threadIdx.x;
          if (v < nvec) {
            load_floats<T, VEC>(xr + v * VEC, xv[k]);
            load_floats<T, VEC>(gr + v * VEC, gv[k]);
          }
        }
#pragma unroll
        for (int k = 0; k < NV; ++k)
          if (k * tx + threadIdx.x < nvec) add(xv[k], gv[k]);
      } else {
        for (int64_t v = threadIdx.x; v < nvec; v += tx) {
          load_floats<T, VEC>(xr + v * VEC, xv[0]);
          load_floats<T, VEC>(gr + v * VEC, gv[0]);
          add(xv[0], gv[0]);
        }
      }
    }
    lane_sums<4>(s, scratch);
    if (!ok) continue;
    const float r3 = rstd[row * 3], r2 = rstd[row * 3 + 1], r1 = rstd[row * 3 + 2];
    if (threadIdx.x == 0) {
      pw0 += r3 * s[2];
      pw1 += r2 * s[1];
      pw2 += r1 * s[0];
      pb += s[3];
    }
    // dx = 3 x^2 (w0 r3 g - c3 x^3) + 2 x (w1 r2 g - c2 x^2) + (w2 r1 g - c1 x)
    const float a3 = w0 * r3, a2 = w1 * r2, a1 = w2 * r1;
    const float c3 = a3 * r3 * r3 * s[2] * inv_n, c2 = a2 * r2 * r2 * s[1] * inv_n,
                c1 = a1 * r1 * r1 * s[0] * inv_n;
    auto out = [&](int64_t v, const float(&f)[VEC], const float(&g)[VEC]) {
      float o[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float xx = f[j], x2 = xx * xx;
        o[j] =
            3.f * x2 * (a3 * g[j] - c3 * x2 * xx) + 2.f * xx * (a2 * g[j] - c2 * x2) + (a1 * g[j] - c1 * xx);
      }
      store_floats<T, VEC>(dr + v * VEC, o);
    };
    if constexpr (NV > 0) {
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        const int64_t v = k * tx + threadIdx.x;
        if (v < nvec) out(v, xv[k], gv[k]);
      }
    } else {
      for (int64_t v = threadIdx.x; v < nvec; v += tx) {
        load_floats<T, VEC>(xr + v * VEC, xv[0]);
        load_floats<T, VEC>(gr + v * VEC, gv[0]);
        out(v, xv[0], gv[0]);
      }
    }
  }
  if (threadIdx.x == 0) {
    float* p = part + (static_cast<int64_t>(blockIdx.x) * ty + threadIdx.y) * 4;
    p[0] = pw0;
    p[1] = pw1;
    p[2] = pw2;
    p[3] = pb;
  }
}

// dst[0..n) = sum over groups of part[g * 4 + first + i] in group order (n <= 3, one thread each).
template <typename WT>
__global__ void poly_norm_reduce(const float* __restrict__ part, int64_t groups, WT* __restrict__ dw,
                                 WT* __restrict__ db) {
  __shared__ float s[4][33];
  const int i = threadIdx.y;  // 0..3: dw[0], dw[1], dw[2], db
  float acc = 0.f;
  for (int64_t g = threadIdx.x; g < groups; g += 32) acc += part[g * 4 + i];
  s[i][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int k = 0; k < 32; ++k) t += s[i][k];
    if (i < 3)
      dw[i] = from_float<WT>(t);
    else
      db[0] = from_float<WT>(t);
  }
}

// Calls f(std::integral_constant<int, NV>) for the plan's nv.
template <typename F>
cudaError_t dispatch_nv(int nv, F&& f) {
  switch (nv) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    default:
      return f(std::integral_constant<int, 0>{});
  }
}

}  // namespace

PolyNormPlan plan_poly_norm(int64_t rows, int64_t cols, int elem_size, bool aligned, int sm_count,
                            bool backward) {
  PolyNormPlan p{};
  const int64_t vw = 16 / elem_size;
  p.vec = aligned && cols % vw == 0;
  const int64_t nvec = ceil_div(cols, p.vec ? vw : 1);
  // Up to 4 vectors a thread (their loads in flight together), the rest of the block's 256 threads
  // on more rows at once: fewer threads a row, fewer barriers a row.
  int tx = 32;
  while (tx < kPolyNormThreads && tx * 4 < nvec) tx *= 2;
  p.tx = tx;
  p.ty = kPolyNormThreads / tx;
  const int64_t per = ceil_div(nvec, tx);
  p.nv = per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : 0;
  const int64_t sms = sm_count > 0 ? sm_count : 132;
  int64_t blocks = ceil_div(rows, p.ty);
  if (backward && blocks > sms * kBwdBlocksPerSm) blocks = sms * kBwdBlocksPerSm;
  if (blocks > kMaxGridX) blocks = kMaxGridX;  // the blocks stride over the rest
  p.blocks = blocks < 1 ? 1 : blocks;
  p.partials = p.blocks * p.ty;
  p.workspace_floats = backward ? p.partials * 4 : 0;
  return p;
}

cudaError_t poly_norm_fwd(const PolyNormArgs& a, const PolyNormPlan& p, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return cudaSuccess;
  return dispatch_x_and_param_dtypes(a.dtype, a.wdtype, [&](auto tv, auto wv) -> cudaError_t {
    using T = decltype(tv);
    using WT = decltype(wv);
    return dispatch_nv(p.nv, [&](auto nvc) -> cudaError_t {
      constexpr int NV = decltype(nvc)::value;
      constexpr int kVec = 16 / sizeof(T);
      const dim3 grid(static_cast<unsigned>(p.blocks)), block(p.tx, p.ty);
      const T* x = static_cast<const T*>(a.x);
      const WT *w = static_cast<const WT*>(a.w), *b = static_cast<const WT*>(a.b);
      T* y = static_cast<T*>(a.out);
      if (p.vec)
        poly_norm_fwd_kernel<T, WT, kVec, NV>
            <<<grid, block, 0, stream>>>(x, w, b, a.rstd, y, a.rows, a.cols, a.eps);
      else
        poly_norm_fwd_kernel<T, WT, 1, NV>
            <<<grid, block, 0, stream>>>(x, w, b, a.rstd, y, a.rows, a.cols, a.eps);
      return cudaGetLastError();
    });
  });
}

cudaError_t poly_norm_bwd(const PolyNormArgs& a, const PolyNormPlan& p, cudaStream_t stream) {
  return dispatch_x_and_param_dtypes(a.dtype, a.wdtype, [&](auto tv, auto wv) -> cudaError_t {
    using T = decltype(tv);
    using WT = decltype(wv);
    if (a.rows == 0 || a.cols == 0) {  // empty sums: zero gradients (all-zero bits in every dtype)
      cudaError_t e = cudaMemsetAsync(a.dw, 0, 3 * sizeof(WT), stream);
      return e == cudaSuccess ? cudaMemsetAsync(a.db, 0, sizeof(WT), stream) : e;
    }
    cudaError_t e = dispatch_nv(p.nv, [&](auto nvc) -> cudaError_t {
      constexpr int NV = decltype(nvc)::value;
      constexpr int kVec = 16 / sizeof(T);
      const dim3 grid(static_cast<unsigned>(p.blocks)), block(p.tx, p.ty);
      const T *x = static_cast<const T*>(a.x), *dy = static_cast<const T*>(a.dy);
      const WT* w = static_cast<const WT*>(a.w);
      T* dx = static_cast<T*>(a.out);
      if (p.vec)
        poly_norm_bwd_kernel<T, WT, kVec, NV>
            <<<grid, block, 0, stream>>>(x, dy, w, a.rstd, dx, a.workspace, a.rows, a.cols);
      else
        poly_norm_bwd_kernel<T, WT, 1, NV>
            <<<grid, block, 0, stream>>>(x, dy, w, a.rstd, dx, a.workspace, a.rows, a.cols);
      return cudaGetLastError();
    });
    if (e != cudaSuccess) return e;
    poly_norm_reduce<WT><<<1, dim3(32, 4), 0, stream>>>(a.workspace, p.partials, static_cast<WT*>(a.dw),
                                                        static_cast<WT*>(a.db));
    return cudaGetLastError();
  });
}

}  // namespace liger_cpp::kernels
