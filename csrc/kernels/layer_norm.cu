// LayerNorm forward and backward kernels (see layer_norm.h for the math).
// Same structure as the RMSNorm kernels (rms_norm.cu), whose helpers are in
// norm_common.cuh: a "cached" family that keeps each row in registers (the
// backward persistent, with dW and dB partials in fp32 registers), and a
// "generic" family for any width and alignment. dW/dB partials are finished by
// reduce_partials: deterministic, no atomics.
#include <type_traits>

#include "layer_norm.h"
#include "norm_common.cuh"

namespace liger_cpp::kernels {
namespace {

// Largest TX for the cached backward: it keeps 2 x MAXV x VEC accumulators.
constexpr int kMaxBwdTx = 256;  // also the block size (launch bound)

template <typename WT, int VEC>
__device__ __forceinline__ void load_param(const WT* p, int64_t c, float dflt, float (&out)[VEC]) {
  if (p == nullptr) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = dflt;
    return;
  }
  const Vec<WT, VEC> v = load_vec<WT, VEC>(p + c);
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = to_float<WT>(v.v[j]);
}

// ---------------------------------------------------------------------------
// Forward, row cached in registers; TY rows per block.
template <typename T, typename WT, int VEC, int MAXV>
__global__ void __launch_bounds__(1024)
    ln_fwd_cached(const T* __restrict__ x, int64_t x_stride, const WT* __restrict__ w,
                  const WT* __restrict__ b, T* __restrict__ y, float* __restrict__ mean,
                  float* __restrict__ rstd, int64_t rows, int64_t cols, float eps) {
  __shared__ float scratch[kGroupScratch];
  const int tx = threadIdx.x, TX = blockDim.x;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const int64_t nvec = cols / VEC;
  const T* xr = x + row * x_stride;
  Vec<T, VEC> xv[MAXV];
  // All loads first (volatile, so they stay ahead of the math and are in flight together).
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (active && v < nvec) load_16B_volatile(xv[i], xr + v * VEC);
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (active && v < nvec) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) s += to_float<T>(xv[i].v[j]);
    }
  }
  const float m = group_sum(s, scratch) / static_cast<float>(cols);
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (active && v < nvec) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = to_float<T>(xv[i].v[j]) - m;
        ss += d * d;
      }
    }
  }
  ss = group_sum(ss, scratch);
  if (!active) return;
  const float r = 1.f / sqrtf(ss / static_cast<float>(cols) + eps);
  if (tx == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
#pragma unroll
  for (int i = 0; i < MAXV; ++i) opaque_16B(xv[i]);
  T* yr = y + row * cols;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (v < nvec) {
      float wf[VEC], bf[VEC];
      load_param<WT, VEC>(w, v * VEC, 1.f, wf);
      load_param<WT, VEC>(b, v * VEC, 0.f, bf);
      Vec<T, VEC> out;
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        out.v[j] = from_float<T>((to_float<T>(xv[i].v[j]) - m) * r * wf[j] + bf[j]);
      store_vec<T, VEC>(yr + v * VEC, out);
    }
  }
}

// Forward for any width: one block per row; the row is stashed in shared
// memory when it fits (STASH), else read again (from L2) for each pass.
template <typename T, typename WT, int VEC, bool STASH>
__global__ void __launch_bounds__(1024)
    ln_fwd_generic(const T* __restrict__ x, int64_t x_stride, const WT* __restrict__ w,
                   const WT* __restrict__ b, T* __restrict__ y, float* __restrict__ mean,
                   float* __restrict__ rstd, int64_t cols, float eps) {
  extern __shared__ __align__(16) unsigned char stash_raw[];
  Vec<T, VEC>* stash = reinterpret_cast<Vec<T, VEC>*>(stash_raw);
  __shared__ float scratch[kGroupScratch];
  const int64_t row = blockIdx.x;
  const int64_t nvec = cols / VEC;
  const T* xr = x + row * x_stride;
  auto load = [&](int64_t v) {
    if constexpr (STASH) {
      return stash[v];
    } else {
      return load_vec<T, VEC>(xr + v * VEC);
    }
  };
  float s = 0.f;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load_vec<T, VEC>(xr + v * VEC);
    if constexpr (STASH) stash[v] = xv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) s += to_float<T>(xv.v[j]);
  }
  const float m = group_sum(s, scratch) / static_cast<float>(cols);  // barrier publishes the stash
  float ss = 0.f;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load(v);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float d = to_float<T>(xv.v[j]) - m;
      ss += d * d;
    }
  }
  ss = group_sum(ss, scratch);
  const float r = 1.f / sqrtf(ss / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
  T* yr = y + row * cols;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load(v);
    float wf[VEC], bf[VEC];
    load_param<WT, VEC>(w, v * VEC, 1.f, wf);
    load_param<WT, VEC>(b, v * VEC, 0.f, bf);
    Vec<T, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) out.v[j] = from_float<T>((to_float<T>(xv.v[j]) - m) * r * wf[j] + bf[j]);
    store_vec<T, VEC>(yr + v * VEC, out);
  }
}

