// RMSNorm backward with rows cached in registers, 4 vectors a thread
// (rms_bwd_cached): the fallback for rows of 16-byte vectors where neither the
// TMA, pipelined nor cluster backward runs: rows of 1025..4096 vectors without
// sm_90 code, and the pipelined backward's rows that do not fit its shared
// memory. docs/kernels/rms_norm.md.
#include "kernels/norm/norm_plan.h"
#include "kernels/rms_norm/rms_norm_impl.h"
#include "kernels/rms_norm/rms_norm_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

// Backward, persistent, a row cached in registers: a group of TX threads
// (threadIdx.y selects the group) owns one row and keeps it in registers as
// up to MAXV aligned vectors per thread; each thread also keeps its columns'
// dW partial sums across all the rows its group visits; the groups of a block
// are then summed and each block writes one partial row.
// dy and dx may alias (in place): each element is read before it is written,
// by the same thread, so they are not __restrict__.
// Where the dW partial sums live (both deterministic):
//  * DW_SMEM = false (blocks of at most 512 threads): in registers (MAXV * VEC
//    floats per thread); the groups of a block are then summed through shared
//    memory in a fixed order.
//  * DW_SMEM = true (the 1024-thread build: 64 registers a thread cannot hold
//    them): in shared memory, one region per group, laid out [i][j][tx] so a
//    warp's updates hit distinct banks. Each thread only ever touches its own
//    columns.
// DS (FusedAddRMSNorm with a residual gradient): dx += ds_out; a template
// flag so that plain RMSNorm keeps its register budget. ds_out may alias dx
// (each element is read before it is written, by the same thread).
template <typename T, typename WT, typename OT, int VEC, int MAXV, bool DW_SMEM, bool DS>
__global__ void __launch_bounds__(DW_SMEM ? 1024 : 512, 1)
    rms_bwd_cached(const OT* dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                   const WT* __restrict__ w, const float* __restrict__ rstd, const T* ds_out,
                   int64_t ds_out_stride, T* dx, int64_t dx_stride, float* __restrict__ partial, int64_t rows,
                   int64_t cols, float offset, bool llama) {
  extern __shared__ float dw_smem[];  // [TY][MAXV][VEC][TX] when partial != nullptr
  __shared__ float scratch[kGroupScratch];
  const int tx = threadIdx.x, TX = blockDim.x;
  const int64_t nvec = cols / VEC;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  const int64_t iters = (rows + step - 1) / step;  // the same for every thread
  const int region = TX * MAXV * VEC;
  float* my_dw = dw_smem + threadIdx.y * region;

  float dw_acc[DW_SMEM ? 1 : MAXV][VEC];
  if constexpr (DW_SMEM) {
    if (partial)
      for (int c = tx; c < region; c += TX) my_dw[c] = 0.f;
  } else {
#pragma unroll
    for (int i = 0; i < MAXV; ++i)
#pragma unroll
      for (int j = 0; j < VEC; ++j) dw_acc[i][j] = 0.f;
  }

  // Per row, each vector's x, dy and w loads are followed by its part of the
  // dot product (all of the row's loads before any math, and the next row
  // prefetched into a second buffer, measured slower: docs/kernels/rms_norm.md).
  Vec<T, VEC> xv[MAXV];
  Vec<OT, VEC> gv[MAXV];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  for (int64_t it = 0; it < iters; ++it) {
    const int64_t row = it * step + first;
    const bool active = row < rows;
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int64_t v = static_cast<int64_t>(i) * TX + tx;
      if (active && v < nvec) {
        xv[i] = load_vec<T, VEC>(x + row * x_stride + v * VEC);
        gv[i] = load_vec<OT, VEC>(dy + row * dy_stride + v * VEC);
        float wf[VEC];
        load_weight<WT, VEC>(w, v * VEC, offset, wf);
#pragma unroll
        for (int j = 0; j < VEC; ++j) dot += to_float<OT>(gv[i].v[j]) * wf[j] * to_float<T>(xv[i].v[j]);
      }
    }
    dot = group_sum(dot, scratch);
    if (!active) continue;
    const float r = rstd[row];
    const float c = r * r * r * dot / static_cast<float>(cols);
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
      const int64_t v = static_cast<int64_t>(i) * TX + tx;
      if (v < nvec) {
        float wf[VEC];
        load_weight<WT, VEC>(w, v * VEC, offset, wf);
        float d[VEC];
        if constexpr (DS) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) d[j] = 0.f;
          add_ds_out<T, VEC>(d, ds_out + row * ds_out_stride + v * VEC);
        }
        Vec<T, VEC> out;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float xf = to_float<T>(xv[i].v[j]);
          const float g = to_float<OT>(gv[i].v[j]);
          float o = r * g * wf[j] - c * xf;
          if constexpr (DS) o += d[j];
          out.v[j] = from_float<T>(o);
          if constexpr (DW_SMEM) {
            if (partial) my_dw[(i * VEC + j) * TX + tx] += g * normed<T>(xf, r, llama);
          } else {
            dw_acc[i][j] += g * normed<T>(xf, r, llama);
          }
        }
        store_vec<T, VEC>(dx + row * dx_stride + v * VEC, out);
      }
    }
  }
  if (partial == nullptr) return;
  // Sum the groups of this block into region 0 in a fixed order.
  if constexpr (DW_SMEM) {
    __syncthreads();
    if (threadIdx.y == 0)
      for (int g = 1; g < static_cast<int>(blockDim.y); ++g)
        for (int k = tx; k < region; k += TX) my_dw[k] += dw_smem[g * region + k];
  } else {
    for (int g = 0; g < static_cast<int>(blockDim.y); ++g) {
      if (static_cast<int>(threadIdx.y) == g) {
#pragma unroll
        for (int i = 0; i < MAXV; ++i)
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            const int idx = (i * VEC + j) * TX + tx;
            dw_smem[idx] = (g == 0 ? 0.f : dw_smem[idx]) + dw_acc[DW_SMEM ? 0 : i][j];
          }
      }
      __syncthreads();
    }
  }
  if (threadIdx.y != 0) return;
  // Region 0 back to column order: thread tx owns columns (i*TX+tx)*VEC+j.
  float* out = partial + static_cast<int64_t>(blockIdx.x) * cols;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (v < nvec)
