// LayerNorm backward through TMA row stages on sm_90 (ln_bwd_tma): the default
// backward for rows of up to 512 16-byte vectors (bf16 hidden <= 4096). Its own
// .cu file (CUDA module): the common widths' backward loads nothing else.
// docs/kernels/layer_norm.md.
#include "kernels/common/cluster.cuh"
#include "kernels/common/launch_cache.h"
#include "kernels/layer_norm/layer_norm_impl.h"
#include "kernels/layer_norm/layer_norm_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

// A 32-bit word of WT ones (two for 16-bit types): word_elem reads 1.0f from each.
template <typename WT>
__host__ __device__ constexpr uint32_t ones_word() {
  if constexpr (std::is_same_v<WT, float>) {
    return 0x3f800000u;
  } else if constexpr (std::is_same_v<WT, __nv_bfloat16>) {
    return 0x3f803f80u;
  } else {
    return 0x3c003c00u;
  }
}

// The TMA pipeline of ln_bwd_tma (sm_90).
using layer_norm_impl::kTmaBlock;   // threads at most (rows of at most 512 16-byte vectors)
using layer_norm_impl::kTmaStages;  // rows in flight per block
// Unused in the sm_80 pass (its kernels are stubs): maybe_unused keeps that pass quiet.
[[maybe_unused]] constexpr int kTmaChunk = 4096;  // bytes per bulk copy (one a lane of warp 0)