// ---------------------------------------------------------------------------
// Backward, persistent, row cached in registers, dW and dB partials in fp32
// registers; the groups of a block are summed in a fixed order through shared
// memory ([cols] floats), and each block writes one partial row of each.
template <typename T, typename WT, int VEC, int MAXV>
__global__ void __launch_bounds__(kMaxBwdTx)
    ln_bwd_cached(const T* __restrict__ dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                  const WT* __restrict__ w, const float* __restrict__ mean, const float* __restrict__ rstd,
                  T* __restrict__ dx, float* __restrict__ pw, float* __restrict__ pb, int64_t rows,
                  int64_t cols) {
  extern __shared__ float red[];  // [cols] when pw or pb
  __shared__ float scratch[kGroupScratch];
  const int tx = threadIdx.x, TX = blockDim.x;
  const int64_t nvec = cols / VEC;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  const int64_t iters = (rows + step - 1) / step;
  const float inv_n = 1.f / static_cast<float>(cols);
  float dw_acc[MAXV][VEC], db_acc[MAXV][VEC];
#pragma unroll
  for (int i = 0; i < MAXV; ++i)
#pragma unroll
    for (int j = 0; j < VEC; ++j) dw_acc[i][j] = db_acc[i][j] = 0.f;

  for (int64_t it = 0; it < iters; ++it) {
    const int64_t row = it * step + static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
    const bool active = row < rows;
    const float m = active ? mean[row] : 0.f;
    const float r = active ? rstd[row] : 0.f;
    Vec<T, VEC> xv[MAXV], gv[MAXV];
    float sg = 0.f, sgx = 0.f;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int64_t v = static_cast<int64_t>(i) * TX + tx;
      if (active && v < nvec) {
        xv[i] = load_vec<T, VEC>(x + row * x_stride + v * VEC);
        gv[i] = load_vec<T, VEC>(dy + row * dy_stride + v * VEC);
        float wf[VEC];
        load_param<WT, VEC>(w, v * VEC, 1.f, wf);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float g = to_float<T>(gv[i].v[j]) * wf[j];
          sg += g;
          sgx += g * (to_float<T>(xv[i].v[j]) - m) * r;
        }
      }
    }
    sg = group_sum(sg, scratch);
    sgx = group_sum(sgx, scratch);
    if (!active) continue;
    const float a = sg * inv_n, bq = sgx * inv_n;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int64_t v = static_cast<int64_t>(i) * TX + tx;
      if (v < nvec) {
        float wf[VEC];
        load_param<WT, VEC>(w, v * VEC, 1.f, wf);
        Vec<T, VEC> out;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float xh = (to_float<T>(xv[i].v[j]) - m) * r;
          const float d = to_float<T>(gv[i].v[j]);
          out.v[j] = from_float<T>(r * (d * wf[j] - a - xh * bq));
          dw_acc[i][j] += d * xh;
          db_acc[i][j] += d;
        }
        store_vec<T, VEC>(dx + row * cols + v * VEC, out);
      }
    }
  }
  // Groups of the block in a fixed order, dW then dB through the same buffer.
  for (int pass = 0; pass < 2; ++pass) {
    float* part = pass == 0 ? pw : pb;
    if (part == nullptr) continue;  // uniform across the block
    for (int g = 0; g < static_cast<int>(blockDim.y); ++g) {
      if (static_cast<int>(threadIdx.y) == g) {
#pragma unroll
        for (int i = 0; i < MAXV; ++i) {
          const int64_t v = static_cast<int64_t>(i) * TX + tx;
          if (v < nvec)
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
              const float add = pass == 0 ? dw_acc[i][j] : db_acc[i][j];
              red[v * VEC + j] = (g == 0 ? 0.f : red[v * VEC + j]) + add;
            }
        }
      }
      __syncthreads();
    }
    float* out = part + static_cast<int64_t>(blockIdx.x) * cols;
    const int nthreads = blockDim.x * blockDim.y;
    for (int64_t c = threadIdx.y * blockDim.x + tx; c < cols; c += nthreads) out[c] = red[c];
    __syncthreads();
  }
}

