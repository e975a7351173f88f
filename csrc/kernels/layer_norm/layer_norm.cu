// LayerNorm forward and backward kernels (see layer_norm.h for the math).
// Same structure as the RMSNorm kernels (rms_norm.cu), whose helpers are in
// norm_common.cuh: a "cached" family that keeps each row in registers (the
// backward persistent, with dW and dB partials in fp32 registers), and a
// "generic" family for any width and alignment, and pipelined backwards
// (ln_bwd_pipe, ln_bwd_pipe16, and on sm_90 ln_bwd_tma, whose rows arrive by
// TMA bulk copies; chosen by LIGER_CPP_LN_BWD, default tma) for widths up to
// 4096 (8192 for 16-bit types). LIGER_CPP_LN_FWD picks the cached forward's
// variant. dW/dB partials are finished by reduce_partials4 / reduce_partials
// (norm_common.cuh): deterministic, no atomics.
#include <type_traits>

#include "kernels/common/cluster.cuh"
#include "kernels/common/env_knob.h"
#include "kernels/layer_norm/layer_norm.h"
#include "kernels/norm/norm_common.cuh"

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
  unpack_floats<WT, VEC>(load_vec<WT, VEC>(p + c), out);
}

// ---------------------------------------------------------------------------
// Forward, row cached in registers; TY rows per block. MODE (LIGER_CPP_LN_FWD,
// see fwd_mode()) as in rms_fwd_cached; all compute the same values:
//  * kFwdOld: y stored as a struct (store_vec), w and b loaded one vector at a
//    time after the reductions.
//  * kFwdPack: y built as packed 32-bit words and stored as whole 16-byte
//    st.global.v4 (store_16B_words: nvcc may split a struct store).
//  * kFwdNew: kFwdPack, plus this thread's weights (all MAXV vectors) loaded
//    before the variance reduction when they have x's width, so their latency
//    hides behind its barrier instead of following it once per vector. The
//    bias stays after it: x, w and b packed (48 registers) spilled 16-24 bytes
//    at the 64-register cap.
enum FwdMode : int { kFwdOld = 0, kFwdPack = 1, kFwdNew = 2 };

template <typename T, typename WT, int VEC, int MAXV, int MODE>
__global__ void __maxnreg__(48)
    ln_fwd_cached(const T* __restrict__ x, int64_t x_stride, const WT* __restrict__ w,
                  const WT* __restrict__ b, T* __restrict__ y, float* __restrict__ mean,
                  float* __restrict__ rstd, int64_t rows, int64_t cols, float eps, float inv_cols) {
  // inv_cols = 1 / cols from the host: the mean and variance scale by it
  // instead of a full IEEE division each (the same values for power-of-two
  // widths, else within an ulp): 1024 -> 864 instructions a thread-row at
  // 4096 bf16 columns. __maxnreg__(48) keeps ten 128-thread blocks a SM
  // (the host 1/cols took nvcc to 50 registers, i.e. nine).
  constexpr bool PACK = MODE != kFwdOld;
  constexpr bool PREW = MODE == kFwdNew && sizeof(WT) == sizeof(T);
  pdl_trigger();  // as rms_fwd_cached: the backward's blocks may fill this grid's tail
  __shared__ float scratch[kGroupScratch];
  __shared__ float scratch2[kGroupScratch];  // the variance's sum: see group_sum's FIRST_USE
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
      float f[VEC];
      unpack_floats<T, VEC>(xv[i], f);
#pragma unroll
      for (int j = 0; j < VEC; ++j) s += f[j];
    }
  }
  const float m = group_sum</*FIRST_USE=*/true>(s, scratch) * inv_cols;
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (active && v < nvec) {
      float f[VEC];
      unpack_floats<T, VEC>(xv[i], f);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = f[j] - m;
        ss += d * d;
      }
    }
  }
  // kFwdNew: the weights requested before the barrier; volatile, so nvcc does not sink them past it.
  Vec<WT, VEC> wv[PREW ? MAXV : 1];
  if constexpr (PREW) {
    if (active && w != nullptr) {
#pragma unroll
      for (int i = 0; i < MAXV; ++i) {
        const int64_t v = static_cast<int64_t>(i) * TX + tx;
        if (v < nvec) load_words_volatile(wv[i], w + v * VEC);
      }
    }
  }
  ss = group_sum</*FIRST_USE=*/true>(ss, scratch2);  // its own scratch: no barrier to guard scratch
  if (!active) return;
  const float r = 1.f / sqrtf(ss * inv_cols + eps);
  if (tx == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    opaque_16B(xv[i]);
    if constexpr (PREW) opaque_16B(wv[i]);  // kept packed, not as VEC floats
  }
  T* yr = y + row * cols;
#pragma unroll
  for (int i = 0; i < MAXV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    if (v < nvec) {
      float wf[VEC], bf[VEC];
      if constexpr (PREW) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) wf[j] = w != nullptr ? to_float<WT>(wv[i].v[j]) : 1.f;
      } else {
        load_param<WT, VEC>(w, v * VEC, 1.f, wf);
      }
      load_param<WT, VEC>(b, v * VEC, 0.f, bf);
      float o[VEC], f[VEC];
      unpack_floats<T, VEC>(xv[i], f);
#pragma unroll
      for (int j = 0; j < VEC; ++j) o[j] = (f[j] - m) * r * wf[j] + bf[j];
      if constexpr (PACK) {
        store_16B_words(yr + v * VEC, pack_vec<T, VEC>(o));
      } else {
        Vec<T, VEC> out;
#pragma unroll
        for (int j = 0; j < VEC; ++j) out.v[j] = from_float<T>(o[j]);
        store_vec<T, VEC>(yr + v * VEC, out);
      }
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
  __shared__ float scratch2[kGroupScratch];  // the variance's sum: see group_sum's FIRST_USE
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
  // The barrier publishes the stash.
  const float m = group_sum</*FIRST_USE=*/true>(s, scratch) / static_cast<float>(cols);
  float ss = 0.f;
  for (int64_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const Vec<T, VEC> xv = load(v);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float d = to_float<T>(xv.v[j]) - m;
      ss += d * d;
    }
  }
  ss = group_sum</*FIRST_USE=*/true>(ss, scratch2);
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

