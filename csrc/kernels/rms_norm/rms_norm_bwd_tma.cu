// RMSNorm backward through TMA row stages on sm_90 (rms_bwd_tma): the default
// backward of plain RMSNorm for rows of 129..1024 16-byte vectors (bf16 hidden
// 1032..8192). Its own .cu file (CUDA module): the common widths' backward
// loads nothing else. docs/kernels/rms_norm.md.
#include "kernels/common/cluster.cuh"
#include "kernels/norm/norm_plan.h"
#include "kernels/rms_norm/rms_norm_impl.h"
#include "kernels/rms_norm/rms_norm_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

// TMA row pipeline (sm_90): rms_bwd_tma, for rows of kTmaMinVec..1024 16-byte
// vectors (bf16 hidden 512-8192). The rows come into shared memory by TMA
// bulk copies (cp.async.bulk, completing on an mbarrier), so bytes in flight
// cost no registers. (The same pipeline for the forward lost to the
// register-cached forward and was removed: with a few rows in flight per SM
// each row's reduction stays exposed; docs/kernels/rms_norm.md.)
//
// Persistent grid, one row at a time per block of blockDim.x threads (nvec
// rounded up to a warp), one 16-byte vector a thread: block b takes rows b,
// b + gridDim.x, ... Each thread owns VEC fixed columns, so its weights are
// loaded once (and, in the backward, its dW partial sums stay in fp32
// registers). `stages` rows (kTmaMaxStages at most) sit in dynamic shared
// memory, one mbarrier each; the block's k-th row goes to stage k % stages,
// and the n-th use of a stage waits for mbarrier phase parity n & 1. Before
// the loop warp 0 puts the first `stages` rows in flight. Per row:
//   1. wait for the stage's mbarrier; each thread copies its vector(s) from
//      the stage into registers and forms its part of the row sum;
//   2. warp sums (shuffles) into part[k & 1][warp], ONE __syncthreads, then
//      every warp adds the per-warp partials in one fixed order (lane l takes
//      partial l, then an xor butterfly: bitwise the same in every lane), so
//      the result is deterministic;
//   3. past that barrier every thread has read the stage, so warp 0 refills
//      it with the row `stages` ahead;
//   4. the outputs from the registers, with packed 16-byte stores.
// part is double-buffered by row parity: a thread writes part[k & 1] for row
// k only after row k - 1's barrier, which every thread reaches only after
// reading row k - 2's partials (the same buffer).
// Per element the formulas are rms_fwd_cached's and rms_bwd_pipe's, in the
// same order; the row sums add the same terms in another (fixed) order.
using rms_norm_impl::kTmaMaxStages;
using rms_norm_impl::tma_row_region;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr int kTmaChunkBytes = 4096;  // one bulk copy per chunk, issued by the lanes of warp 0

// Called by all of warp 0: copies `bytes` (a multiple of 16) from src into
// the stage at dst, in kTmaChunkBytes pieces spread over the lanes, each
// completing its bytes of *bar's transaction count. The caller arms *bar.
__device__ __forceinline__ void tma_copy_row(unsigned char* dst, const void* src, uint32_t bytes,
                                             unsigned long long* bar, int lane) {
  const unsigned char* s = static_cast<const unsigned char*>(src);
  for (uint32_t c = static_cast<uint32_t>(lane) * kTmaChunkBytes; c < bytes; c += 32u * kTmaChunkBytes)
    bulk_copy_g2s(dst + c, s + c, bytes - c < kTmaChunkBytes ? bytes - c : kTmaChunkBytes, bar);
}

// Before the first row: thread 0 initialises the stages' mbarriers (made
// visible to the TMA engine by the fences, and to the other threads by the
// caller's __syncthreads).
__device__ __forceinline__ void tma_init_bars(unsigned long long* bars, int stages) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(&bars[s]);
    fence_mbar_init();
    fence_proxy_async_smem();
  }
}

// Called by all of warp 0 before it refills a stage that the block's threads
// have read (ordered before this by a __syncthreads): a proxy fence between
// those generic-proxy reads and the async-proxy writes of the bulk copies,
// as the PTX proxy model asks for. In practice no read can still be pending:
// every value read from the stage is used in the row sum before the barrier
// (CUTLASS's TMA pipelines release a stage without this fence). Its cost is
// one MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S per row, in warp 0 only.
__device__ __forceinline__ void tma_fence_reads() { fence_proxy_async_smem(); }

// The row sums of the block (R rows), from each warp's sums v: ONE
// __syncthreads, then every warp adds the partials in the same fixed order.
// part[pb] must not be read by any thread any more (see the comment above).
// The barrier is also the caller's "every thread has read the stage".
template <int R>
__device__ __forceinline__ void tma_block_sum(float (&v)[R], float (*part)[R][32], int pb) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < R; ++i) v[i] = warp_sum(v[i]);
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < R; ++i) part[pb][i][warp] = v[i];
  __syncthreads();
#pragma unroll
  for (int i = 0; i < R; ++i)
    v[i] = warp_sum(lane < static_cast<int>(blockDim.x >> 5) ? part[pb][i][lane] : 0.f);
}
#endif