// Backward dx for any width: one block per row, the row read twice.
template <typename T, typename WT, int VEC>
__global__ void __launch_bounds__(512)
    ln_bwd_dx_generic(const T* __restrict__ dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                      const WT* __restrict__ w, const float* __restrict__ mean,
                      const float* __restrict__ rstd, T* __restrict__ dx, int64_t cols) {
  __shared__ float scratch[kGroupScratch];
  const int64_t row = blockIdx.x;
  const int64_t nvec = cols / VEC;
  const T* gr = dy + row * dy_stride;
  const T* xr = x + row * x_stride;
  const float m = mean[row], r = rstd[row];
  float sg = 0.f, sgx = 0.f;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load_vec<T, VEC>(xr + v * VEC);
    const Vec<T, VEC> gv = load_vec<T, VEC>(gr + v * VEC);
    float wf[VEC];
    load_param<WT, VEC>(w, v * VEC, 1.f, wf);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float g = to_float<T>(gv.v[j]) * wf[j];
      sg += g;
      sgx += g * (to_float<T>(xv.v[j]) - m) * r;
    }
  }
  sg = group_sum(sg, scratch);
  sgx = group_sum(sgx, scratch);
  const float a = sg / static_cast<float>(cols), bq = sgx / static_cast<float>(cols);
  T* dr = dx + row * cols;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load_vec<T, VEC>(xr + v * VEC);
    const Vec<T, VEC> gv = load_vec<T, VEC>(gr + v * VEC);
    float wf[VEC];
    load_param<WT, VEC>(w, v * VEC, 1.f, wf);
    Vec<T, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float xh = (to_float<T>(xv.v[j]) - m) * r;
      out.v[j] = from_float<T>(r * (to_float<T>(gv.v[j]) * wf[j] - a - xh * bq));
    }
    store_vec<T, VEC>(dr + v * VEC, out);
  }
}

// dW / dB partials for any width: blockIdx.x tiles the columns, blockIdx.y
// takes a fixed, strided subset of the rows.
template <typename T, int VEC>
__global__ void __launch_bounds__(256)
    ln_bwd_dwdb_generic(const T* __restrict__ dy, int64_t dy_stride, const T* __restrict__ x,
                        int64_t x_stride, const float* __restrict__ mean, const float* __restrict__ rstd,
                        float* __restrict__ pw, float* __restrict__ pb, int64_t rows, int64_t cols) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= cols / VEC) return;
  float aw[VEC], ab[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) aw[j] = ab[j] = 0.f;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const Vec<T, VEC> gv = load_vec<T, VEC>(dy + row * dy_stride + v * VEC);
    if (pw) {
      const Vec<T, VEC> xv = load_vec<T, VEC>(x + row * x_stride + v * VEC);
      const float m = mean[row], r = rstd[row];
#pragma unroll
      for (int j = 0; j < VEC; ++j) aw[j] += to_float<T>(gv.v[j]) * ((to_float<T>(xv.v[j]) - m) * r);
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) ab[j] += to_float<T>(gv.v[j]);
  }
  const int64_t o = static_cast<int64_t>(blockIdx.y) * cols + v * VEC;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    if (pw) pw[o + j] = aw[j];
    if (pb) pb[o + j] = ab[j];
  }
}

