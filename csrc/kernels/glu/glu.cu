// SwiGLU / GeGLU forward and backward kernels (see swiglu.h for the math).
//
// Purely element-wise and memory-bound. Dense inputs are collapsed to a single
// row; those with 16-byte aligned operands (the usual case) run the dense
// kernels: one 16-byte vector of each operand per thread of a 128-thread block,
// 32-bit indices, 32 registers (glu_fwd_dense / glu_bwd_dense; see glu_grid()
// for the measurements). Other layouts run the tiled kernels: the [rows, cols]
// problem is cut into tiles of one row segment of kThreads * UNROLL * VEC
// elements; blocks walk the tiles grid-stride (the persistent forward) or take
// one tile each (the small backward). Each thread issues all UNROLL loads of
// every operand (16 bytes each when VEC = 16 / sizeof(T)) before any
// arithmetic. When a pointer or a row stride is not 16-byte aligned the tiled
// kernels run with VEC = 1. Their offsets are int64.
#include <cmath>
#include <initializer_list>
#include <type_traits>

#include "kernels/common/common.cuh"
#include "kernels/common/env_knob.h"
#include "kernels/common/launch_cache.h"
#include "kernels/glu/glu.h"

namespace liger_cpp::kernels {
namespace {

constexpr int kThreads = 256;
// Vectors per thread and operand, and the register cap through the minimum of
// resident blocks per SM, chosen with -Xptxas -v so that nothing spills:
// forward 4 x 2 loads of 16 B per thread, 2+ blocks/SM (<= 128 registers;
// 108-123 used); backward 2 x 3 loads, 2+ blocks/SM (more spill the GELUs).
// Measured alternatives (92e0066, LIGER_CPP_GLU_SHAPE, since removed; bf16
// 16384 x 14336 / 16384 x 8192, % of C fwd+bwd, this shape 93.1 / 92.8):
// 2 vectors per operand in 4+ blocks/SM 92.9 / 92.5; one vector in 8 blocks/SM
// (32 registers, the Triton kernels' shape) spills: 48.8 / 48.6. Nor did exp
// as one MUFU.EX2 for 2-byte types change anything (93.1 / 92.5). ncu against
// torch.compile's kernel (100-102 % of C; benchmarks/NOTES.md, Session 8):
// the same DRAM bytes, but its 128-thread blocks, one tile each, keep loads
// coming where these persistent blocks load, wait, compute and store in turn.
constexpr int kFwdUnroll = 4, kFwdMinBlocks = 2;
constexpr int kBwdUnroll = 2, kBwdMinBlocks = 2;
// The dense small-block kernels' block size and resident blocks per SM (their
// register caps: 32 each; no spills with nvcc 13.0); see glu_grid().
constexpr int kDenseThreads = 128, kDenseFwdBlocks = 16, kDenseBwdBlocks = 16;

template <GluAct ACT>
struct Act;

template <>
struct Act<GluAct::kSilu> {
  static __device__ __forceinline__ float f(float x) { return x / (1.f + expf(-x)); }
  static __device__ __forceinline__ void fd(float x, float& y, float& d) {
    const float s = 1.f / (1.f + expf(-x));
    y = x * s;
    d = s * (1.f + x * (1.f - s));
  }
};

// SiLU's sigmoid with its reciprocal taken without an IEEE division (the
// default; LIGER_CPP_GLU_SILU=div selects x / (1 + e), see silu_rcp()). The
// division compiles to a checked slow path: FCHK, a branch and a convergence
// barrier per element (60 BSSY in the bf16 forward's SASS against 4 for
// GELU-tanh's), and ran at 75.4 % of C forward, 82.0 % fwd+bwd against 88.2 /
// 91.0 % for this form (4096 x 14336 bf16, H200,
// benchmarks/results/2026-11-30-h200-swiglu-quick-c1a3bfe.log). Here 1 / d,
// d = 1 + e >= 1, is rcp.approx (subnormal results kept) refined by one Newton
// step, within about 1 ulp of the rounded reciprocal; d = inf gives 0 (the
// limit) instead of the step's NaN. No branches.
__device__ __forceinline__ float sigmoid_of_exp_neg(float e) {
  const float d = 1.f + e;
  float r;
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(d));
  r = fmaf(r, fmaf(-d, r, 1.f), r);
  return d == INFINITY ? 0.f : r;
}

template <>
struct Act<GluAct::kSiluRcp> {
  static __device__ __forceinline__ float f(float x) { return x * sigmoid_of_exp_neg(expf(-x)); }
  static __device__ __forceinline__ void fd(float x, float& y, float& d) {
    const float s = sigmoid_of_exp_neg(expf(-x));
    y = x * s;
    d = s * (1.f + x * (1.f - s));
  }
};

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoef = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

template <>
struct Act<GluAct::kGeluTanh> {
  static __device__ __forceinline__ float f(float x) {
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCoef * x * x * x));
    return 0.5f * x * (1.f + t);
  }
  static __device__ __forceinline__ void fd(float x, float& y, float& d) {
    const float x2 = x * x;
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCoef * x2 * x));
    y = 0.5f * x * (1.f + t);
    d = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluCoef * x2);
  }
};

