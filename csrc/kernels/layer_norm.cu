// LayerNorm forward and backward kernels (see layer_norm.h for the math).
// Same structure as the RMSNorm kernels (rms_norm.cu), whose helpers are in
// norm_common.cuh: a "cached" family that keeps each row in registers (the
// backward persistent, with dW and dB partials in fp32 registers), and a
// "generic" family for any width and alignment, and a pipelined backward
// (ln_bwd_pipe, chosen by LIGER_CPP_LN_BWD, default v3) for widths up to 4096
// (8192 for 16-bit types). dW/dB partials are finished by reduce_partials or
// ln_reduce_parts: deterministic, no atomics.
#include <cstdlib>
#include <cstring>
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

// Element j of VEC values of T packed in 32-bit words (16 bytes for the
// activations): register vectors kept as words, which nvcc does not split into
// one register per 16-bit element (Vec<bf16, 8> buffers spilled).
template <typename T>
__device__ __forceinline__ float word_elem(const uint32_t* w, int j) {
  if constexpr (std::is_same_v<T, float>) {
    return __uint_as_float(w[j]);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float((j & 1) ? (w[j >> 1] & 0xffff0000u) : (w[j >> 1] << 16));
  } else {
    return __half2float(
        __ushort_as_half(static_cast<unsigned short>((j & 1) ? (w[j >> 1] >> 16) : w[j >> 1])));
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

// dW and dB from the pipelined backward's partials ([groups, cols] each): 32
// columns per block, 32 row slices each summed in a fixed stride order, then
// transposed through shared memory so that warp k finishes column k with a
// butterfly. blockIdx.y picks dW (0) or dB (1). Deterministic.
template <typename WT>
__global__ void __launch_bounds__(1024)
    ln_reduce_parts(const float* __restrict__ pw, const float* __restrict__ pb, int64_t groups, int64_t cols,
                    WT* __restrict__ dw, WT* __restrict__ db) {
  __shared__ float s[32][33];
  const float* part = blockIdx.y == 0 ? pw : pb;
  WT* dst = blockIdx.y == 0 ? dw : db;
  if (part == nullptr) return;  // uniform across the block
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.f;
  if (c < cols) {
    int64_t g = threadIdx.y;
    // Four independent loads in flight per thread; the additions stay in order.
    for (; g + 96 < groups; g += 128) {
      const float a0 = part[g * cols + c], a1 = part[(g + 32) * cols + c];
      const float a2 = part[(g + 64) * cols + c], a3 = part[(g + 96) * cols + c];
      acc = (((acc + a0) + a1) + a2) + a3;
    }
    for (; g < groups; g += 32) acc += part[g * cols + c];
  }
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  float v = s[threadIdx.x][threadIdx.y];  // warp y: column y, slice = lane
  v = warp_sum(v);
  const int64_t cy = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.y;
  if (threadIdx.x == 0 && cy < cols) dst[cy] = from_float<WT>(v);
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
// ln_bwd_pipe takes 4 elements per vector (8 bytes for 16-bit types: 16-byte
// vectors spilled at 64 registers) and one vector per thread, or two without
// prefetch for 16-bit types; other widths and alignments go to the old paths
// whatever the choice (e.g. bf16 with more than 8192 columns).
enum class BwdVariant { kOld = 0, kV1 = 1, kV2 = 2, kV3 = 3 };
// v3: 8-byte vectors leave 16 KB per SM in flight per prefetched row; 2 rows ahead cover the latency.
constexpr BwdVariant kDefaultBwd = BwdVariant::kV3;

BwdVariant bwd_variant() {
  const char* e = std::getenv("LIGER_CPP_LN_BWD");
  if (e == nullptr) return kDefaultBwd;
  if (std::strcmp(e, "old") == 0) return BwdVariant::kOld;
  if (std::strcmp(e, "v1") == 0) return BwdVariant::kV1;
  if (std::strcmp(e, "v2") == 0) return BwdVariant::kV2;
  if (std::strcmp(e, "v3") == 0) return BwdVariant::kV3;
  return kDefaultBwd;
}

struct BwdPlan : Plan {
  bool pipe = false;  // ln_bwd_pipe with nv vectors per thread
  int nv = 1;
  BwdVariant variant = BwdVariant::kOld;
};

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
    if (smem > 48 * 1024)
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
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
  // The largest of all variants': the launcher reads the variant again, and a
  // change of LIGER_CPP_LN_BWD in between must not leave the workspace short.
  dispatch_ln_types(a.x_dtype, a.w ? a.w_dtype : a.x_dtype, [&](auto xt, auto wt) {
    for (BwdVariant v : {BwdVariant::kOld, BwdVariant::kV1, BwdVariant::kV2, BwdVariant::kV3})
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
  return dispatch_ln_types(a.x_dtype, a.w ? a.w_dtype : a.x_dtype, [&](auto xt, auto wt) {
    using T = decltype(xt);
    using WT = decltype(wt);
    const BwdPlan p = plan_ln_bwd<T, WT>(a, sm_count, bwd_variant());
    const T* dy = static_cast<const T*>(a.dy);
    const T* x = static_cast<const T*>(a.x);
    const WT* w = static_cast<const WT*>(a.w);
    T* dx = static_cast<T*>(a.dx);
    float* pw = a.dw ? a.workspace : nullptr;
    float* pb = a.db ? a.workspace + (a.dw ? p.grid * a.cols : 0) : nullptr;
    constexpr int full = 16 / sizeof(T);
    if (p.pipe) {
      launch_pipe_variant<T, WT>(a, p, pw, pb, stream);
      const dim3 rgrid(static_cast<unsigned>(ceil_div(a.cols, 32)), 2);
      if (pw || pb)
        ln_reduce_parts<WT><<<rgrid, dim3(32, 32), 0, stream>>>(
            pw, pb, p.grid, a.cols, static_cast<WT*>(a.dw), static_cast<WT*>(a.db));
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