// ---------------------------------------------------------------------------
// Host-side planning.

template <typename F>
cudaError_t dispatch_ln_types(DType xd, DType wd, F&& f) {
  return dispatch_dtype(xd, [&](auto xt) {
    return dispatch_dtype(wd, [&](auto wt) {
      using T = decltype(xt);
      using WT = decltype(wt);
      if constexpr (std::is_same_v<WT, T> || std::is_same_v<WT, float> || std::is_same_v<T, float>) {
        return f(T{}, WT{});
      } else {
        return cudaErrorInvalidValue;
      }
    });
  });
}

template <typename T, typename WT>
Plan plan_ln_bwd(const LayerNormBwdArgs& a, int sm_count) {
  Plan p;
  const int full = 16 / static_cast<int>(sizeof(T));
  const bool aligned =
      all_aligned(full, a.cols, {a.x_row_stride, a.dy_row_stride},
                  {{a.x, sizeof(T)}, {a.dy, sizeof(T)}, {a.dx, sizeof(T)}, {a.w, sizeof(WT)}});
  p.vec = aligned ? full : 1;
  const bool want = a.dw != nullptr || a.db != nullptr;
  const int64_t nparts = (a.dw ? 1 : 0) + (a.db ? 1 : 0);
  if (aligned && pick_cached(a.cols / p.vec, p) && p.tx <= kMaxBwdTx) {
    p.ty = std::max(1, kMaxBwdTx / p.tx);
    const size_t smem = want ? static_cast<size_t>(a.cols) * sizeof(float) : 0;
    auto* kern = &ln_bwd_cached<T, WT, 16 / sizeof(T), kMaxV>;
    if (smem > 48 * 1024)
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    const int per_sm = sm_blocks(reinterpret_cast<const void*>(kern), p.tx * p.ty, smem);
    p.grid = std::min<int64_t>(ceil_div(a.rows, p.ty), static_cast<int64_t>(sm_count) * per_sm);
    p.grid = std::max<int64_t>(p.grid, 1);
  } else {
    p.cached = false;
    const int64_t col_blocks = ceil_div(a.cols / p.vec, 256);
    p.grid = std::max<int64_t>(1, std::min<int64_t>(a.rows, ceil_div(4LL * sm_count, col_blocks)));
    p.grid = std::min<int64_t>(p.grid, 65535);
  }
  p.ws_floats = nparts * p.grid * a.cols;
  return p;
}

}  // namespace

// ---------------------------------------------------------------------------

cudaError_t layer_norm_fwd(const LayerNormFwdArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  const bool has_param = a.w != nullptr || a.b != nullptr;
  return dispatch_ln_types(a.x_dtype, has_param ? a.w_dtype : a.x_dtype, [&](auto xt, auto wt) {
    using T = decltype(xt);
    using WT = decltype(wt);
    const T* x = static_cast<const T*>(a.x);
    const WT* w = static_cast<const WT*>(a.w);
    const WT* b = static_cast<const WT*>(a.b);
    T* y = static_cast<T*>(a.y);
    constexpr int full = 16 / sizeof(T);
    const bool aligned =
        all_aligned(full, a.cols, {a.x_row_stride},
                    {{a.x, sizeof(T)}, {a.y, sizeof(T)}, {a.w, sizeof(WT)}, {a.b, sizeof(WT)}});
    Plan p;
    if (aligned && pick_cached(a.cols / full, p)) {
      const dim3 block(p.tx, p.ty);
      ln_fwd_cached<T, WT, full, kMaxV><<<ceil_div(a.rows, p.ty), block, 0, stream>>>(
          x, a.x_row_stride, w, b, y, a.mean, a.rstd, a.rows, a.cols, a.eps);
    } else {
      const int vec = aligned ? full : 1;
      const int64_t row_bytes = a.cols * static_cast<int64_t>(sizeof(T));
      const bool stash = row_bytes <= kMaxStashBytes;
      const size_t smem = stash ? static_cast<size_t>(row_bytes) : 0;
      LIGER_DISPATCH_VEC(vec, full, {
        if (stash) {
          auto* kern = &ln_fwd_generic<T, WT, VEC, true>;
          if (smem > 48 * 1024)
            cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
          kern<<<a.rows, 1024, smem, stream>>>(x, a.x_row_stride, w, b, y, a.mean, a.rstd, a.cols, a.eps);
        } else {
          ln_fwd_generic<T, WT, VEC, false>
              <<<a.rows, 1024, 0, stream>>>(x, a.x_row_stride, w, b, y, a.mean, a.rstd, a.cols, a.eps);
        }
      })
    }
    return cudaGetLastError();
  });
}