template <>
struct Act<GluAct::kGeluErf> {
  static __device__ __forceinline__ float f(float x) { return 0.5f * x * (1.f + erff(x * kInvSqrt2)); }
  static __device__ __forceinline__ void fd(float x, float& y, float& d) {
    const float cdf = 0.5f * (1.f + erff(x * kInvSqrt2));
    y = x * cdf;
    d = cdf + x * kInvSqrt2Pi * expf(-0.5f * x * x);
  }
};

template <typename T, int VEC, GluAct ACT, int kThreads = kThreads, int kFwdUnroll = kFwdUnroll,
          int kMinBlocks = kFwdMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    glu_fwd_kernel(const T* __restrict__ a, int64_t as, const T* __restrict__ b, int64_t bs,
                   T* __restrict__ c, int64_t cs, int64_t cols, int64_t tiles_per_row, int64_t tiles) {
  constexpr int64_t kTile = static_cast<int64_t>(kThreads) * kFwdUnroll * VEC;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t row = t / tiles_per_row;
    const int64_t c0 = (t - row * tiles_per_row) * kTile;
    const T* ar = a + row * as;
    const T* br = b + row * bs;
    T* cr = c + row * cs;
    Vec<T, VEC> av[kFwdUnroll], bv[kFwdUnroll];
#pragma unroll
    for (int u = 0; u < kFwdUnroll; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        av[u] = load_vec<T, VEC>(ar + col);
        bv[u] = load_vec<T, VEC>(br + col);
      }
    }
#pragma unroll
    for (int u = 0; u < kFwdUnroll; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        Vec<T, VEC> cv;
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          cv.v[j] = from_float<T>(Act<ACT>::f(to_float<T>(av[u].v[j])) * to_float<T>(bv[u].v[j]));
        store_vec<T, VEC>(cr + col, cv);
      } else if (VEC > 1 && col < cols) {  // ragged end of a row (vector path only)
        for (int64_t k = col; k < cols; ++k)
          cr[k] = from_float<T>(Act<ACT>::f(to_float<T>(ar[k])) * to_float<T>(br[k]));
      }
    }
  }
}

// No __restrict__: da/db may be a/b. All loads of a tile precede its stores, and
// an element is only ever written by the thread that read it.
template <typename T, int VEC, GluAct ACT, int kThreads = kThreads, int kBwdUnroll = kBwdUnroll,
          int kMinBlocks = kBwdMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    glu_bwd_kernel(const T* dc, int64_t gs, const T* a, int64_t as, const T* b, int64_t bs, T* da,
                   int64_t das, T* db, int64_t dbs, int64_t cols, int64_t tiles_per_row, int64_t tiles) {
  constexpr int64_t kTile = static_cast<int64_t>(kThreads) * kBwdUnroll * VEC;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t row = t / tiles_per_row;
    const int64_t c0 = (t - row * tiles_per_row) * kTile;
    const T* gr = dc + row * gs;
    const T* ar = a + row * as;
    const T* br = b + row * bs;
    T* dar = da + row * das;
    T* dbr = db + row * dbs;
    Vec<T, VEC> gv[kBwdUnroll], av[kBwdUnroll], bv[kBwdUnroll];
#pragma unroll
    for (int u = 0; u < kBwdUnroll; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        gv[u] = load_vec<T, VEC>(gr + col);
        av[u] = load_vec<T, VEC>(ar + col);
        bv[u] = load_vec<T, VEC>(br + col);
      }
    }