// Backward, x and dy rows of each stage in one mbarrier phase (dy's region
// after x's). dx = r * dy * (w + offset) - r^3 * x * dot / cols and the dW
// partials dy * normed(x, r) as rms_bwd_pipe; each block writes its partial
// row (partial[blockIdx.x][:]) at the end, finished by reduce_partials. rstd
// is loaded one row ahead into a register, as rms_bwd_pipe: its latency is
// not on the row's critical path. dy and dx may alias (in place): the rows
// fetched ahead are never the row being written, and each row belongs to
// one block.
// __launch_bounds__(1024, 1): 64 registers (VEC fp32 dW sums, the weights,
// x and dy a thread).
//
// Instructions a row are what limits it (ncu: issue-bound), so the thread's
// weights (+ offset) are converted once into shared memory as floats (w_smem,
// after the stages; each row re-converted them twice), x and dy are widened
// with unpack_floats, and cols' reciprocal is taken once (a full IEEE division
// a row before; exact for power-of-two widths, else within an ulp of c).
// R = 2 (the plan's build for rows of 513..768 threads where two rows a stage
// fit, MAXT = 768): a stage holds two consecutive rows (one mbarrier phase),
// and the block takes row pairs b, b + gridDim.x, ...: one barrier for two
// rows' sums and twice the independent work between barriers. Those rows
// (bf16 hidden 4104..6144) run one block a SM: 20 / 24 warps, each row's
// reduction exposed (two-blocks-a-SM builds spilled). At one block a SM, 768
// threads may take 80 registers (ptxas: 65536 / 768, rounded down to its
// allocation granularity). Measurements: docs/kernels/rms_norm.md.
template <typename T, typename WT, typename OT, int VEC, int MAXT = 1024, int R = 1>
__global__ void __launch_bounds__(MAXT, 1)
    rms_bwd_tma(const OT* dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                const WT* __restrict__ w, const float* __restrict__ rstd, T* dx, int64_t dx_stride,
                float* __restrict__ partial, int64_t rows, int64_t cols, float offset, bool llama,
                int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using XV = Vec<T, VEC>;
  using GV = Vec<OT, VEC>;
  static_assert(sizeof(XV) == 16 && sizeof(GV) % 16 == 0, "whole 16-byte vectors only");
  static_assert(R == 1 || R == 2, "one or two rows a stage");
  constexpr int CG = sizeof(GV) / 16;
  extern __shared__ __align__(128) unsigned char tma_rows[];  // [stages][R][x region, dy region]
  __shared__ alignas(8) unsigned long long bars[kTmaMaxStages];
  __shared__ float part[2][R][32];
  const int tx = threadIdx.x, lane = tx & 31, warp = tx >> 5;
  const bool has = tx < cols / VEC;
  const int64_t col = static_cast<int64_t>(tx) * VEC;
  const uint32_t x_bytes = static_cast<uint32_t>(cols * sizeof(T));
  const uint32_t g_bytes = static_cast<uint32_t>(cols * sizeof(OT));
  const uint32_t x_region = tma_row_region(x_bytes);
  const uint32_t row_region = x_region + tma_row_region(g_bytes);
  const uint32_t region = row_region * R;
  const int64_t groups = (rows + R - 1) / R;  // row groups (pairs when R = 2)
  const int64_t first = blockIdx.x, step = gridDim.x;
  tma_init_bars(bars, stages);
  __syncthreads();  // the mbarriers are initialised before any thread waits on them
  // Launched with PDL (launch_pdl): nothing global is read before the previous
  // kernel's writes are visible. The dW reduction, launched next, may then
  // start its blocks as this persistent grid's blocks exit.
  pdl_wait();
  pdl_trigger();
  // The rows of group g: R, fewer for a short last group.
  auto group_rows = [&](int64_t g) {
    return R == 1 ? 1 : static_cast<int>(rows - g * R < R ? rows - g * R : R);
  };
  auto fetch = [&](int64_t g, int s) {  // all of warp 0: group g's rows into stage s
    const int n = group_rows(g);
    if (lane == 0) mbar_expect_tx(&bars[s], n * (x_bytes + g_bytes));
    for (int i = 0; i < n; ++i) {
      unsigned char* dst = tma_rows + s * region + i * row_region;
      tma_copy_row(dst, x + (g * R + i) * x_stride, x_bytes, &bars[s], lane);
      tma_copy_row(dst + x_region, dy + (g * R + i) * dy_stride, g_bytes, &bars[s], lane);
    }
  };
  if (warp == 0)
    for (int s = 0; s < stages && first + s * step < groups; ++s) fetch(first + s * step, s);

  // [VEC / 4][blockDim.x] float4s; each thread reads back only what it wrote.
  float4* const w_smem = reinterpret_cast<float4*>(tma_rows + static_cast<size_t>(stages) * region) + tx;
  if (w != nullptr && has) store_weight_floats<WT, VEC>(w_smem, blockDim.x, w + col, offset);
  auto weights = [&](float(&wf)[VEC]) { load_weight_floats<VEC>(w_smem, blockDim.x, w != nullptr, wf); };
  const float inv_cols = 1.f / static_cast<float>(cols);
  float dw_acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) dw_acc[j] = 0.f;
  // first < groups: the grid has at most `groups` blocks
  float r_next[R];