int64_t layer_norm_bwd_workspace_floats(const LayerNormBwdArgs& a, int sm_count) {
  int64_t n = 0;
  dispatch_ln_types(a.x_dtype, a.w ? a.w_dtype : a.x_dtype, [&](auto xt, auto wt) {
    n = plan_ln_bwd<decltype(xt), decltype(wt)>(a, sm_count).ws_floats;
    return cudaSuccess;
  });
  return n;
}

cudaError_t layer_norm_bwd(const LayerNormBwdArgs& a, int sm_count, cudaStream_t stream) {
  if (a.rows == 0) {
    const int64_t bytes = a.cols * dtype_size(a.w_dtype);
    if (a.dw) {
      const cudaError_t e = cudaMemsetAsync(a.dw, 0, bytes, stream);
      if (e != cudaSuccess) return e;
    }
    if (a.db) return cudaMemsetAsync(a.db, 0, bytes, stream);
    return cudaSuccess;
  }
  return dispatch_ln_types(a.x_dtype, a.w ? a.w_dtype : a.x_dtype, [&](auto xt, auto wt) {
    using T = decltype(xt);
    using WT = decltype(wt);
    const Plan p = plan_ln_bwd<T, WT>(a, sm_count);
    const T* dy = static_cast<const T*>(a.dy);
    const T* x = static_cast<const T*>(a.x);
    const WT* w = static_cast<const WT*>(a.w);
    T* dx = static_cast<T*>(a.dx);
    float* pw = a.dw ? a.workspace : nullptr;
    float* pb = a.db ? a.workspace + (a.dw ? p.grid * a.cols : 0) : nullptr;
    constexpr int full = 16 / sizeof(T);
    if (p.cached) {
      const size_t smem = (pw || pb) ? static_cast<size_t>(a.cols) * sizeof(float) : 0;
      ln_bwd_cached<T, WT, full, kMaxV><<<p.grid, dim3(p.tx, p.ty), smem, stream>>>(
          dy, a.dy_row_stride, x, a.x_row_stride, w, a.mean, a.rstd, dx, pw, pb, a.rows, a.cols);
    } else {
      LIGER_DISPATCH_VEC(p.vec, full, {
        if (pw || pb) {
          const dim3 grid(static_cast<unsigned>(ceil_div(a.cols / VEC, 256)), static_cast<unsigned>(p.grid));
          ln_bwd_dwdb_generic<T, VEC><<<grid, 256, 0, stream>>>(dy, a.dy_row_stride, x, a.x_row_stride,
                                                                a.mean, a.rstd, pw, pb, a.rows, a.cols);
        }
        ln_bwd_dx_generic<T, WT, VEC><<<a.rows, 512, 0, stream>>>(dy, a.dy_row_stride, x, a.x_row_stride, w,
                                                                  a.mean, a.rstd, dx, a.cols);
      })
    }
    const dim3 rgrid(static_cast<unsigned>(ceil_div(a.cols, 32)));
    if (pw)
      reduce_partials<WT><<<rgrid, dim3(32, 16), 0, stream>>>(pw, p.grid, a.cols, static_cast<WT*>(a.dw));
    if (pb)
      reduce_partials<WT><<<rgrid, dim3(32, 16), 0, stream>>>(pb, p.grid, a.cols, static_cast<WT*>(a.db));
    return cudaGetLastError();
  });
}

}  // namespace liger_cpp::kernels