#pragma unroll
    for (int u = 0; u < kBwdUnroll; ++u) {
      const int64_t col = c0 + static_cast<int64_t>(u * kThreads + threadIdx.x) * VEC;
      if (col + VEC <= cols) {
        Vec<T, VEC> dav, dbv;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float g = to_float<T>(gv[u].v[j]);
          float y, d;
          Act<ACT>::fd(to_float<T>(av[u].v[j]), y, d);
          dav.v[j] = from_float<T>(g * to_float<T>(bv[u].v[j]) * d);
          dbv.v[j] = from_float<T>(g * y);
        }
        store_vec<T, VEC>(dar + col, dav);
        store_vec<T, VEC>(dbr + col, dbv);
      } else if (VEC > 1 && col < cols) {
        for (int64_t k = col; k < cols; ++k) {
          const float g = to_float<T>(gr[k]);
          const float bk = to_float<T>(br[k]);
          float y, d;
          Act<ACT>::fd(to_float<T>(ar[k]), y, d);
          dar[k] = from_float<T>(g * bk * d);
          dbr[k] = from_float<T>(g * y);
        }
      }
    }
  }
}

// Dense small-block kernels (Grid::kDense): one 16-byte vector of each
// operand per thread, 32-bit indices (n < 2^31 - 2^16), no row structure. The
// thread at the end covers the ragged tail element by element. As in
// glu_bwd_kernel, da / db may be a / b (each element is read before the thread
// that read it writes it).
template <typename T, GluAct ACT>
__global__ void __launch_bounds__(kDenseThreads, kDenseFwdBlocks)
    glu_fwd_dense(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int n) {
  constexpr int VEC = 16 / sizeof(T);
  const int i = (static_cast<int>(blockIdx.x) * kDenseThreads + static_cast<int>(threadIdx.x)) * VEC;
  if (i + VEC <= n) {
    const Vec<T, VEC> av = load_vec<T, VEC>(a + i), bv = load_vec<T, VEC>(b + i);
    Vec<T, VEC> cv;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      cv.v[j] = from_float<T>(Act<ACT>::f(to_float<T>(av.v[j])) * to_float<T>(bv.v[j]));
    store_vec<T, VEC>(c + i, cv);
  } else {
    for (int k = i; k < n; ++k) c[k] = from_float<T>(Act<ACT>::f(to_float<T>(a[k])) * to_float<T>(b[k]));
  }
}

template <typename T, GluAct ACT>
__global__ void __launch_bounds__(kDenseThreads, kDenseBwdBlocks)
    glu_bwd_dense(const T* dc, const T* a, const T* b, T* da, T* db, int n) {
  constexpr int VEC = 16 / sizeof(T);
  const int i = (static_cast<int>(blockIdx.x) * kDenseThreads + static_cast<int>(threadIdx.x)) * VEC;
  if (i + VEC <= n) {
    const Vec<T, VEC> gv = load_vec<T, VEC>(dc + i), av = load_vec<T, VEC>(a + i),
                      bv = load_vec<T, VEC>(b + i);
    Vec<T, VEC> dav, dbv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float g = to_float<T>(gv.v[j]);
      float y, d;
      Act<ACT>::fd(to_float<T>(av.v[j]), y, d);
      dav.v[j] = from_float<T>(g * to_float<T>(bv.v[j]) * d);
      dbv.v[j] = from_float<T>(g * y);
    }
    store_vec<T, VEC>(da + i, dav);
    store_vec<T, VEC>(db + i, dbv);
  } else {
    for (int k = i; k < n; ++k) {
      const float g = to_float<T>(dc[k]);
      const float bk = to_float<T>(b[k]);
      float y, d;
      Act<ACT>::fd(to_float<T>(a[k]), y, d);
      da[k] = from_float<T>(g * bk * d);
      db[k] = from_float<T>(g * y);
    }
  }
}