// 8 or 16 bytes as 32-bit words; volatile, so issued where written (see load_16B_volatile).
template <int NW>
__device__ __forceinline__ void load_words(uint32_t (&d)[NW], const void* src) {
  static_assert(NW == 2 || NW == 4, "8 or 16 bytes");
  if constexpr (NW == 4) {
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "l"(src));
  } else {
    asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(d[0]), "=r"(d[1]) : "l"(src));
  }
}

// Values converted from the words earlier cannot be reused past this point (see opaque_16B).
template <int NW>
__device__ __forceinline__ void opaque_words(uint32_t (&d)[NW]) {
#pragma unroll
  for (int q = 0; q < NW; ++q) asm volatile("" : "+r"(d[q]));
}

// Backward, pipelined (LIGER_CPP_LN_BWD=v1..v3): persistent blocks of BLOCK
// threads, TX = blockDim.x threads per row with NV vectors of VB bytes each
// (VEC = VB / sizeof(T) elements; so the dW/dB partials take 2 x NV x VEC
// registers and MINB blocks of BLOCK threads fit an SM: 32 warps, <= 64
// registers), TY = blockDim.y rows per block step. x and dy of the
// next DEPTH - 1 rows are loaded before the current row is reduced, so loads
// stay in flight across the block barrier; sum(g) and sum(g * xhat) share one
// barrier per row (float2, double-buffered scratch: a buffer is rewritten only
// after the next barrier, which every reader of it has passed).
template <typename T, typename WT, int VB, int NV, int DEPTH, int BLOCK, int MINB>
__global__ void __launch_bounds__(BLOCK, MINB)
    ln_bwd_pipe(const T* __restrict__ dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                const WT* __restrict__ w, const float* __restrict__ mean, const float* __restrict__ rstd,
                T* __restrict__ dx, float* __restrict__ pw, float* __restrict__ pb, int64_t rows,
                int64_t cols) {
  constexpr int VEC = VB / static_cast<int>(sizeof(T));
  constexpr int NWRD = VB / 4;    // 32-bit words per vector
  extern __shared__ float red[];  // [cols] when pw or pb and blockDim.y > 1
  __shared__ float2 scratch[2][32];
  const int tx = threadIdx.x, TX = blockDim.x, ty = threadIdx.y, TY = blockDim.y;
  const int lane = tx & 31;
  const int nw = TX >> 5;            // warps per row (a power of two)
  const int wbase = (ty * TX) >> 5;  // first warp of this row group
  const int64_t nvec = cols / VEC;
  const int64_t step = static_cast<int64_t>(gridDim.x) * TY;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * TY + ty;
  const int64_t iters = (rows + step - 1) / step;  // uniform across the block
  const float inv_n = 1.f / static_cast<float>(cols);

  bool has[NV];
  constexpr int WW = VEC * sizeof(WT) / 4;  // 32-bit words of VEC weights
  uint32_t wv[NV][WW];
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t v = static_cast<int64_t>(i) * TX + tx;
    has[i] = v < nvec;
    if (has[i] && w != nullptr) {
      const Vec<WT, VEC> t = load_vec<WT, VEC>(w + v * VEC);
#pragma unroll
      for (int q = 0; q < WW; ++q) wv[i][q] = reinterpret_cast<const uint32_t*>(&t)[q];
    }
  }
  float dw_acc[NV][VEC], db_acc[NV][VEC];
#pragma unroll
  for (int i = 0; i < NV; ++i)
#pragma unroll
    for (int j = 0; j < VEC; ++j) dw_acc[i][j] = db_acc[i][j] = 0.f;

  uint32_t xb[DEPTH][NV][NWRD], gb[DEPTH][NV][NWRD];
  float mb[DEPTH], rb[DEPTH];
  // Row `k` of this thread's group into buffer `s` (k % DEPTH == s).
  auto load_row = [&](int64_t k, int s) {
    const int64_t row = k * step + first;
    if (k < iters && row < rows) {
      mb[s] = mean[row];
      rb[s] = rstd[row];
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const int64_t v = static_cast<int64_t>(i) * TX + tx;
        if (has[i]) {
          load_words<NWRD>(xb[s][i], x + row * x_stride + v * VEC);
          load_words<NWRD>(gb[s][i], dy + row * dy_stride + v * VEC);
        }
      }
    }
  };
  auto wf = [&](int i, int j) { return w == nullptr ? 1.f : word_elem<WT>(wv[i], j); };
  int parity = 0;
  auto process_row = [&](int64_t k, int s) {
    const int64_t row = k * step + first;
    const bool active = row < rows;
    const float m = mb[s], r = rb[s];
    float sg = 0.f, sgx = 0.f;
    if (active) {
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        if (has[i]) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            const float g = word_elem<T>(gb[s][i], j) * wf(i, j);
            sg += g;
            sgx += g * ((word_elem<T>(xb[s][i], j) - m) * r);
          }
        }
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      sg += __shfl_xor_sync(0xffffffffu, sg, o);
      sgx += __shfl_xor_sync(0xffffffffu, sgx, o);
    }
    if (nw > 1) {  // uniform
      if (lane == 0) scratch[parity][wbase + (tx >> 5)] = make_float2(sg, sgx);
      __syncthreads();
      // Lane l reads warp l % nw: every aligned run of nw lanes holds all the
      // warps' sums, so the butterfly gives every lane the same fixed-order sum.
      const float2 u = scratch[parity][wbase + (lane & (nw - 1))];
      sg = u.x;
      sgx = u.y;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        if (o < nw) {
          sg += __shfl_xor_sync(0xffffffffu, sg, o);
          sgx += __shfl_xor_sync(0xffffffffu, sgx, o);
        }
      }
      parity ^= 1;
    }
    if (!active) return;
    const float a = sg * inv_n, bq = sgx * inv_n;
    // Converted again below rather than kept as floats across the barrier (spilled).
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      opaque_words<NWRD>(xb[s][i]);
      opaque_words<NWRD>(gb[s][i]);
    }
    T* dr = dx + row * cols;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      if (has[i]) {
        Vec<T, VEC> out;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float xh = (word_elem<T>(xb[s][i], j) - m) * r;
          const float d = word_elem<T>(gb[s][i], j);
          out.v[j] = from_float<T>(r * (d * wf(i, j) - a - xh * bq));
          dw_acc[i][j] += d * xh;
          db_acc[i][j] += d;
        }
        store_vec<T, VEC>(dr + (static_cast<int64_t>(i) * TX + tx) * VEC, out);
      }
    }
  };

  // Prologue: rows 0 .. DEPTH-2 in flight. Every loop over buffers is fully
  // unrolled, so the buffer indices are constants and the buffers stay in registers.