// Backward with rows brought into shared memory by the TMA engine (sm_90).
// ln_bwd_pipe16's math, vector ownership and partials,
// but each row's x and dy arrive by cp.async.bulk (a few instructions per
// block, issued by warp 0) into one of STAGES shared-memory stages completing
// on that stage's mbarrier, instead of by four cp.async per thread. The bytes
// in flight then cost neither registers nor per-thread instructions, so the
// kernel needs fewer registers and MINB blocks of up to kTmaBlock threads
// share an SM with STAGES rows each: a block has STAGES rows in flight while
// it works on one. One block per row (blockDim.x = TX, TY = 1); the block's
// k-th row, blockIdx.x + k * gridDim.x, lives in stage k % STAGES, whose
// mbarrier completes its (k / STAGES)-th phase for it. After the row's one
// barrier (the two sums) every thread has read the stage, so warp 0 refills
// it with row k + STAGES. mean and rstd come in chunks of TX rows (one float
// pair a thread, plain loads, once per TX rows) into shared memory.
//
// Instructions a row pace this kernel (as rms_bwd_tma's), so a row costs as
// few as the math allows (docs/kernels/layer_norm.md):
//  * one predicated bulk copy a lane (lanes 0-15 x's 4 KiB chunks, 16-31
//    dy's); a chunk loop with a c / nch division and an operand select cost
//    warp 0 ~150 instructions a row;
//  * the second sum is sum(g * (x - m)), scaled by r once a row instead of
//    once an element; dx = r*g*w - (r*bq)*xh - r*a as two fmas after g*w
//    (r*(g*w - a - xh*bq) up to rounding, no cancellation added: xh is still
//    formed as (x - m) * r);
//  * the cross-warp step reads partial (lane % warps) and butterflies over
//    log2(warps) lanes only: bitwise the sums a 5-step butterfly over zeros
//    gives;
//  * an absent weight is stored as ones, so weights() has no branch (VEC
//    ones were re-materialised twice a row).
template <typename T, typename WT, int STAGES, int MINB>
__global__ void __launch_bounds__(kTmaBlock, MINB)
    ln_bwd_tma(const T* __restrict__ dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
               const WT* __restrict__ w, const float* __restrict__ mean, const float* __restrict__ rstd,
               T* __restrict__ dx, float* __restrict__ pw, float* __restrict__ pb, int64_t rows,
               int64_t cols) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int VEC = 16 / static_cast<int>(sizeof(T));
  constexpr int WW = VEC * static_cast<int>(sizeof(WT)) / 4;  // 32-bit words of VEC weights
  constexpr bool WS = sizeof(WT) > sizeof(T);                 // weights in shared memory (see pipe16)
  // [STAGES][2 (x, dy)][rb bytes] rows, then [TX][2 (mean, rstd)] floats, then
  // (WS) [2][TX] 16-byte weight slots.
  extern __shared__ __align__(128) unsigned char tma_smem[];
  __shared__ alignas(8) unsigned long long bars[STAGES];
  __shared__ float2 scratch[2][32];
  const int tx = threadIdx.x, TX = blockDim.x, lane = tx & 31, warp = tx >> 5;
  const int64_t nvec = cols / VEC;
  const bool has = tx < nvec;
  const uint32_t rb = static_cast<uint32_t>(cols * static_cast<int64_t>(sizeof(T)));  // <= 8 KiB
  const int64_t grid = gridDim.x;
  const int64_t nk = rows > blockIdx.x ? (rows - 1 - blockIdx.x) / grid + 1 : 0;  // this block's rows
  const float inv_n = 1.f / static_cast<float>(cols);
  const int c0 = tx * VEC;
  float* const mr = reinterpret_cast<float*>(tma_smem + static_cast<size_t>(STAGES) * 2 * rb);
  uint4* const w_smem = reinterpret_cast<uint4*>(mr + 2 * TX) + tx;

  // Warp 0 puts the block's k-th row (x then dy) in flight into stage k % STAGES.
  auto issue = [&](int64_t k) {
    if (k >= nk) return;
    const int st = static_cast<int>(k % STAGES);
    const int64_t row = blockIdx.x + k * grid;
    const unsigned char* const src[2] = {reinterpret_cast<const unsigned char*>(x + row * x_stride),
                                         reinterpret_cast<const unsigned char*>(dy + row * dy_stride)};
    unsigned char* const dst = tma_smem + static_cast<size_t>(st) * 2 * rb;
    static_assert(kTmaBlock * 16 <= 16 * kTmaChunk, "a row of one operand in at most 16 chunks");
    if (lane == 0) mbar_expect_tx(&bars[st], 2 * rb);
    const int op = lane >> 4;
    const uint32_t off = static_cast<uint32_t>(lane & 15) * kTmaChunk;
    if (off < rb)
      bulk_copy_g2s(dst + op * rb + off, (op ? src[1] : src[0]) + off,
                    rb - off < kTmaChunk ? rb - off : kTmaChunk, &bars[st]);
  };

  if (tx == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) mbar_init(&bars[s]);
    fence_mbar_init();
  }
  __syncthreads();  // the mbarriers are initialised before anyone issues or waits
  // Launched with PDL (launch_pdl): nothing global is read before the previous
  // kernel's writes are visible; the dW/dB reduction, launched next, may start
  // its blocks as this persistent grid's blocks exit.
  pdl_wait();
  pdl_trigger();
  if (warp == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) issue(s);
  }

  // Loaded once: the thread's columns are the same in every row.
  uint32_t wv[WS ? 1 : WW];
  if (has && w != nullptr) {
    if constexpr (WS) {
      static_assert(WW == 8, "fp32 weights with 16-bit x");
      uint32_t t[8];
      load_words_volatile(t, w + c0);
      w_smem[0] = make_uint4(t[0], t[1], t[2], t[3]);
      w_smem[TX] = make_uint4(t[4], t[5], t[6], t[7]);
    } else if constexpr (WW == 2) {  // fp32 x, 16-bit weights: 8 bytes
      load_words<2>(wv, w + c0);
    } else {
      load_words_volatile(wv, w + c0);
    }
  } else if (has) {
    // No weight: ones in the weight words, so that a row's weights() has no
    // branch on w (it re-materialised VEC ones a call otherwise).
    const uint32_t one = ones_word<WT>();
    if constexpr (WS) {
      w_smem[0] = w_smem[TX] = make_uint4(one, one, one, one);
    } else {
#pragma unroll
      for (int k = 0; k < WW; ++k) wv[k] = one;
    }
  }
  auto weights = [&](float(&wl)[VEC]) {
    if constexpr (WS) {
      const uint4 a = w_smem[0], b = w_smem[TX];
      const uint32_t t[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int j = 0; j < VEC; ++j) wl[j] = __uint_as_float(t[j]);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) wl[j] = word_elem<WT>(wv, j);
    }
  };
  float dw_acc[VEC], db_acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) dw_acc[j] = db_acc[j] = 0.f;

  int parity = 0, st = 0, kc = 0;  // scratch buffer; stage (k % STAGES); k % TX
  uint32_t phase = 0;              // (k / STAGES) & 1
  for (int64_t k = 0; k < nk; ++k) {
    if (kc == 0) {
      // The next TX rows' mean and rstd. Every thread read the previous
      // chunk's last pair before that row's barrier, so it can be overwritten.
      const int64_t kk = k + tx;
      if (kk < nk) {
        const int64_t row = blockIdx.x + kk * grid;
        mr[2 * tx] = mean[row];
        mr[2 * tx + 1] = rstd[row];
      }
      __syncthreads();
    }
    const int64_t row = blockIdx.x + k * grid;
    const float m = mr[2 * kc], r = mr[2 * kc + 1];
    uint32_t xv[4], gv[4];
    mbar_wait(&bars[st], phase);
    float sg = 0.f, sgx = 0.f;
    if (has) {
      const unsigned char* base = tma_smem + static_cast<size_t>(st) * 2 * rb + static_cast<size_t>(tx) * 16;
      const uint4 a = *reinterpret_cast<const uint4*>(base);
      const uint4 b = *reinterpret_cast<const uint4*>(base + rb);
      xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
      gv[0] = b.x, gv[1] = b.y, gv[2] = b.z, gv[3] = b.w;
      float wl[VEC];
      weights(wl);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float g = word_elem<T>(gv, j) * wl[j];
        sg += g;
        sgx += g * (word_elem<T>(xv, j) - m);  // times r once a row, below
      }
    }
    // Converted again below rather than kept as floats across the barrier (see pipe16).
    opaque_words<4>(xv);
    opaque_words<4>(gv);
    if constexpr (!WS) opaque_words<WW>(wv);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      sg += __shfl_xor_sync(0xffffffffu, sg, o);
      sgx += __shfl_xor_sync(0xffffffffu, sgx, o);
    }
    if (lane == 0) scratch[parity][warp] = make_float2(sg, sgx);
    __syncthreads();  // also: every thread is done reading stage st
    if (warp == 0) issue(k + STAGES);
    const int nw = TX >> 5;  // a power of two, 1..16 (TX = next_pow2 >= 32)
    float2 sums = scratch[parity][lane & (nw - 1)];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      if (o < nw) {  // uniform
        sums.x += __shfl_xor_sync(0xffffffffu, sums.x, o);
        sums.y += __shfl_xor_sync(0xffffffffu, sums.y, o);
      }
    }
    parity ^= 1;
    if (has) {
      const float ra = r * (sums.x * inv_n), rbq = r * (r * (sums.y * inv_n));
      float wl[VEC], o[VEC];
      weights(wl);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float xh = (word_elem<T>(xv, j) - m) * r;
        const float d = word_elem<T>(gv, j);
        o[j] = fmaf(r, d * wl[j], fmaf(-rbq, xh, -ra));
        dw_acc[j] += d * xh;
        db_acc[j] += d;
      }
      store_16B_words(dx + row * cols + c0, pack_vec<T, VEC>(o));
    }
    if (++st == STAGES) st = 0, phase ^= 1;
    if (++kc == TX) kc = 0;
  }

  // One partial row of dW and of dB per block, straight from registers; or,
  // launched in clusters of two (the plan's `paired`, where every pair of the
  // grid is resident), one per pair: block 1 leaves its sums in its (now idle)
  // stage memory, block 0 adds them to its own over DSMEM (own + other: the
  // same bits whichever block finished first) and writes the pair's row,
  // halving what the dW/dB reduction reads after this grid ends.
  int64_t part_row = blockIdx.x;
  if (cluster_nctarank() == 2) {  // uniform: all threads reach both cluster barriers
    const uint32_t rank = cluster_ctarank();
    // [2 * VEC][nvec] floats: at most the stages' 8 * rb bytes (stride nvec, not TX: TX is 32 at least).
    float* const sums = reinterpret_cast<float*>(tma_smem);
    const int sn = static_cast<int>(nvec);
    if (rank == 1 && has) {
      // Every bulk copy into the stages completed (each issued row was waited for).
      fence_proxy_async_smem();
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        sums[j * sn + tx] = dw_acc[j];
        sums[(VEC + j) * sn + tx] = db_acc[j];
      }
    }
    cluster_sync();
    if (rank == 0 && has) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        dw_acc[j] += ld_peer_f32(&sums[j * sn + tx], 1);
        db_acc[j] += ld_peer_f32(&sums[(VEC + j) * sn + tx], 1);
      }
    }
    // Block 1's shared memory must outlive block 0's reads.
    cluster_sync();
    if (rank == 1) return;
    part_row = blockIdx.x / 2;
  }
  if (!has) return;
  if (pw != nullptr) {
    Vec<float, VEC> v;
#pragma unroll
    for (int j = 0; j < VEC; ++j) v.v[j] = dw_acc[j];
    store_vec<float, VEC>(pw + part_row * cols + c0, v);
  }
  if (pb != nullptr) {
    Vec<float, VEC> v;
#pragma unroll
    for (int j = 0; j < VEC; ++j) v.v[j] = db_acc[j];
    store_vec<float, VEC>(pb + part_row * cols + c0, v);
  }