// The dense kernels for rows with a stride (e.g. the two halves of a fused
// gate_up projection): the same one vector per operand and thread, blocks
// numbered row-major over (row, tile of kDenseThreads * VEC columns) with
// 32-bit tile arithmetic; only the row offsets are int64. Rows and strides
// are 16-byte aligned (vec_ok); a row's ragged end (cols % VEC) is covered
// element by element by the thread at its end.
template <typename T, GluAct ACT>
__global__ void __launch_bounds__(kDenseThreads, kDenseFwdBlocks)
    glu_fwd_rows(const T* __restrict__ a, int64_t as, const T* __restrict__ b, int64_t bs, T* __restrict__ c,
                 int64_t cs, int cols, int tiles_per_row) {
  constexpr int VEC = 16 / sizeof(T);
  const int tile = static_cast<int>(blockIdx.x);
  const int row = tile / tiles_per_row;
  const int i = ((tile - row * tiles_per_row) * kDenseThreads + static_cast<int>(threadIdx.x)) * VEC;
  a += static_cast<int64_t>(row) * as;
  b += static_cast<int64_t>(row) * bs;
  c += static_cast<int64_t>(row) * cs;
  if (i + VEC <= cols) {
    const Vec<T, VEC> av = load_vec<T, VEC>(a + i), bv = load_vec<T, VEC>(b + i);
    Vec<T, VEC> cv;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      cv.v[j] = from_float<T>(Act<ACT>::f(to_float<T>(av.v[j])) * to_float<T>(bv.v[j]));
    store_vec<T, VEC>(c + i, cv);
  } else {
    for (int k = i; k < cols; ++k) c[k] = from_float<T>(Act<ACT>::f(to_float<T>(a[k])) * to_float<T>(b[k]));
  }
}

// 10 blocks a SM (48 registers): at 32 the five row offsets spilled (up to
// 24 B), at 40 the IEEE-division SiLU (up to 80 B).
template <typename T, GluAct ACT>
__global__ void __launch_bounds__(kDenseThreads, 10)
    glu_bwd_rows(const T* dc, int64_t gs, const T* a, int64_t as, const T* b, int64_t bs, T* da, int64_t das,
                 T* db, int64_t dbs, int cols, int tiles_per_row) {
  constexpr int VEC = 16 / sizeof(T);
  const int tile = static_cast<int>(blockIdx.x);
  const int row = tile / tiles_per_row;
  const int i = ((tile - row * tiles_per_row) * kDenseThreads + static_cast<int>(threadIdx.x)) * VEC;
  dc += static_cast<int64_t>(row) * gs;
  a += static_cast<int64_t>(row) * as;
  b += static_cast<int64_t>(row) * bs;
  da += static_cast<int64_t>(row) * das;
  db += static_cast<int64_t>(row) * dbs;
  if (i + VEC <= cols) {
    const Vec<T, VEC> gv = load_vec<T, VEC>(dc + i), av = load_vec<T, VEC>(a + i),
                      bv = load_vec<T, VEC>(b + i);
    Vec<T, VEC> dav, dbv;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float g = to_float<T>(gv.v[j]);
      float y, d;
      Act<ACT>::fd(to_float<T>(av.v[j]), y, d);
      dav.v[j] = from_float<T>(g * to_float<T>(bv.v[j]) * d);
      dbv.v[j] = from_float<T>(g * y);
    }
    store_vec<T, VEC>(da + i, dav);
    store_vec<T, VEC>(db + i, dbv);
  } else {
    for (int k = i; k < cols; ++k) {
      const float g = to_float<T>(dc[k]);
      const float bk = to_float<T>(b[k]);
      float y, d;
      Act<ACT>::fd(to_float<T>(a[k]), y, d);
      da[k] = from_float<T>(g * bk * d);
      db[k] = from_float<T>(g * y);
    }
  }
}

// Rows of a dense (rows, cols) layout collapse into one row of rows * cols.
struct Shape {
  int64_t rows, cols;
};

inline Shape collapse(int64_t rows, int64_t cols, std::initializer_list<int64_t> strides) {
  if (rows <= 1) return {rows, cols};
  for (int64_t s : strides)
    if (s != cols) return {rows, cols};
  return {1, rows * cols};
}

// 16-byte vectors need every base pointer 16-byte aligned and, with several
// rows, every row stride a multiple of the vector.
inline bool vec_ok(int vec, int64_t rows, std::initializer_list<const void*> ptrs,
                   std::initializer_list<int64_t> strides) {
  for (const void* p : ptrs)
    if (!is_aligned(p, 16)) return false;
  if (rows > 1)
    for (int64_t s : strides)
      if (s % vec != 0) return false;
  return true;
}