#pragma unroll
  for (int s = 0; s + 1 < DEPTH; ++s) load_row(s, s);
  for (int64_t base = 0; base < iters; base += DEPTH) {
#pragma unroll
    for (int s = 0; s < DEPTH; ++s) {
      if (base + s >= iters) break;  // uniform
      // Row base+s+DEPTH-1 into the buffer freed by row base+s-1, then finish row base+s.
      load_row(base + s + DEPTH - 1, (s + DEPTH - 1) % DEPTH);
      process_row(base + s, s);
    }
  }

  // Row groups of the block summed in a fixed order (through shared memory
  // when there are several); each block writes one partial row of dW and dB.
  for (int pass = 0; pass < 2; ++pass) {
    float* part = pass == 0 ? pw : pb;
    if (part == nullptr) continue;  // uniform across the block
    float* out = part + static_cast<int64_t>(blockIdx.x) * cols;
    if (TY == 1) {
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        if (has[i]) {
          const int64_t c = (static_cast<int64_t>(i) * TX + tx) * VEC;
#pragma unroll
          for (int j = 0; j < VEC; ++j) out[c + j] = pass == 0 ? dw_acc[i][j] : db_acc[i][j];
        }
      }
      continue;
    }
    for (int g = 0; g < TY; ++g) {
      if (ty == g) {
#pragma unroll
        for (int i = 0; i < NV; ++i) {
          if (has[i]) {
            const int64_t c = (static_cast<int64_t>(i) * TX + tx) * VEC;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
              const float add = pass == 0 ? dw_acc[i][j] : db_acc[i][j];
              red[c + j] = (g == 0 ? 0.f : red[c + j]) + add;
            }
          }
        }
      }
      __syncthreads();
    }
    for (int64_t c = ty * TX + tx; c < cols; c += BLOCK) out[c] = red[c];
    __syncthreads();
  }
}

// group_sum_1bar (rms_norm.cu) for two sums at once: sum(g) and sum(g * xhat)
// share the row's ONE named barrier, which only this threadIdx.y group waits
// on. The callers alternate parity (see group_sum_1bar for why that makes one
// barrier enough). Every lane gets the same fixed-order sums: deterministic.
__device__ __forceinline__ float2 group_sum2_1bar(float a, float b, float2 (*scratch)[2][32], int parity) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if (blockDim.x == 32) return make_float2(a, b);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float2* mine = scratch[threadIdx.y][parity];
  if (lane == 0) mine[warp] = make_float2(a, b);
  named_barrier(1 + static_cast<int>(threadIdx.y), blockDim.x);
  const float2 u = lane < static_cast<int>(blockDim.x >> 5) ? mine[lane] : make_float2(0.f, 0.f);
  a = u.x;
  b = u.y;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  return make_float2(a, b);
}