#pragma unroll
  for (int i = 0; i < R; ++i) r_next[i] = R == 1 || first * R + i < rows ? rstd[first * R + i] : 0.f;
  int s = 0, pb = 0;
  uint32_t phase = 0;
  for (int64_t g = first; g < groups; g += step) {
    float r[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      r[i] = r_next[i];
      const int64_t nr = (g + step) * R + i;
      r_next[i] = nr < rows ? rstd[nr] : 0.f;
    }
    const int n = group_rows(g);  // row g * R + i exists for i < n
    mbar_wait(&bars[s], phase);
    XV xv[R];
    GV gv[R];
    float dot[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      dot[i] = 0.f;
      if (has && i < n) {
        const unsigned char* st = tma_rows + s * region + i * row_region;
        xv[i] = reinterpret_cast<const XV*>(st)[tx];
#pragma unroll
        for (int c = 0; c < CG; ++c)
          reinterpret_cast<uint4*>(&gv[i])[c] = reinterpret_cast<const uint4*>(st + x_region)[tx * CG + c];
        float xf[VEC], gf[VEC], wf[VEC];
        unpack_floats<T, VEC>(xv[i], xf);
        unpack_floats<OT, VEC>(gv[i], gf);
        weights(wf);
#pragma unroll
        for (int j = 0; j < VEC; ++j) dot[i] += gf[j] * wf[j] * xf[j];
      }
      // Keep x and dy packed through the barrier (the converted floats spilled
      // in rms_bwd_pipe).
      opaque_words(xv[i]);
      opaque_words(gv[i]);
    }
    tma_block_sum<R>(dot, part, pb);
    const int64_t ahead = g + stages * step;
    if (warp == 0 && ahead < groups) {
      tma_fence_reads();
      fetch(ahead, s);
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (!has || i >= n) continue;
      float o[VEC];
      const float c = r[i] * r[i] * r[i] * dot[i] * inv_cols;
      float xf[VEC], gf[VEC], wf[VEC];
      unpack_floats<T, VEC>(xv[i], xf);
      unpack_floats<OT, VEC>(gv[i], gf);
      weights(wf);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        o[j] = r[i] * gf[j] * wf[j] - c * xf[j];
        dw_acc[j] += gf[j] * normed<T>(xf[j], r[i], llama);
      }
      store_16B_words(dx + (g * R + i) * dx_stride + col, pack_vec<T, VEC>(o));
    }
    pb ^= 1;
    if (++s == stages) {
      s = 0;
      phase ^= 1;
    }
  }
  if (partial != nullptr && has) {
    Vec<float, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) out.v[j] = dw_acc[j];
    store_vec<float, VEC>(partial + static_cast<int64_t>(blockIdx.x) * cols + col, out);
  }
#else
  __trap();  // the host launches this kernel only where its sm_90 code runs
#endif
}

template <typename T, typename WT, typename OT>
auto tma_kernel(int rows_a_stage) {
  constexpr int full = 16 / sizeof(T);
  return rows_a_stage == 2 ? &rms_bwd_tma<T, WT, OT, full, 768, 2> : &rms_bwd_tma<T, WT, OT, full>;
}

}  // namespace

namespace rms_norm_impl {

const void* bwd_tma_kernel(DType x, DType w, DType y, int rows_a_stage) {
  return dispatch_types(x, w, y, static_cast<const void*>(nullptr), [&](auto xt, auto wt, auto yt) {
    return reinterpret_cast<const void*>(tma_kernel<decltype(xt), decltype(wt), decltype(yt)>(rows_a_stage));
  });
}

cudaError_t launch_bwd_tma(const RmsNormBwdArgs& a, const RmsNormBwdPlan& p, float* partial,
                           cudaStream_t stream) {
  const bool llama = a.casting == RmsCasting::kLlama;
  return dispatch_types(a.x_dtype, a.w ? a.w_dtype : a.x_dtype, a.y_dtype, cudaErrorInvalidValue,
                        [&](auto xt, auto wt, auto yt) {
                          using T = decltype(xt);
                          using WT = decltype(wt);
                          using OT = decltype(yt);
                          return launch_pdl(
                              tma_kernel<T, WT, OT>(p.rows_a_stage), dim3(static_cast<unsigned>(p.grid)),
                              dim3(static_cast<unsigned>(p.threads)), p.smem, stream,
                              static_cast<const OT*>(a.dy), a.dy_row_stride, static_cast<const T*>(a.x),
                              a.x_row_stride, static_cast<const WT*>(a.w), a.rstd, static_cast<T*>(a.dx),
                              a.dx_row_stride, partial, a.rows, a.cols, a.offset, llama, p.stages);
                        });
}

}  // namespace rms_norm_impl
}  // namespace liger_cpp::kernels