// The grid: as many blocks as run at once, walking the tiles grid-stride.
// When tiles / blocks is not whole the last round runs only part of the
// blocks, but neither the fewest blocks for the same rounds nor one block per
// tile measured faster (92.1-92.8 % of C fwd+bwd against 92.4-93.0 % at 16384
// x 8192 / 14336 bf16, LIGER_CPP_GLU_GRID at c27c711, since removed).
inline int64_t grid_for(int64_t tiles, int64_t resident) { return tiles < resident ? tiles : resident; }

// The grids (LIGER_CPP_GLU_GRID, read on every call for A/B runs; unset:
// dense):
//  * persistent: the grid above (kThreads-thread blocks walking tiles of
//    several vectors a thread);
//  * small: torch.compile's pointwise shape (ncu, 8192 x 14336 bf16 forward:
//    128-thread blocks, one 16-byte vector of each operand a thread, one block
//    per tile, 32 registers, 85 % occupancy, DRAM 89.9 % against the persistent
//    grid's 82.5 %): glu_fwd_kernel / glu_bwd_kernel with kSmallThreads
//    threads, one vector per operand, one tile per block, the register cap
//    from kSmallFwdBlocks / kSmallBwdBlocks resident per SM (10 / 8: 48 / 64
//    registers; 12 / 9 spilled with nvcc 13.0);
//  * dense (the default): the small shape for dense operands (one row after
//    collapse, 16-byte aligned, fewer than kDenseMaxElems elements) without
//    the tile-to-row int64 division and with 32-bit indices (glu_fwd_dense /
//    glu_bwd_dense: 32 registers, 16 blocks of 128 threads per SM); rows
//    with strides (a fused gate_up projection's halves) run glu_fwd_rows /
//    glu_bwd_rows, the same with a 32-bit row index (branch glu-dense-rows:
//    NOT YET MEASURED). Misaligned operands run the persistent forward and
//    the small backward, the faster of those two grids in each direction.
// Measured (bf16, H200, % of C, fwd+bwd / fwd; benchmarks/results/
// 2026-11-30-h200-swiglu-grids-ba51f13): SwiGLU 16384 x 14336: dense 101.4 /
// 100.9, persistent 93.0 / 93.0, small 94.8 / 88.4 (torch.compile 101.7 /
// 101.7); GeGLU 16384 x 8192: dense 100.8 / 99.2, persistent 92.2 / 90.4. The
// small grid's int64 row arithmetic cost it the registers that the dense
// kernels spend on occupancy. A persistent grid that prefetched the next tile
// (83.5) and L2/L1 cache hints on loads (82.2) or stores (92.1) lost
// (swiglu-ab-1b5a435) and were removed.
constexpr int kSmallThreads = 128, kSmallFwdBlocks = 10, kSmallBwdBlocks = 8;
enum class Grid { kPersistent = 0, kSmall = 1, kDense = 2 };
constexpr int64_t kDenseMaxElems = INT32_MAX - 65536;  // 32-bit indices with room
// The grid a call runs: the knob's, dense by default; dense falls back to the
// persistent forward and the small backward where its operands do not qualify.
Grid glu_grid(bool bwd, bool dense_ok) {
  const int i = env_choice("LIGER_CPP_GLU_GRID", {"persistent", "small", "dense"});
  const Grid g = i < 0 ? Grid::kDense : static_cast<Grid>(i);
  if (g == Grid::kDense && !dense_ok) return bwd ? Grid::kSmall : Grid::kPersistent;
  return g;
}

// Which SiLU runs: LIGER_CPP_GLU_SILU=div (IEEE division, the A/B
// reference) or rcp / unset (Act<kSiluRcp>, the default). Read on every call
// (one getenv per launch) so that the benchmark can A/B both in one process and
// the tests can run each.
bool silu_rcp() { return env_choice("LIGER_CPP_GLU_SILU", {"rcp", "div"}) != 1; }