#pragma unroll
      for (int j = 0; j < VEC; ++j) out[v * VEC + j] = dw_smem[(i * VEC + j) * TX + tx];
  }
}

template <typename T, typename WT, typename OT>
auto cached_kernel(bool dw_in_smem, bool ds) {
  constexpr int full = 16 / sizeof(T);
  if (dw_in_smem)
    return ds ? &rms_bwd_cached<T, WT, OT, full, kMaxV, true, true>
              : &rms_bwd_cached<T, WT, OT, full, kMaxV, true, false>;
  return ds ? &rms_bwd_cached<T, WT, OT, full, kMaxV, false, true>
            : &rms_bwd_cached<T, WT, OT, full, kMaxV, false, false>;
}

}  // namespace

namespace rms_norm_impl {

const void* bwd_cached_kernel(DType x, DType w, DType y, bool dw_in_smem, bool ds) {
  return dispatch_types(x, w, y, static_cast<const void*>(nullptr), [&](auto xt, auto wt, auto yt) {
    return reinterpret_cast<const void*>(
        cached_kernel<decltype(xt), decltype(wt), decltype(yt)>(dw_in_smem, ds));
  });
}

cudaError_t launch_bwd_cached(const RmsNormBwdArgs& a, const RmsNormBwdPlan& p, float* partial,
                              cudaStream_t stream) {
  const bool llama = a.casting == RmsCasting::kLlama;
  return dispatch_types(
      a.x_dtype, a.w ? a.w_dtype : a.x_dtype, a.y_dtype, cudaErrorInvalidValue,
      [&](auto xt, auto wt, auto yt) {
        using T = decltype(xt);
        using WT = decltype(wt);
        using OT = decltype(yt);
        const dim3 block(static_cast<unsigned>(p.threads), static_cast<unsigned>(p.rows_per_block));
        cached_kernel<T, WT, OT>(
            p.dw_in_smem, a.ds_out != nullptr)<<<static_cast<unsigned>(p.grid), block, p.smem, stream>>>(
            static_cast<const OT*>(a.dy), a.dy_row_stride, static_cast<const T*>(a.x), a.x_row_stride,
            static_cast<const WT*>(a.w), a.rstd, static_cast<const T*>(a.ds_out), a.ds_out_row_stride,
            static_cast<T*>(a.dx), a.dx_row_stride, partial, a.rows, a.cols, a.offset, llama);
        return cudaGetLastError();
      });
}

}  // namespace rms_norm_impl
}  // namespace liger_cpp::kernels