// Backward with whole 16-byte vectors (LIGER_CPP_LN_BWD=v4, v5): rms_bwd_pipe's
// structure with LayerNorm's two sums. Persistent blocks, one row per
// threadIdx.y group of TX = blockDim.x threads, ONE 16-byte vector per thread
// (VEC = 16 / sizeof(T) columns; so rows up to BLOCK vectors), one named
// barrier per row that only the row's group waits on (group_sum2_1bar). Two
// ways to fetch x and dy ahead:
//  * STAGES == 0 (v4): the next row into registers, issued before the barrier.
//  * STAGES >= 2 (v5): STAGES - 1 rows ahead with cp.async into this thread's
//    own shared-memory slots: the bytes in flight cost no registers (the 2 x VEC
//    fp32 dW/dB accumulators take 16 for 16-bit types), and since each thread
//    reads back only what it copied, cp.async.wait_group is the only
//    synchronisation they need.
// mean and rstd come the same way as v5's x and dy, AHEAD rows ahead (one for
// v4): each thread copies them with cp.async into its own slots. Held in
// registers one row ahead they were spilled at 64 registers (stored to local
// memory right after the load, which then waited for it every row).
// Weights wider than x (fp32 with 16-bit x: 8 registers) are kept in this
// thread's own shared-memory slots and read again for each use (spilled in
// registers); otherwise as packed words in registers.
// x, dy and the weights stay packed as 32-bit words across the barrier
// (opaque_words), converted again after it, so nvcc keeps 4 registers per
// vector instead of VEC floats. dx is built as packed words, stored as one
// st.global.v4 (store_16B_words).
template <typename T, typename WT, int STAGES, int BLOCK, int MINB>
__global__ void __launch_bounds__(BLOCK, MINB)
    ln_bwd_pipe16(const T* __restrict__ dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                  const WT* __restrict__ w, const float* __restrict__ mean, const float* __restrict__ rstd,
                  T* __restrict__ dx, float* __restrict__ pw, float* __restrict__ pb, int64_t rows,
                  int64_t cols) {
  constexpr int VEC = 16 / static_cast<int>(sizeof(T));
  constexpr int WW = VEC * static_cast<int>(sizeof(WT)) / 4;  // 32-bit words of VEC weights
  constexpr int AHEAD = STAGES == 0 ? 1 : STAGES - 1;         // rows fetched ahead
  constexpr int NS = AHEAD + 1;                               // slots per thread (mean, rstd)
  // [STAGES][TY][2 (x, dy)][TX] 16-byte slots, then [NS][TY][2 (mean, rstd)][TX]
  // floats; after the rows, [VEC][TX] floats to sum the row groups' partials
  // (at most the size of the latter), then [TY][2][TX] 16-byte weight slots (WS).
  constexpr bool WS = sizeof(WT) > sizeof(T);
  extern __shared__ uint4 pipe_smem[];
  __shared__ float2 scratch[kMaxNamedGroups][2][32];
  const int tx = threadIdx.x, TX = blockDim.x, ty = threadIdx.y, TY = blockDim.y;
  const int64_t nvec = cols / VEC;
  const bool has = tx < nvec;
  const int64_t step = static_cast<int64_t>(gridDim.x) * TY;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * TY + ty;
  const float inv_n = 1.f / static_cast<float>(cols);
  const int c0 = tx * VEC;  // this thread's first column

  auto slot = [&](int stage, int ch) -> uint4* { return pipe_smem + ((stage * TY + ty) * 2 + ch) * TX + tx; };
  float* const mr_smem = reinterpret_cast<float*>(pipe_smem + STAGES * TY * 2 * TX);
  auto mr_slot = [&](int stage, int k) -> float* { return mr_smem + ((stage * TY + ty) * 2 + k) * TX + tx; };
  uint4* const w_smem = reinterpret_cast<uint4*>(mr_smem + NS * TY * 2 * TX) + ty * 2 * TX + tx;

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
  }
  // This thread's VEC weights as floats (all ones without a weight).
  auto weights = [&](float (&wl)[VEC]) {
    if (w == nullptr) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) wl[j] = 1.f;
    } else if constexpr (WS) {
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

  auto fetch_async = [&](int64_t row, int stage) {
    if (has && row < rows) {
      if constexpr (STAGES > 0) {
        copy_16B_async(slot(stage, 0), x + row * x_stride + c0);
        copy_16B_async(slot(stage, 1), dy + row * dy_stride + c0);
      }
      copy_4B_async(mr_slot(stage, 0), mean + row);
      copy_4B_async(mr_slot(stage, 1), rstd + row);
    }
    async_commit();  // also when empty: one group per row keeps wait_group's count right
  };
  auto fetch_regs = [&](int64_t row, uint32_t (&xd)[4], uint32_t (&gd)[4]) {
    if (has && row < rows) {
      load_words<4>(xd, x + row * x_stride + c0);
      load_words<4>(gd, dy + row * dy_stride + c0);
    }
  };

  uint32_t xv[4], gv[4];
  if constexpr (STAGES == 0) fetch_regs(first, xv, gv);
#pragma unroll
  for (int s = 0; s < AHEAD; ++s) fetch_async(first + s * step, s);

  // The loop runs on the block's first row (`base`), so every thread of the
  // block takes the same number of iterations (the barriers need that).
  int stage = 0, parity = 0;
  for (int64_t base = first - ty; base < rows; base += step) {
    const int64_t row = base + ty;
    const bool active = row < rows;
    // Refill the slots the previous row used (this thread is done with them).
    fetch_async(row + AHEAD * step, stage == 0 ? NS - 1 : stage - 1);
    async_wait<AHEAD>();  // this row's copies have landed
    float m = 0.f, r = 0.f;
    if (active && has) {
      m = *mr_slot(stage, 0);
      r = *mr_slot(stage, 1);
      if constexpr (STAGES > 0) {
        const uint4 a = *slot(stage, 0), b = *slot(stage, 1);
        xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
        gv[0] = b.x, gv[1] = b.y, gv[2] = b.z, gv[3] = b.w;
      }
    }
    float sg = 0.f, sgx = 0.f;
    if (active && has) {
      float wl[VEC];
      weights(wl);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float g = word_elem<T>(gv, j) * wl[j];
        sg += g;
        sgx += g * ((word_elem<T>(xv, j) - m) * r);
      }
    }
    // Converted again below rather than kept as floats across the barrier (spilled).
    opaque_words<4>(xv);
    opaque_words<4>(gv);
    if constexpr (!WS) opaque_words<WW>(wv);
    uint32_t xn[4], gn[4];
    if constexpr (STAGES == 0) fetch_regs(row + step, xn, gn);  // in flight during the barrier
    const float2 sums = group_sum2_1bar(sg, sgx, scratch, parity);
    parity ^= 1;
    if (active && has) {
      const float a = sums.x * inv_n, bq = sums.y * inv_n;
      float wl[VEC], o[VEC];
      weights(wl);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float xh = (word_elem<T>(xv, j) - m) * r;
        const float d = word_elem<T>(gv, j);
        o[j] = r * (d * wl[j] - a - xh * bq);
        dw_acc[j] += d * xh;
        db_acc[j] += d;
      }
      store_16B_words(dx + row * cols + c0, pack_vec<T, VEC>(o));
    }
    if constexpr (STAGES == 0) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        xv[q] = xn[q];
        gv[q] = gn[q];
      }
    }
    stage = stage + 1 == NS ? 0 : stage + 1;
  }

  // Each block writes one partial row of dW and of dB: straight from registers
  // with one row group, else the groups summed in a fixed order in shared
  // memory laid out [j][tx] (conflict-free), reusing the pipeline's slots.
  if (pw == nullptr && pb == nullptr) return;  // uniform across the block
  float* smem = reinterpret_cast<float*>(pipe_smem);
  if (TY > 1) {
    async_wait<0>();  // the trailing copies (of rows past the end: none) before reusing the slots
    __syncthreads();
  }
  for (int pass = 0; pass < 2; ++pass) {
    float* part = pass == 0 ? pw : pb;
    if (part == nullptr) continue;  // uniform across the block
    float* out = part + static_cast<int64_t>(blockIdx.x) * cols;
    if (TY == 1) {
      if (has) {
        Vec<float, VEC> v;
#pragma unroll
        for (int j = 0; j < VEC; ++j) v.v[j] = pass == 0 ? dw_acc[j] : db_acc[j];
        store_vec<float, VEC>(out + c0, v);
      }
      continue;
    }
    for (int g = 0; g < TY; ++g) {
      if (ty == g) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float add = pass == 0 ? dw_acc[j] : db_acc[j];
          smem[j * TX + tx] = (g == 0 ? 0.f : smem[j * TX + tx]) + add;
        }
      }
      __syncthreads();
    }
    if (ty == 0 && has) {
      Vec<float, VEC> v;
#pragma unroll
      for (int j = 0; j < VEC; ++j) v.v[j] = smem[j * TX + tx];
      store_vec<float, VEC>(out + c0, v);
    }
    __syncthreads();  // before the next pass rewrites smem
  }
}