template <typename F>
cudaError_t dispatch_act(GluAct act, F&& f) {
  switch (act) {
    case GluAct::kSilu:
      if (silu_rcp()) return f(std::integral_constant<GluAct, GluAct::kSiluRcp>{});
      return f(std::integral_constant<GluAct, GluAct::kSilu>{});
    case GluAct::kGeluTanh:
      return f(std::integral_constant<GluAct, GluAct::kGeluTanh>{});
    case GluAct::kGeluErf:
      return f(std::integral_constant<GluAct, GluAct::kGeluErf>{});
    case GluAct::kSiluRcp:
      return f(std::integral_constant<GluAct, GluAct::kSiluRcp>{});
  }
  return cudaErrorInvalidValue;
}

// Blocks per SM of a kernel at kThreads threads (8 when the query fails).
template <typename K>
int64_t resident_blocks(K* kern, int sm_count) {
  const int per_sm = cached_blocks_per_sm(reinterpret_cast<const void*>(kern), kThreads, 0);
  return static_cast<int64_t>(sm_count > 0 ? sm_count : 132) * (per_sm > 0 ? per_sm : 2048 / kThreads);
}

}  // namespace

cudaError_t glu_fwd(const GluFwdArgs& p, int sm_count, cudaStream_t stream) {
  if (p.rows == 0 || p.cols == 0) return cudaSuccess;
  const Shape s = collapse(p.rows, p.cols, {p.a_row_stride, p.b_row_stride, p.c_row_stride});
  return dispatch_dtype(p.dtype, [&](auto tv) {
    using T = decltype(tv);
    constexpr int kVec = 16 / sizeof(T);
    return dispatch_act(p.act, [&](auto act) {
      constexpr GluAct A = decltype(act)::value;
      const T* a = static_cast<const T*>(p.a);
      const T* b = static_cast<const T*>(p.b);
      T* c = static_cast<T*>(p.c);
      const bool vec =
          vec_ok(kVec, s.rows, {p.a, p.b, p.c}, {p.a_row_stride, p.b_row_stride, p.c_row_stride});
      auto run = [&](auto* kern, int ve) {
        const int64_t tpr = ceil_div(s.cols, static_cast<int64_t>(kThreads) * kFwdUnroll * ve);
        const int64_t tiles = tpr * s.rows;
        kern<<<grid_for(tiles, resident_blocks(kern, sm_count)), kThreads, 0, stream>>>(
            a, p.a_row_stride, b, p.b_row_stride, c, p.c_row_stride, s.cols, tpr, tiles);
        return cudaGetLastError();
      };
      const int64_t dense_tpr = ceil_div(s.cols, int64_t{kDenseThreads} * kVec);
      const bool one_row = vec && s.rows == 1 && s.cols < kDenseMaxElems;
      const bool rows_ok = vec && s.cols < kDenseMaxElems && s.rows * dense_tpr <= INT32_MAX;
      const Grid grid = glu_grid(false, one_row || rows_ok);
      if (grid == Grid::kDense) {
        if (one_row)
          glu_fwd_dense<T, A><<<static_cast<unsigned>(dense_tpr), kDenseThreads, 0, stream>>>(
              a, b, c, static_cast<int>(s.cols));
        else
          glu_fwd_rows<T, A><<<static_cast<unsigned>(s.rows * dense_tpr), kDenseThreads, 0, stream>>>(
              a, p.a_row_stride, b, p.b_row_stride, c, p.c_row_stride, static_cast<int>(s.cols),
              static_cast<int>(dense_tpr));
        return cudaGetLastError();
      }
      if (grid != Grid::kPersistent &&
          s.rows * ceil_div(s.cols, kSmallThreads * (vec ? kVec : 1)) < INT32_MAX) {
        auto small = [&](auto* kern, int ve) {
          const int64_t tpr = ceil_div(s.cols, static_cast<int64_t>(kSmallThreads) * ve);
          const int64_t tiles = tpr * s.rows;
          kern<<<tiles, kSmallThreads, 0, stream>>>(a, p.a_row_stride, b, p.b_row_stride, c, p.c_row_stride,
                                                    s.cols, tpr, tiles);
          return cudaGetLastError();
        };
        if (vec) return small(&glu_fwd_kernel<T, kVec, A, kSmallThreads, 1, kSmallFwdBlocks>, kVec);
        return small(&glu_fwd_kernel<T, 1, A, kSmallThreads, 1, kSmallFwdBlocks>, 1);
      }
      if (vec) return run(&glu_fwd_kernel<T, kVec, A>, kVec);
      return run(&glu_fwd_kernel<T, 1, A>, 1);
    });
  });
}