#else
  __trap();  // the host launches this kernel only where its sm_90 code runs
#endif
}

template <typename T, typename WT>
auto tma_kernel() {
  return &ln_bwd_tma<T, WT, kTmaStages, 2>;  // 2 blocks of 512 threads a SM (64 registers, no spills)
}

}  // namespace

namespace layer_norm_impl {

const void* bwd_tma_kernel(DType x, DType w) {
  return dispatch_ln_types(x, w, static_cast<const void*>(nullptr), [&](auto xt, auto wt) {
    return reinterpret_cast<const void*>(tma_kernel<decltype(xt), decltype(wt)>());
  });
}

cudaError_t launch_bwd_tma(const LayerNormBwdArgs& a, const LayerNormBwdPlan& p, float* pw, float* pb,
                           cudaStream_t stream) {
  return dispatch_ln_types(a.x_dtype, a.w_dtype, cudaErrorInvalidValue, [&](auto xt, auto wt) {
    using T = decltype(xt);
    using WT = decltype(wt);
    const T* dy = static_cast<const T*>(a.dy);
    const T* x = static_cast<const T*>(a.x);
    const WT* w = static_cast<const WT*>(a.w);
    T* dx = static_cast<T*>(a.dx);
    if (p.paired)
      return launch_cluster_pdl(tma_kernel<T, WT>(), p.grid, p.threads, 2, p.smem, stream, dy,
                                a.dy_row_stride, x, a.x_row_stride, w, a.mean, a.rstd, dx, pw, pb, a.rows,
                                a.cols);
    return launch_pdl(tma_kernel<T, WT>(), dim3(static_cast<unsigned>(p.grid)),
                      dim3(static_cast<unsigned>(p.threads)), p.smem, stream, dy, a.dy_row_stride, x,
                      a.x_row_stride, w, a.mean, a.rstd, dx, pw, pb, a.rows, a.cols);
  });
}

}  // namespace layer_norm_impl
}  // namespace liger_cpp::kernels