// The TMA pipeline of ln_bwd_tma (sm_90).
constexpr int kTmaBlock = 512;  // threads at most (rows of at most 512 16-byte vectors)
constexpr int kTmaStages = 4;   // rows in flight per block
// Unused in the sm_80 pass (its kernels are stubs): maybe_unused keeps that pass quiet.
[[maybe_unused]] constexpr int kTmaChunk = 4096;  // bytes per bulk copy (one a lane of warp 0)

// Backward with rows brought into shared memory by the TMA engine (sm_90;
// LIGER_CPP_LN_BWD=tma). ln_bwd_pipe16's math, vector ownership and partials,
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
// Instructions a row pace this kernel (rms_bwd_tma: 116.8 -> 110.3 us from
// instruction cuts alone), so a row costs as few as the math allows: 116.6 us
// (2026-11-30-h200-norm-breakdown-lean-b7111cb.log) -> 110.4 us, fwd+bwd
// 81.7 -> 84.2 % of C at 16384 x 4096 bf16 on the H200 (2026-12-01-h200-
// layer_norm-7e5f4b4.log, the bwd=tma and bwd=lean rows):
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
  auto weights = [&](float (&wl)[VEC]) {
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
  // launched in clusters of two (LIGER_CPP_LN_BWD_PAIR, see plan_tma), one
  // per pair: block 1 leaves its sums in its (now idle) stage memory, block
  // 0 adds them to its own over DSMEM (own + other: the same bits whichever
  // block finished first) and writes the pair's row, halving what the dW/dB
  // reduction reads after this grid ends: its tail 6.3 -> 4.0 us, call span
  // 184.3 -> 182.4 us, fwd+bwd 84.7 -> 85.4 % of C at 16384 x 4096 bf16
  // (2026-12-01-h200-layer_norm-8413783.log, -norm-breakdown-ln-pair-8413783.log).
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

// Backward variants, chosen per call by LIGER_CPP_LN_BWD (for A/B runs):
//   old: ln_bwd_cached, 256-thread blocks, up to 4 vectors per thread;
//   v1:  ln_bwd_pipe, 1024-thread blocks, 1 per SM, next row prefetched;
//   v2:  ln_bwd_pipe, 512-thread blocks, 2 per SM, next 2 rows prefetched
//        (next row only for fp32);
//   v3:  ln_bwd_pipe, 1024-thread blocks, 1 per SM, next 2 rows prefetched
//        (next row only for fp32: more spills).
//   v4:  ln_bwd_pipe16 (16-byte vectors, one named barrier per row), 512-thread
//        blocks, 2 per SM (64 registers), next row prefetched into registers;
//   v5:  ln_bwd_pipe16, next kPipe16Stages - 1 rows fetched with cp.async into
//        shared memory (64 KiB per block at 16384 x 4096 bf16, 2 blocks per SM).
//   tma: ln_bwd_tma (sm_90; the default), rows brought into 4 shared-memory
//        stages by cp.async.bulk, registers bounded for 2 blocks of 512
//        threads per SM; runs as v5 on older GPUs. Bounded for 3 blocks (40
//        registers) it spilled its dW/dB partials and ran at 45.5 % of C
//        (layer_norm-quick-272ac70); with 6 stages 69.5 % and with 3 75.9 %
//        against 75.9-77.7 % for 4 (-d4c0776, -0686c5e). rms_bwd_tma's
//        instruction cuts (weights as floats in shared memory) with the row's
//        two sums reduced as a pair made this kernel slower (116.5 -> 121.4
//        us, fwd+bwd 80.3 -> 78.2 %; layer_norm-4945b12, norm-breakdown-ln-
//        tma-v2-4945b12) and were removed.
//   v4, v5 and tma take rows up to 512 16-byte vectors (4096 16-bit or 2048 fp32
//   columns) with every operand 16-byte aligned; other calls run as v3.
// ln_bwd_pipe takes 4 elements per vector (8 bytes for 16-bit types: 16-byte
// vectors spilled at 64 registers) and one vector per thread, or two without
// prefetch for 16-bit types; other widths and alignments go to the old paths
// whatever the choice (e.g. bf16 with more than 8192 columns).
// Which ln_fwd_cached variant runs (FwdMode), read on every call so that
// benchmarks can A/B them in one process and the tests can run each:
// LIGER_CPP_LN_FWD=old|pack|new (default pack: 83.2 % of C at 16384 x 4096
// bf16 on the H200 against 80.5 % for old and 77.1 % for new, whose early
// weight loads cost more than they hide; benchmarks/results/
// 2026-11-30-h200-layer_norm-quick-b4b7e3b.log); an unknown value is an error.
// A forward that widened x to floats once and kept them (cvt1: ~100 fewer
// instructions a thread-row, 63 registers so 4 blocks a SM instead of 5) read
// 81.7 against 83.2 % for pack (2026-11-30-h200-layer_norm-4945b12.log) and
// was removed.
// A forward through shared-memory stages filled by TMA bulk copies (ln_bwd_tma's
// pipeline for x alone, two barriers a row) ran at 60.3 % of C against 83.6 %
// for pack (2026-11-30-h200-layer_norm-quick-0686c5e.log) and was removed: with
// 2-3 rows in flight per SM, each row's two reductions stay exposed.
// A persistent forward (resident blocks looping over row groups, w and b
// widened once a block into shared memory as floats: 618 instructions a
// row-group iteration against 1024 a thread-row, 48 registers) ran its
// kernel in 77.7 against 71.9 us at 16384 x 4096 bf16, fwd 79.2 against
// 86.9 % of C (2026-12-01-h200-layer_norm-0f9a038.log) and was removed.
FwdMode fwd_mode() {
  switch (env_choice("LIGER_CPP_LN_FWD", {"old", "pack", "new"})) {
    case 0:
      return kFwdOld;
    case 2:
      return kFwdNew;
    default:
      return kFwdPack;
  }
}

enum class BwdVariant { kOld = 0, kV1 = 1, kV2 = 2, kV3 = 3, kV4 = 4, kV5 = 5, kTma = 6 };
// tma measured fastest: bwd 77.7 % of C at 16384 x 4096 bf16 on the H200
// against 55.9 % for v5 (2026-11-30-h200-layer_norm-quick-0686c5e.log; v5
// against v4 53.4 %, v3 47.4 %, old 33.0 %: -b4b7e3b.log).
constexpr BwdVariant kDefaultBwd = BwdVariant::kTma;

BwdVariant bwd_variant() {
  // The indices are the enum's values.
  const int i = env_choice("LIGER_CPP_LN_BWD", {"old", "v1", "v2", "v3", "v4", "v5", "tma"});
  return i < 0 ? kDefaultBwd : static_cast<BwdVariant>(i);
}

struct BwdPlan : Plan {
  bool pipe = false;  // ln_bwd_pipe with nv vectors per thread
  int nv = 1;
  bool pipe16 = false;  // ln_bwd_pipe16 (v4, v5) with smem bytes of dynamic shared memory
  bool tma = false;     // ln_bwd_tma, smem bytes of dynamic shared memory
  bool pair = false;    // ln_bwd_tma in clusters of two: one partial row a pair
  size_t smem = 0;
  BwdVariant variant = BwdVariant::kOld;
};

constexpr int kPipe16Block = 512;  // threads; 2 blocks per SM at 64 registers
constexpr int kPipe16Stages = 4;   // v5: 3 rows in flight (96 KiB per SM at 16384 x 4096 bf16)

template <typename T, typename WT>
auto pipe16_kernel(BwdVariant v) {
  return v == BwdVariant::kV5 ? &ln_bwd_pipe16<T, WT, kPipe16Stages, kPipe16Block, 2>
                              : &ln_bwd_pipe16<T, WT, 0, kPipe16Block, 2>;
}

// Plans ln_bwd_pipe16 (p.tx threads a row, p.ty rows a block, persistent
// grid) for a 16-byte aligned call of at most kPipe16Block vectors a row;
// false when its shared memory does not fit (then the call runs as v3).
template <typename T, typename WT>
bool plan_pipe16(const LayerNormBwdArgs& a, int sm_count, BwdPlan& p) {
  const int64_t nvec = a.cols / p.vec;
  p.tx = next_pow2(nvec);
  p.ty = std::max(1, kPipe16Block / p.tx);  // <= 16; 16 only for TX = 32 (no barrier)
  // x and dy slots (v5) and mean and rstd slots (AHEAD + 1 stages); the
  // partial sums across row groups ([VEC][TX] floats) fit in the latter.
  const bool v5 = p.variant == BwdVariant::kV5;
  const size_t threads = static_cast<size_t>(p.tx) * p.ty;
  p.smem = (v5 ? kPipe16Stages * threads * 2 * 16 : 0) + (v5 ? kPipe16Stages : 2) * threads * 2 * 4 +
           (sizeof(WT) > sizeof(T) ? threads * 32 : 0);  // weight slots (see ln_bwd_pipe16)
  auto* kern = pipe16_kernel<T, WT>(p.variant);
  const int per_sm = pipe_blocks_per_sm(kern, p.tx * p.ty, p.smem, p.variant == BwdVariant::kV5);
  if (per_sm < 1) return false;
  p.cached = true;
  p.pipe16 = true;
  p.grid = std::max<int64_t>(
      1, std::min<int64_t>(ceil_div(a.rows, p.ty), static_cast<int64_t>(sm_count) * per_sm));
  return true;
}

// LIGER_CPP_LN_BWD_PAIR=on|off (default on): ln_bwd_tma in clusters of two
// blocks, one dW/dB partial row a pair (see its end).
bool ln_bwd_pair() { return env_choice("LIGER_CPP_LN_BWD_PAIR", {"on", "off"}) != 1; }

// ln_bwd_tma's instantiation: 2 blocks of 512 threads per SM (64 registers, no spills).
template <typename T, typename WT>
auto tma_kernel() {
  return &ln_bwd_tma<T, WT, kTmaStages, 2>;
}

// Plans ln_bwd_tma (p.tx threads a row, one row a block, persistent grid) for
// a 16-byte aligned call of at most kTmaBlock vectors a row; false when the
// kernel's sm_90 code does not run here (an older GPU, or a build without
// sm_90) or its shared memory does not fit (then v5).
template <typename T, typename WT>
bool plan_tma(const LayerNormBwdArgs& a, int sm_count, BwdPlan& p) {
  auto* kern = tma_kernel<T, WT>();
  if (binary_version(reinterpret_cast<const void*>(kern)) < 90) return false;
  const int64_t nvec = a.cols / p.vec;
  p.tx = next_pow2(nvec);
  p.ty = 1;
  const size_t rb = static_cast<size_t>(a.cols) * sizeof(T);
  p.smem = kTmaStages * 2 * rb + static_cast<size_t>(p.tx) * 2 * sizeof(float) +
           (sizeof(WT) > sizeof(T) ? static_cast<size_t>(p.tx) * 32 : 0);
  const int per_sm = pipe_blocks_per_sm(kern, p.tx, p.smem, true);
  if (per_sm < 1) return false;
  p.cached = true;
  p.tma = true;
  p.grid = std::max<int64_t>(1, std::min<int64_t>(a.rows, static_cast<int64_t>(sm_count) * per_sm));
  // Pairs (clusters of two) when every pair of the grid can be resident at
  // once (the grid is persistent); the grid is then even (a block may have no
  // rows: it adds zeros).
  if (ln_bwd_pair() && per_sm >= 2) {
    const int64_t pairs = active_clusters(kern, p.tx, 2, p.smem);
    const int64_t want = (p.grid + 1) / 2;
    if (pairs >= want) {
      p.pair = true;
      p.grid = 2 * want;
    }
  }
  return true;
}

int pipe_block(BwdVariant v) { return v == BwdVariant::kV2 ? 512 : 1024; }
int pipe_min_blocks(BwdVariant v) { return v == BwdVariant::kV2 ? 2 : 1; }

template <typename T, typename WT>
BwdPlan plan_ln_bwd(const LayerNormBwdArgs& a, int sm_count, BwdVariant variant) {
  BwdPlan p;
  p.variant = variant;
  const int full = 16 / static_cast<int>(sizeof(T));
  const bool aligned =
      all_aligned(full, a.cols, {a.x_row_stride, a.dy_row_stride},
                  {{a.x, sizeof(T)}, {a.dy, sizeof(T)}, {a.dx, sizeof(T)}, {a.w, sizeof(WT)}});
  p.vec = aligned ? full : 1;
  const bool want = a.dw != nullptr || a.db != nullptr;
  const int64_t nparts = (a.dw ? 1 : 0) + (a.db ? 1 : 0);
  const int64_t nvec = a.cols / p.vec;
  const int64_t nvec4 = a.cols / 4;
  const int64_t max_nv = sizeof(T) == 2 ? 2 : 1;
  if (variant == BwdVariant::kTma) {
    if (aligned && nvec <= kTmaBlock && plan_tma<T, WT>(a, sm_count, p)) {
      // Sized for one partial row a block even with pairs (p.grid / 2 rows): an
      // upper bound for both, so a LIGER_CPP_LN_BWD_PAIR change between this
      // sizing and the launch cannot leave the workspace short.
      p.ws_floats = nparts * p.grid * a.cols;
      return p;
    }
    variant = p.variant = BwdVariant::kV5;
  }
  if (variant == BwdVariant::kV4 || variant == BwdVariant::kV5) {
    if (aligned && nvec <= kPipe16Block && plan_pipe16<T, WT>(a, sm_count, p)) {
      p.ws_floats = nparts * p.grid * a.cols;
      return p;
    }
    variant = p.variant = BwdVariant::kV3;
  }
  const bool aligned4 =
      all_aligned(4, a.cols, {a.x_row_stride, a.dy_row_stride},
                  {{a.x, sizeof(T)}, {a.dy, sizeof(T)}, {a.dx, sizeof(T)}, {a.w, sizeof(WT)}});
  if (aligned4 && variant != BwdVariant::kOld && nvec4 <= max_nv * pipe_block(variant)) {
    const int block = pipe_block(variant);
    p.cached = true;
    p.pipe = true;
    p.vec = 4;
    p.nv = nvec4 <= block ? 1 : 2;
    p.tx = next_pow2(ceil_div(nvec4, p.nv));  // <= block
    p.ty = block / p.tx;
    p.grid =
        std::min<int64_t>(ceil_div(a.rows, p.ty), static_cast<int64_t>(sm_count) * pipe_min_blocks(variant));
    p.grid = std::max<int64_t>(p.grid, 1);
  } else if (aligned && pick_cached(nvec, p) && p.tx <= kMaxBwdTx) {
    p.ty = std::max(1, kMaxBwdTx / p.tx);
    const size_t smem = want ? static_cast<size_t>(a.cols) * sizeof(float) : 0;
    auto* kern = &ln_bwd_cached<T, WT, 16 / sizeof(T), kMaxV>;
    const int per_sm = sm_blocks(reinterpret_cast<const void*>(kern), p.tx * p.ty, smem);
    p.grid = std::min<int64_t>(ceil_div(a.rows, p.ty), static_cast<int64_t>(sm_count) * per_sm);
    p.grid = std::max<int64_t>(p.grid, 1);
  } else {
    p.cached = false;
    const int64_t col_blocks = ceil_div(nvec, 256);
    p.grid = std::max<int64_t>(1, std::min<int64_t>(a.rows, ceil_div(4LL * sm_count, col_blocks)));
    p.grid = std::min<int64_t>(p.grid, 65535);
  }
  p.ws_floats = nparts * p.grid * a.cols;
  return p;
}

template <typename T, typename WT, int NV, int DEPTH, int BLOCK, int MINB>
void launch_pipe(const LayerNormBwdArgs& a, const BwdPlan& p, float* pw, float* pb, cudaStream_t stream) {
  // Shared memory only to sum several row groups' partials; TY > 1 means
  // NV = 1 and cols <= BLOCK / 2 * 4, so at most 8 KB.
  const size_t smem = ((pw || pb) && p.ty > 1) ? static_cast<size_t>(a.cols) * sizeof(float) : 0;
  ln_bwd_pipe<T, WT, 4 * sizeof(T), NV, DEPTH, BLOCK, MINB><<<p.grid, dim3(p.tx, p.ty), smem, stream>>>(
      static_cast<const T*>(a.dy), a.dy_row_stride, static_cast<const T*>(a.x), a.x_row_stride,
      static_cast<const WT*>(a.w), a.mean, a.rstd, static_cast<T*>(a.dx), pw, pb, a.rows, a.cols);
}

template <typename T, typename WT>
void launch_pipe_variant(const LayerNormBwdArgs& a, const BwdPlan& p, float* pw, float* pb,
                         cudaStream_t stream) {
  constexpr int kDeep = sizeof(T) == 2 ? 3 : 2;  // fp32 spills with 3 buffers
  if constexpr (sizeof(T) == 2) {
    if (p.nv == 2) {  // no prefetch (spills)
      if (p.variant == BwdVariant::kV2)
        launch_pipe<T, WT, 2, 1, 512, 2>(a, p, pw, pb, stream);
      else
        launch_pipe<T, WT, 2, 1, 1024, 1>(a, p, pw, pb, stream);
      return;
    }
  }
  switch (p.variant) {
    case BwdVariant::kV2:
      launch_pipe<T, WT, 1, kDeep, 512, 2>(a, p, pw, pb, stream);
      break;
    case BwdVariant::kV3:
      launch_pipe<T, WT, 1, kDeep, 1024, 1>(a, p, pw, pb, stream);
      break;
    default:
      launch_pipe<T, WT, 1, 2, 1024, 1>(a, p, pw, pb, stream);
      break;
  }
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
    const FwdMode mode = fwd_mode();
    if (aligned && pick_cached(a.cols / full, p)) {
      // 128-thread blocks (pick_cached: 256): 71.0 -> 69.9 us at 16384 x 4096
      // bf16 (TX = 128, so one row a block), 69.2 -> 68.9 us at 65536 x 1024;
      // 512 threads ran at 78.9 us (2026-12-01-h200-norm-breakdown-ln-ty-7e5f4b4.log).
      p.ty = std::max(1, 128 / p.tx);
      p.ty = fwd_rows_per_block("LIGER_CPP_LN_FWD_TY", p);
      const dim3 block(p.tx, p.ty);
      auto* kern = mode == kFwdNew    ? &ln_fwd_cached<T, WT, full, kMaxV, kFwdNew>
                   : mode == kFwdPack ? &ln_fwd_cached<T, WT, full, kMaxV, kFwdPack>
                                      : &ln_fwd_cached<T, WT, full, kMaxV, kFwdOld>;
      kern<<<ceil_div(a.rows, p.ty), block, 0, stream>>>(x, a.x_row_stride, w, b, y, a.mean, a.rstd, a.rows,
                                                         a.cols, a.eps, 1.f / static_cast<float>(a.cols));
    } else {
      const int vec = aligned ? full : 1;
      const int64_t row_bytes = a.cols * static_cast<int64_t>(sizeof(T));
      const bool stash = row_bytes <= kMaxStashBytes;
      const size_t smem = stash ? static_cast<size_t>(row_bytes) : 0;
      LIGER_DISPATCH_VEC(vec, full, {
        if (stash) {
          auto* kern = &ln_fwd_generic<T, WT, VEC, true>;
          // A failed raise shows up as the launch's error.
          raise_max_dynamic_smem(reinterpret_cast<const void*>(kern), smem);
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
  // The largest of all variants': the launcher reads the variant again, and a
  // change of LIGER_CPP_LN_BWD in between must not leave the workspace short.
  dispatch_ln_types(a.x_dtype, a.w_dtype, [&](auto xt, auto wt) {
    for (BwdVariant v : {BwdVariant::kOld, BwdVariant::kV1, BwdVariant::kV2, BwdVariant::kV3, BwdVariant::kV4,
                         BwdVariant::kV5, BwdVariant::kTma})
      n = std::max(n, plan_ln_bwd<decltype(xt), decltype(wt)>(a, sm_count, v).ws_floats);
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
  return dispatch_ln_types(a.x_dtype, a.w_dtype, [&](auto xt, auto wt) {
    using T = decltype(xt);
    using WT = decltype(wt);
    const BwdPlan p = plan_ln_bwd<T, WT>(a, sm_count, bwd_variant());
    const T* dy = static_cast<const T*>(a.dy);
    const T* x = static_cast<const T*>(a.x);
    const WT* w = static_cast<const WT*>(a.w);
    T* dx = static_cast<T*>(a.dx);
    float* pw = a.dw ? a.workspace : nullptr;
    const int64_t parts = p.pair ? p.grid / 2 : p.grid;  // partial rows
    float* pb = a.db ? a.workspace + (a.dw ? parts * a.cols : 0) : nullptr;
    constexpr int full = 16 / sizeof(T);
    if (p.pipe || p.pipe16 || p.tma) {
      if (p.tma && p.pair) {
        const cudaError_t err =
            launch_cluster_pdl(tma_kernel<T, WT>(), p.grid, p.tx, 2, p.smem, stream, dy, a.dy_row_stride, x,
                               a.x_row_stride, w, a.mean, a.rstd, dx, pw, pb, a.rows, a.cols);
        if (err != cudaSuccess) return err;
      } else if (p.tma) {
        const cudaError_t err =
            launch_pdl(tma_kernel<T, WT>(), dim3(static_cast<unsigned>(p.grid)),
                       dim3(static_cast<unsigned>(p.tx)), p.smem, stream, dy, a.dy_row_stride, x,
                       a.x_row_stride, w, a.mean, a.rstd, dx, pw, pb, a.rows, a.cols);
        if (err != cudaSuccess) return err;
      } else if (p.pipe16) {
        pipe16_kernel<T, WT>(p.variant)<<<p.grid, dim3(p.tx, p.ty), p.smem, stream>>>(
            dy, a.dy_row_stride, x, a.x_row_stride, w, a.mean, a.rstd, dx, pw, pb, a.rows, a.cols);
      } else {
        launch_pipe_variant<T, WT>(a, p, pw, pb, stream);
      }
      // These kernels take rows of whole 4-element vectors, so the float4
      // reduction runs; launch_reduce_partials falls back by itself otherwise.
      if (pw || pb) {
        const cudaError_t err = launch_reduce_partials<WT>(pw, static_cast<WT*>(a.dw), pb,
                                                           static_cast<WT*>(a.db), parts, a.cols, stream);
        if (err != cudaSuccess) return err;
      }
      return cudaGetLastError();
    }
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