cudaError_t glu_bwd(const GluBwdArgs& p, int sm_count, cudaStream_t stream) {
  if (p.rows == 0 || p.cols == 0) return cudaSuccess;
  const Shape s = collapse(
      p.rows, p.cols, {p.dc_row_stride, p.a_row_stride, p.b_row_stride, p.da_row_stride, p.db_row_stride});
  return dispatch_dtype(p.dtype, [&](auto tv) {
    using T = decltype(tv);
    constexpr int kVec = 16 / sizeof(T);
    return dispatch_act(p.act, [&](auto act) {
      constexpr GluAct A = decltype(act)::value;
      const T* dc = static_cast<const T*>(p.dc);
      const T* a = static_cast<const T*>(p.a);
      const T* b = static_cast<const T*>(p.b);
      T* da = static_cast<T*>(p.da);
      T* db = static_cast<T*>(p.db);
      const bool vec =
          vec_ok(kVec, s.rows, {p.dc, p.a, p.b, p.da, p.db},
                 {p.dc_row_stride, p.a_row_stride, p.b_row_stride, p.da_row_stride, p.db_row_stride});
      auto run = [&](auto* kern, int ve) {
        const int64_t tpr = ceil_div(s.cols, static_cast<int64_t>(kThreads) * kBwdUnroll * ve);
        const int64_t tiles = tpr * s.rows;
        kern<<<grid_for(tiles, resident_blocks(kern, sm_count)), kThreads, 0, stream>>>(
            dc, p.dc_row_stride, a, p.a_row_stride, b, p.b_row_stride, da, p.da_row_stride, db,
            p.db_row_stride, s.cols, tpr, tiles);
        return cudaGetLastError();
      };
      const int64_t dense_tpr = ceil_div(s.cols, int64_t{kDenseThreads} * kVec);
      const bool one_row = vec && s.rows == 1 && s.cols < kDenseMaxElems;
      const bool rows_ok = vec && s.cols < kDenseMaxElems && s.rows * dense_tpr <= INT32_MAX;
      const Grid grid = glu_grid(true, one_row || rows_ok);
      if (grid == Grid::kDense) {
        if (one_row)
          glu_bwd_dense<T, A><<<static_cast<unsigned>(dense_tpr), kDenseThreads, 0, stream>>>(
              dc, a, b, da, db, static_cast<int>(s.cols));
        else
          glu_bwd_rows<T, A><<<static_cast<unsigned>(s.rows * dense_tpr), kDenseThreads, 0, stream>>>(
              dc, p.dc_row_stride, a, p.a_row_stride, b, p.b_row_stride, da, p.da_row_stride, db,
              p.db_row_stride, static_cast<int>(s.cols), static_cast<int>(dense_tpr));
        return cudaGetLastError();
      }
      if (grid != Grid::kPersistent &&
          s.rows * ceil_div(s.cols, kSmallThreads * (vec ? kVec : 1)) < INT32_MAX) {
        auto small = [&](auto* kern, int ve) {
          const int64_t tpr = ceil_div(s.cols, static_cast<int64_t>(kSmallThreads) * ve);
          const int64_t tiles = tpr * s.rows;
          kern<<<tiles, kSmallThreads, 0, stream>>>(dc, p.dc_row_stride, a, p.a_row_stride, b, p.b_row_stride,
                                                    da, p.da_row_stride, db, p.db_row_stride, s.cols, tpr,
                                                    tiles);
          return cudaGetLastError();
        };
        if (vec) return small(&glu_bwd_kernel<T, kVec, A, kSmallThreads, 1, kSmallBwdBlocks>, kVec);
        return small(&glu_bwd_kernel<T, 1, A, kSmallThreads, 1, kSmallBwdBlocks>, 1);
      }
      if (vec) return run(&glu_bwd_kernel<T, kVec, A>, kVec);
      return run(&glu_bwd_kernel<T, 1, A>, 1);
    });
  });
}

}  // namespace liger_cpp::kernels
