// LayerNorm backward, pipelined with 4-element vectors (ln_bwd_pipe): rows of
// up to 1024 vectors (2048 for 16-bit types, two a thread), the next rows in
// registers. The default for rows of 513..1024 16-byte vectors (bf16 hidden
// 4104..8192), and for rows of whole 4-element vectors that are not whole
// 16-byte vectors. docs/kernels/layer_norm.md.
#include "kernels/layer_norm/layer_norm_impl.h"
#include "kernels/layer_norm/layer_norm_kernels.cuh"

namespace liger_cpp::kernels {
namespace {

using layer_norm_impl::kPipeBlock;

// Backward, pipelined: persistent blocks of BLOCK = 1024 threads (one a SM:
// 32 warps, <= 64 registers), TX = blockDim.x threads per row with NV vectors
// of VB bytes each (VEC = VB / sizeof(T) elements; so the dW/dB partials take
// 2 x NV x VEC registers; 16-byte vectors spilled), TY = blockDim.y rows per
// block step. x and dy of the
// next DEPTH - 1 rows are loaded before the current row is reduced, so loads
// stay in flight across the block barrier; sum(g) and sum(g * xhat) share one
// barrier per row (float2, double-buffered scratch: a buffer is rewritten only
// after the next barrier, which every reader of it has passed).
template <typename T, typename WT, int VB, int NV, int DEPTH>
__global__ void __launch_bounds__(kPipeBlock, 1)
    ln_bwd_pipe(const T* __restrict__ dy, int64_t dy_stride, const T* __restrict__ x, int64_t x_stride,
                const WT* __restrict__ w, const float* __restrict__ mean, const float* __restrict__ rstd,
                T* __restrict__ dx, float* __restrict__ pw, float* __restrict__ pb, int64_t rows,
                int64_t cols) {
  constexpr int BLOCK = kPipeBlock;
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

}  // namespace

namespace layer_norm_impl {

cudaError_t launch_bwd_pipe(const LayerNormBwdArgs& a, const LayerNormBwdPlan& p, float* pw, float* pb,
                            cudaStream_t stream) {
  return dispatch_ln_types(a.x_dtype, a.w_dtype, cudaErrorInvalidValue, [&](auto xt, auto wt) {
    using T = decltype(xt);
    using WT = decltype(wt);
    auto run = [&](auto* kern) {
      kern<<<static_cast<unsigned>(p.grid),
             dim3(static_cast<unsigned>(p.threads), static_cast<unsigned>(p.rows_per_block)), p.smem,
             stream>>>(static_cast<const T*>(a.dy), a.dy_row_stride, static_cast<const T*>(a.x),
                       a.x_row_stride, static_cast<const WT*>(a.w), a.mean, a.rstd, static_cast<T*>(a.dx), pw,
                       pb, a.rows, a.cols);
      return cudaGetLastError();
    };
    constexpr int VB = 4 * sizeof(T);
    if constexpr (sizeof(T) == 2) {
      // Two vectors a thread without prefetch (it spilled), one with two rows ahead.
      if (p.vectors_per_thread == 2) return run(&ln_bwd_pipe<T, WT, VB, 2, 1>);
      return run(&ln_bwd_pipe<T, WT, VB, 1, 3>);
    } else {
      return run(&ln_bwd_pipe<T, WT, VB, 1, 2>);  // one row ahead: fp32 spilled with two
    }
  });
}

}  // namespace layer_norm_impl
}  // namespace liger_cpp::kernels
